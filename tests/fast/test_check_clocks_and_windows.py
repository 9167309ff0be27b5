"""The operator's checks on a read store built by hand (no Spark): `no_overdue_blocked_streams` judges gap
timers by the data's clock (logical time), and by the wall clock only for a home whose runs take their time
from it; the rate checks count every outcome a run produced, a tick's and a retry's included."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pytest

from pipelines.observe.checks import no_handler_bugs, no_overdue_blocked_streams, rate
from pipelines.store.database import ENGINE_DDL
from pipelines.view import Column, Table, View

T = datetime(2026, 11, 2, tzinfo=timezone.utc)  # logical times the wall clock has long passed
TICK_INTERVAL = timedelta(minutes=5)
TRIPS = View(name="trips", tables=(Table("trips", {"trip_id": Column(str), "fare": Column(float)}, ("trip_id",),
                                         stream_key="trip_id"),),
             subscribes=("trip",), gap_timeout=600)


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute(ENGINE_DDL)
    yield con
    con.close()


def record(con, entry_idx: int, kind: str, at: datetime, committed_at: datetime | None = None, *,
           selected: int = 0, applied: int = 0, handler_error: int = 0, pending: int = 0) -> None:
    """An entry of the ingest log at logical time `at`; with `committed_at`, the view's ledger row for it."""
    con.execute("INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, status) "
                "VALUES (?, ?, ?, ?, 'archived')", [entry_idx, f"{kind}-{entry_idx}", kind, at])
    if committed_at is not None:
        con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at, records, malformed, "
                    "normalised, selected, unrouted, applied, ignored, handler_error, duplicate, late, conflict, "
                    "pending, gaps_skipped, committed_at) VALUES (?, 'trips', ?, ?, ?, 0, 0, 0, ?, 0, ?, 0, ?, 0, 0, "
                    "0, ?, 0, ?)", [f"{kind}-{entry_idx}", entry_idx, kind, at, selected, applied, handler_error,
                                    pending, committed_at])


def block(con, stream_id: str, since: datetime) -> None:
    """A stream waiting for seq 3 since `since`, with seq 4 buffered."""
    con.execute("INSERT INTO inorder.watermarks (view, stream_id, stream_type, last_seq, blocked_at, blocked_since, "
                "pending_count) VALUES ('trips', ?, 'trip', 2, 3, ?, 1)", [stream_id, since])
    con.execute("INSERT INTO inorder.pending (view, stream_id, seq) VALUES ('trips', ?, 4)", [stream_id])


def log_handler_errors(con, entry_idx: int, error_class: str, count: int, attempt: int = 1) -> None:
    for seq in range(count):
        con.execute("INSERT INTO inorder.errors (view, stream_id, seq, kind, exception_type, message, error_class, "
                    "entry_idx, attempt) VALUES ('trips', ?, 5, 'handler_error', ?, 'trip already requested', ?, ?, ?)",
                    [f"trip-{seq:04}", "Reject" if error_class == "reject" else "KeyError", error_class, entry_idx,
                     attempt])


def overdue(con) -> tuple[bool, dict, str]:
    outcome = no_overdue_blocked_streams(TICK_INTERVAL, con, TRIPS)
    return outcome.passed, outcome.metadata, outcome.description


def test_a_timer_not_due_in_logical_time_never_fails_whatever_the_wall_clock(con):
    """A first batch given `--now` in the past: its gap's timer is due 10 minutes later in logical time,
    which the wall clock passed weeks ago. No entry has reached that time: nothing is overdue."""
    record(con, 1, "batch", T, committed_at=T + timedelta(days=26), selected=2, applied=1, pending=1)
    block(con, "trip-0001", T)
    passed, metadata, description = overdue(con)
    assert passed and metadata["overdue_streams"] == 0
    assert metadata["clock"] == "logical" and metadata["judged_at"] == T.isoformat()
    assert description.startswith(f"No stream is blocked past its gap timer at {T.isoformat()} by logical time")
    assert "a time its run was given" in description


