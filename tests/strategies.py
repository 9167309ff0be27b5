"""Hypothesis strategies: bank-domain scenarios (lists of `Entry`) with every kind of disorder."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace as dataclass_replace
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from tests.reference_model import Entry

T0 = 1_700_000_000.0
OWNERS = ("ada", "bob", "chen", "dana", "émile")
MALFORMED_LINES = (
    "{not json",
    "",
    "   ",
    "[1, 2, 3]",
    '"just a string"',
    '{"seq": 1, "type": "Deposited"}',
    '{"stream_id": "", "seq": 1, "type": "Deposited"}',
    '{"stream_id": true, "seq": 1, "type": "Deposited"}',
    '{"stream_id": "acct-x", "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": 0, "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": -1, "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": 1.0, "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": " 1", "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": "+1", "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": true, "type": "Deposited"}',
    '{"stream_id": "acct-x", "seq": 1}',
    '{"stream_id": "acct-x", "seq": 1, "type": ""}',
    '{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "occurred_at": 5}',
    '{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "event_id": 1.5}',
    '{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "stream_type": ""}',
    '{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "payload": {"amount": NaN}}',
    '{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "payload": {"amount": 1e999}}',
    b'{"stream_id": "acct-x", "seq": 1, "type": "Deposited", "payload": {"owner": "\xff"}}',
)


def _amount(draw) -> float | int:
    cents = draw(st.integers(1, 50_000))
    return cents // 100 if cents % 100 == 0 and draw(st.booleans()) else float(Decimal(cents) / 100)


def _occurred_at(draw, seq: int) -> str:
    hour = 20 + seq  # a few events cross midnight, and the offset moves some to another UTC day
    day, hour = 1 + hour // 24, hour % 24
    offset = draw(st.sampled_from(["+00:00", "Z", "-05:00", "+09:00"]))
    return f"2024-03-{day:02d}T{hour:02d}:15:00{offset}"


@st.composite
def histories(draw, max_streams: int = 4, max_events: int = 40, first_seq: int = 1) -> list[dict]:
    """Valid-ish in-order histories of a few accounts, as message dicts (not yet disordered), their seqs
    starting at `first_seq`."""
    n_streams = draw(st.integers(1, max_streams))
    per_stream = max(1, max_events // n_streams)
    messages = []
    for i in range(n_streams):
        stream_id = draw(st.sampled_from([f"acct-{i + 1}", 100 + i])) if i == 0 else f"acct-{i + 1}"
        length, balance = draw(st.integers(1, per_stream)), Decimal(0)
        for seq in range(first_seq, first_seq + length):
            if seq == first_seq:
                event_type, payload = "AccountOpened", {"owner": draw(st.sampled_from(OWNERS))}
            elif seq == first_seq + length - 1 and length > 2 and draw(st.integers(0, 3)) == 0:
                event_type, payload = "AccountClosed", {}
            else:
                event_type, amount = draw(st.sampled_from(["Deposited", "Deposited", "Withdrawn"])), _amount(draw)
                payload = {"amount": amount}
                balance += Decimal(str(amount)) * (1 if event_type == "Deposited" else -1)
            message = {"stream_id": stream_id, "seq": draw(st.sampled_from([seq, seq, str(seq)])),
                       "type": event_type, "payload": payload, "occurred_at": _occurred_at(draw, seq - first_seq + 1),
                       "event_id": draw(st.sampled_from([f"{stream_id}-{seq}", 10_000 * (i + 1) + seq]))}
            if event_type == "AccountClosed" and draw(st.booleans()):
                del message["payload"]
            messages.append(message)
    return messages


def _poison(draw, message: dict) -> dict:
    message = json.loads(json.dumps(message))
    kind = draw(st.sampled_from(["abc", "negative", "no_owner", "bad_time", "three_decimals"]))
    payload = message.setdefault("payload", {})
    if kind == "no_owner" and message["type"] == "AccountOpened":
        payload.pop("owner", None)
    elif kind == "bad_time":
        message["occurred_at"] = draw(st.sampled_from(["yesterday", "", None]))
    elif kind == "negative":
        payload["amount"] = -5
    elif kind == "three_decimals":
        payload["amount"] = 1.005
    else:
        payload["amount"] = "abc"
    return message


@st.composite
def _times(draw, count: int, allow_timeouts: bool) -> list[float]:
    steps = st.sampled_from([1, 5, 30, 120, 599, 600, 601, 900, 3600]) if allow_timeouts else st.integers(1, 3)
    times, t = [], T0
    for _ in range(count):
        times.append(t)
        t += draw(steps)
    return times


@st.composite
def batches_of(draw, lines: list, allow_timeouts: bool = True, ticks: bool = True,
               shuffle: bool = False) -> list[Entry]:
    """Split record lines into batches (optionally shuffled, optionally with ticks between them)."""
    if shuffle:
        lines = draw(st.permutations(lines))
    groups, rest = [], list(lines)
    while rest:
        size = draw(st.integers(1, max(1, min(len(rest), 8))))
        groups.append(rest[:size])
        rest = rest[size:]
    plan = []
    for group in groups:
        if ticks and draw(st.integers(0, 3)) == 0:
            plan.append(None)
        plan.append(group)
    if ticks and draw(st.booleans()):
        plan.append(None)
    times = draw(_times(len(plan), allow_timeouts))
    entries = []
    for idx, (group, t) in enumerate(zip(plan, times), 1):
        if group is None:
            entries.append(Entry("tick", f"tick-{idx}", t))
        else:
            entries.append(Entry("batch", f"b{idx:04d}", t, lines=list(group)))
    return entries


@st.composite
def scenario_lines(draw, max_streams: int = 4, max_events: int = 40, allow_conflicts: bool = True) -> list:
    """The delivered record lines, in arrival order: disordered, duplicated, gappy, poisoned."""
    delivered = []
    for message in draw(histories(max_streams, max_events)):
        if draw(st.integers(0, 9)) == 0:
            continue  # a gap: never delivered
        if draw(st.integers(0, 11)) == 0:
            message = _poison(draw, message)
        delivered.append(message)
        if draw(st.integers(0, 7)) == 0:
            delivered.append(message)  # exact duplicate
        if allow_conflicts and draw(st.integers(0, 9)) == 0 and message["type"] != "AccountOpened":
            delivered.append({**message, "payload": {"amount": _amount(draw)}, "event_id": None})
    if draw(st.integers(0, 4)) == 0:
        delivered.append({"stream_id": "ord-1", "stream_type": "order", "seq": 1, "type": "OrderPlaced"})
    lines: list = [json.dumps(m, ensure_ascii=draw(st.booleans())) for m in delivered]
    lines += draw(st.lists(st.sampled_from(MALFORMED_LINES), max_size=3))
    return draw(st.permutations(lines))


@st.composite
def scenarios(draw, max_streams: int = 4, max_events: int = 40, allow_timeouts: bool = True,
              allow_conflicts: bool = True) -> list[Entry]:
    lines = draw(scenario_lines(max_streams, max_events, allow_conflicts))
    return draw(batches_of(lines, allow_timeouts=allow_timeouts, ticks=True))


def lines_of(entries: list[Entry]) -> list:
    """Every record line of the batch entries, in arrival order."""
    return [line for e in entries if e.kind == "batch" for line in (e.lines or [])]


def resplit(entries: list[Entry], shuffle: bool = True) -> st.SearchStrategy[list[Entry]]:
    """The same messages split into batches another way (small time steps, so no gap times out)."""
    return batches_of(lines_of(entries), allow_timeouts=False, ticks=True, shuffle=shuffle)


# -- the hard cases (issue 15): for the fast model-vs-replay tests (tests/fast/test_model_vs_replay.py) -----

def reserialised(message: dict, draw) -> str:
    """The same record written another way: keys in another order, other spacing, non-ASCII escaped or
    not. Its content is the same, so a second copy is a duplicate, never a conflict."""
    items = list(message.items())
    order = draw(st.permutations(items))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    return json.dumps(dict(order), separators=separators, ensure_ascii=draw(st.booleans()))


def _other_time(text: str | None) -> str:
    return "2024-03-09T09:09:09+00:00" if text != "2024-03-09T09:09:09+00:00" else "2024-03-10T10:10:10+00:00"


@st.composite
def hard_lines(draw, max_streams: int = 3, max_events: int = 24, first_seq: int = 1) -> list:
    """Delivered record lines with what `scenario_lines` has, plus second copies that differ from the
    first only in `occurred_at`, or only in `event_id` (conflicts: DESIGN's "same content" is event
    type, payload, occurred_at and event_id), and re-serialised copies (duplicates)."""
    delivered: list = []
    for message in draw(histories(max_streams, max_events, first_seq)):
        if draw(st.integers(0, 9)) == 0:
            continue  # a gap: never delivered
        if draw(st.integers(0, 11)) == 0:
            message = _poison(draw, message)
        delivered.append(json.dumps(message, ensure_ascii=draw(st.booleans())))
        copy = draw(st.integers(0, 11))
        if copy == 0:
            delivered.append(reserialised(message, draw))
        elif copy == 1:
            delivered.append(json.dumps({**message, "occurred_at": _other_time(message.get("occurred_at"))}))
        elif copy == 2:
            delivered.append(json.dumps({**message, "event_id": f"{message.get('event_id')}-again"}))
        elif copy == 3 and "event_id" in message:
            delivered.append(json.dumps({k: v for k, v in message.items() if k != "event_id"}))
    delivered += draw(st.lists(st.sampled_from(MALFORMED_LINES), max_size=2))
    return draw(st.permutations(delivered))


@st.composite
def hard_scenarios(draw, streams: list[str], max_streams: int = 3, max_events: int = 24,
                   first_seq: int = 1) -> list[Entry]:
    """`hard_lines` in batches with ticks (some long enough for timers), empty files, a batch delivered
    twice under the same name, and operators' retry/skip of `streams` (parked or not: an action on a
    stream that is not parked is refused) at the latest logical time, one at a time or a round of them."""
    entries = draw(batches_of(draw(hard_lines(max_streams, max_events, first_seq))))
    extra = [as_table_file(e, draw(st.sampled_from(["jsonl", "jsonl", "jsonl", "csv", "parquet"])))
             if e.kind == "batch" else e for e in entries]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(extra)))
        t = extra[at - 1].T if at else T0
        choice = draw(st.sampled_from(["retry", "skip", "empty", "again", "round"]))
        if choice == "empty":
            extra.insert(at, Entry("batch", f"empty-{at}-{len(extra)}", t + 1, lines=[]))
        elif choice == "again" and at and extra[at - 1].kind == "batch":
            extra.insert(at, dataclass_replace(extra[at - 1], T=t))  # the same file again: nothing new
        elif choice in ("retry", "skip"):
            extra.insert(at, Entry(choice, "", t, target_view="accounts", target_stream=draw(st.sampled_from(streams))))
        elif choice == "round":  # an operator's round, late on: every stream retried or skipped, parked ones too
            at = draw(st.integers(len(extra) // 2, len(extra)))
            t = extra[at - 1].T if at else T0
            extra[at:at] = [Entry(draw(st.sampled_from(["retry", "skip"])), "", t, target_view="accounts",
                                  target_stream=stream) for stream in streams]
    return _in_time_order(extra)


def _in_time_order(entries: list[Entry]) -> list[Entry]:
    """Logical time never goes back (`inorder run` refuses a time before the last one): each entry's
    time is at least its predecessor's."""
    out, last = [], None
    for e in entries:
        t = e.T if last is None else max(e.T, last)
        out.append(dataclass_replace(e, T=t))
        last = t
    return out


TABLE_COLUMNS = ("stream_id", "stream_type", "seq", "type", "payload", "occurred_at", "event_id")


def as_table_file(entry: Entry, fmt: str) -> Entry:
    """A JSON Lines batch as a CSV or Parquet file of the same records (every column text, the payload as
    its JSON text, a missing field empty or null); the lines that are no JSON object have no row there."""
    if fmt == "jsonl":
        return entry
    rows = []
    for line in entry.lines or []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            rows.append([None if record.get(c) is None else
                         json.dumps(record[c]) if c == "payload" else str(record[c]) for c in TABLE_COLUMNS])
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        data = out.getvalue().encode("utf-8")
    else:
        table = pa.table({c: pa.array([row[i] for row in rows], pa.string()) for i, c in enumerate(TABLE_COLUMNS)})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        data = sink.getvalue()
    return dataclass_replace(entry, lines=data, fmt=fmt)
