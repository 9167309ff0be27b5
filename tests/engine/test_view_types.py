"""Values keep their Python types across runs: a view with every column type gives the same tables
whether its messages arrive in one batch or split over many runs, and they equal a plain-Python fold
of the same messages, and `replay` gives them too. The view (tests/helpdesk_views.py) asserts the types it
reads back, so a value that came back as another type parks its stream and shows here."""

from __future__ import annotations

import json
import tempfile
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.testing import replay
from tests.harness import fresh_home, read_store, run_entries
from tests.helpdesk_views import HELPDESK
from tests.reference_model import Entry, _plain
from tests.strategies import T0, batches_of
from tests.profiles import spark_examples

START = datetime(2026, 3, 1, 22, 0, tzinfo=timezone.utc)
OFFSETS = ("Z", "+00:00", "+05:30", "-08:00")
CENT = Decimal("0.01")


def _stamp(moment: datetime, offset: str) -> str:
    if offset == "Z":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    sign, hours, minutes = (1 if offset[0] == "+" else -1), int(offset[1:3]), int(offset[4:6])
    shift = timezone(sign * timedelta(hours=hours, minutes=minutes))
    return moment.astimezone(shift).isoformat()


@st.composite
def ticket_histories(draw) -> list[dict]:
    """A few tickets, each opened then replied to, worked on, closed and reopened, hours or days apart."""
    records = []
    for t in range(draw(st.integers(1, 3))):
        stream_id, moment = f"T-{t + 1}", START + timedelta(minutes=draw(st.integers(0, 600)))
        # JSON numbers with up to three places (a float's repr is that exact text): DECIMAL(10,2) rounds them
        cost = draw(st.one_of(st.integers(0, 500), st.decimals("0", "500", places=3).map(float)))
        events = [("TicketOpened", {"title": f"ticket {t}", "priority": draw(st.integers(1, 5)),
                                    "urgent": draw(st.booleans()), "cost": cost})]
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(st.sampled_from(["Replied", "EffortLogged", "Closed", "Reopened"]))
            payload = {"hours": draw(st.integers(1, 40)) / 4, "rate": draw(st.integers(0, 90))} \
                if kind == "EffortLogged" else {}
            events.append((kind, payload))
        for seq, (kind, payload) in enumerate(events, start=1):
            moment += timedelta(minutes=draw(st.sampled_from([7, 90, 600, 1440, 3000])))
            records.append({"stream_id": stream_id, "stream_type": "ticket", "seq": seq, "type": kind,
                            "payload": payload, "occurred_at": _stamp(moment, draw(st.sampled_from(OFFSETS)))})
    return records


def expected_tickets(records: list[dict]) -> list[dict]:
    """The `tickets` table by a plain fold over each ticket's messages in seq order (no engine code)."""
    rows = {}
    for r in sorted(records, key=lambda r: (r["stream_id"], r["seq"])):
        at = datetime.fromisoformat(r["occurred_at"].replace("Z", "+00:00")).astimezone(timezone.utc)
        p, kind = r["payload"], r["type"]
        if kind == "TicketOpened":
            rows[r["stream_id"]] = {
                "ticket_id": r["stream_id"], "title": p["title"], "status": "open", "opened_on": at.date(),
                "opened_at": at, "priority": p["priority"], "replies": 0, "urgent": p["urgent"], "effort_hours": 0.0,
                "cost": Decimal(str(p["cost"])).quantize(CENT, ROUND_HALF_UP), "days_open": 0,
                "hours_to_reply": None, "last_on": at.date()}
            continue
        row = rows[r["stream_id"]]
        if kind == "EffortLogged":
            row["effort_hours"] += p["hours"]
            row["cost"] = (row["cost"] + Decimal(str(p["hours"])) * p["rate"]).quantize(CENT, ROUND_HALF_UP)
            continue
        row["days_open"], row["last_on"] = (at.date() - row["opened_on"]).days, at.date()
        if kind == "Replied":
            row["replies"] += 1
            if row["hours_to_reply"] is None:
                row["hours_to_reply"] = (at - row["opened_at"]).total_seconds() / 3600
        else:
            row["status"] = "closed" if kind == "Closed" else "open"
            row["urgent"] = row["urgent"] and kind == "Reopened"
    return [{c: _plain(v) for c, v in row.items()} for _, row in sorted(rows.items())]


def engine_tables(spark, entries: list[Entry]) -> dict[str, list[dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        home = fresh_home(Path(tmp))
        run_entries(spark, home, [HELPDESK], entries)
        store = read_store(home, [HELPDESK])
    assert not [w for w in store["watermarks"] if w["parked"]], store["errors"]
    return {t.name: store[t.name] for t in HELPDESK.tables}


def _plain_tables(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {name: [{c: _plain(v) for c, v in row.items()} for row in rows] for name, rows in tables.items()}


@settings(max_examples=spark_examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(records=ticket_histories(), data=st.data())
def test_every_column_type_survives_any_split_into_runs(spark, records, data):
    lines = [json.dumps(r) for r in records]
    one_batch = engine_tables(spark, [Entry("batch", "all", T0, lines=lines)])
    many_runs = engine_tables(spark, data.draw(batches_of(lines, allow_timeouts=False, shuffle=True)))
    assert many_runs == one_batch
    assert one_batch["tickets"] == expected_tickets(records)
    typed = replay(HELPDESK, records).tables  # the test kit agrees, with typed values
    assert _plain_tables(typed) == one_batch
    assert all(type(row["opened_on"]) is date and row["opened_at"].tzinfo is timezone.utc
               for row in typed["tickets"])