def test_a_timer_due_in_logical_time_that_did_not_fire_fails(con):
    """A tick 15 minutes on in logical time that the view has not projected: its timer was due there."""
    record(con, 1, "batch", T, committed_at=T + timedelta(days=26), selected=2, applied=1, pending=1)
    block(con, "trip-0001", T)
    block(con, "trip-0002", T + timedelta(minutes=10))  # due at 00:20: not yet
    record(con, 2, "tick", T + timedelta(minutes=15))
    passed, metadata, description = overdue(con)
    assert not passed and metadata["overdue_streams"] == 1 and metadata["clock"] == "logical"
    (oldest,) = metadata["oldest"]
    assert oldest["stream_id"] == "trip-0001" and oldest["waiting_for_seq"] == 3
    assert oldest["timer_due_at"] == (T + timedelta(minutes=10)).isoformat() and oldest["overdue_seconds"] == 300
    assert description.startswith(f"1 streams are blocked past their gap timer at "
                                  f"{(T + timedelta(minutes=15)).isoformat()} by logical time")
    assert "`inorder pending --view trips` lists them." in description and "tick schedule" not in description
    assert metadata["next_command"] == "inorder pending --view trips"


def test_a_home_whose_runs_take_the_wall_clock_is_judged_by_it(con):
    """Runs with no `--now`: the newest entry was committed seconds after its logical time. An hour later by
    the clock, with no tick recorded since, a 10-minute timer should have fired: the tick schedule is not
    running."""
    wall = datetime.now(timezone.utc)
    then = wall - timedelta(hours=1)
    record(con, 1, "batch", then, committed_at=then + timedelta(seconds=4), selected=2, applied=1, pending=1)
    block(con, "trip-0001", then)
    passed, metadata, description = overdue(con)
    assert not passed and metadata["overdue_streams"] == 1 and metadata["clock"] == "wall"
    judged_at = datetime.fromisoformat(metadata["judged_at"])
    assert wall - TICK_INTERVAL <= judged_at <= datetime.now(timezone.utc) - TICK_INTERVAL
    assert "by the wall clock, less the tick interval (the runs take their time from the clock, and the newest " \
           "entry is 1:00:00 old)" in description
    assert description.endswith("Is the tick schedule running?")


@pytest.mark.parametrize("minutes_ago, clock, said", [
    (12, "wall", "the newest entry is 0:12:00 old"),  # due 2 minutes ago by the clock: the next tick fires it
    (3, "logical", "less than a tick interval has passed since"),
])
def test_a_timer_the_next_tick_fires_is_not_overdue_by_the_wall_clock(con, minutes_ago, clock, said):
    then = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    record(con, 1, "batch", then, committed_at=then + timedelta(seconds=4), selected=2, applied=1, pending=1)
    block(con, "trip-0001", then)
    passed, metadata, description = overdue(con)
    assert passed and metadata["overdue_streams"] == 0 and metadata["clock"] == clock and said in description


def test_a_tick_that_releases_refused_messages_is_judged_on_what_it_released(con):
    """The finding: a tick two days after the last batch skips a gap, and the messages it releases are
    refused by the handler, 124 of 130. The tick selected nothing; its outcomes are what is judged."""
    record(con, 1, "batch", T, committed_at=T + timedelta(seconds=5), selected=500, applied=370, pending=130)
    record(con, 2, "tick", T + timedelta(days=2), committed_at=T + timedelta(days=2, seconds=5), applied=6,
           handler_error=124)
    log_handler_errors(con, 2, "reject", 124)
    judged = rate("reject", "handler_error", con, TRIPS)
    assert not judged.passed and judged.severity == "ERROR"
    assert (judged.metadata["last_run/reject"], judged.metadata["last_run/outcomes"]) == (124, 130)
    assert judged.metadata["last_run/rate_pct"] == 95.38 and judged.metadata["last_24_h/outcomes"] == 130
    assert judged.description.startswith("reject rate 95.38% in the last run (124 of 130 outcomes)")
    assert "| trip already requested | 124 | 124 | trip-0000 seq 5 |" in judged.metadata["top_reasons"]


def test_a_parked_message_a_retry_fails_again_is_one_outcome_of_the_retry(con):
    """Parked messages stay buffered, so the ledger does not count their failure; the error log does, once
    per message however often it was retried. A retry that applies 120 messages and fails again on 30
    parked ones brought 150 messages to an outcome, 30 of them a bug."""
    record(con, 1, "batch", T, committed_at=T + timedelta(seconds=5), selected=150, pending=150)
    log_handler_errors(con, 1, "bug", 30)
    record(con, 2, "retry", T + timedelta(days=2), committed_at=T + timedelta(days=2, seconds=5), applied=120)
    log_handler_errors(con, 2, "bug", 30, attempt=2)
    judged = no_handler_bugs(con, TRIPS)
    assert not judged.passed
    assert (judged.metadata["last_run/bug"], judged.metadata["last_run/outcomes"]) == (30, 150)
    assert judged.description == "30 messages failed on a bug in the view's handlers in the last run (150 outcomes)"
    assert rate("reject", "handler_error", con, TRIPS).metadata["last_run/rate_pct"] == 0.0
