"""A test kit for views: run a view over records in memory, with no Spark and no store.

    from pipelines.testing import Replay, replay, stream

    order = stream("ord-1", type="order").then(OrderPlaced(customer_id="c-1"), OrderCancelled(reason="duplicate"))
    result = replay(ORDERS, order)
    assert result.rows(ORDERS_TABLE)[0].status == "placed"
    assert result.errors == []

`replay` runs one batch: records in the default record shape (or a source mapping's), as dicts, JSON lines,
or streams and scenarios written with `stream` and `scenario` (pipelines/scenario.py: seq numbered for you,
disorder, duplicates and gaps as options; their records are in the default shape). `Replay` (or `replay_runs`) runs several, each at its logical
time, carrying watermarks, pending buffers and rows from one run to the next as the store does:

    session = Replay(ORDERS)
    session.run(order.dropping(1), at=T0)            # seq 1 never comes: seq 2 waits
    assert session.tick(at=T0 + timedelta(seconds=ORDERS.gap_timeout)).gaps  # the gap times out

The records go through the engine's own inspection (`pipelines.engine.normalise`), ordering walk
(`pipelines.engine.order.walk_stream`), apply code and rule of which buffered streams a run walks
(`pipelines.engine.rules`), so a view behaves here as it does in `inorder run` on the same entries; a handler
bug in a view with on_bug="fail" raises `HandlerBugFailure` in a `Replay` session, and that run changes nothing
(one-shot `replay` returns it in `errors`).

(The project's own tests run whole ingest logs over several views with tests/memory_engine.py, on `ViewState`.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from pipelines.columns import codec_of
from pipelines.engine.normalise import SourceMapping, inspect_json_lines
from pipelines.engine.order import HandlerBugFailure, PassEntry, PassOutput, StreamState, walk_stream
from pipelines.engine.outcomes import EntryKind
from pipelines.engine.rules import buffer_is_due
from pipelines.message import Message
from pipelines.scenario import Scenario, Sent, Stream, scenario, stream
from pipelines.store.database import us_from_utc
from pipelines.view import Table, View

__all__ = ["HandlerBugFailure", "Replay", "ReplayResult", "Row", "Scenario", "Sent", "Stream", "ViewState",
           "replay", "replay_runs", "scenario", "stream"]

REPLAY_BATCH = "replay"


class Row(dict):
    """A view table's row as a test reads it: `row.status` or `row["status"]`, each value of its column's
    Python type; it equals the plain dict of the same values. (A column named like a dict method, `items`
    or `values`, reads as `row["items"]`.)"""

    __slots__ = ()

    def __getattr__(self, column: str) -> Any:
        try:
            return self[column]
        except KeyError:
            raise AttributeError(f"the row has no column {column!r} (it has {', '.join(self)})") from None


@dataclass
class ReplayResult:
    """What the runs left in the store for a view: its tables (typed rows, sorted by primary key), its error
    log, skipped gaps, per-stream watermarks and the outcome counts of CONCEPTS §3, over all the runs."""

    tables: dict[str, list[Row]]
    errors: list[dict]
    gaps: list[dict] = field(default_factory=list)
    watermarks: dict[str, dict] = field(default_factory=dict)  # stream_id -> last_seq, parked, pending_count…
    counts: dict[str, int] = field(default_factory=dict)  # selected, applied, ignored, handler_error… pending

    @property
    def parked(self) -> list[str]:
        return sorted(s for s, w in self.watermarks.items() if w["parked"])

    def rows(self, table: Table | str) -> list[Row]:
        """The rows of a table, by its declaration (`result.rows(ORDERS_TABLE)`) or its name."""
        name = table if isinstance(table, str) else table.name
        if name not in self.tables:
            raise KeyError(f"the view has no table {name!r} (it has {', '.join(self.tables)})")
        return self.tables[name]


class ViewState:
    """One view's part of the store between runs, as a commit leaves it: per stream its watermark (as the
    walk emitted it), its skipped gap ranges, its pending buffer and the first copy received of each seq; per
    stream the rows of its keyed tables, the appended rows, and the aggregate tables' sums. `project` is one
    run's pass over entries and its commit."""

    def __init__(self, view: View, first_seq: int = 1) -> None:
        self.view, self.first_seq = view, first_seq
        self.watermarks: dict[str, dict] = {}
        self.skipped: dict[str, list[tuple[int, int]]] = {}
        self.pending: dict[str, list[Message]] = {}
        # per stream, the first copy received of each seq: the copy a walk took at it, unless that seq was skipped
        # (the engine reads the same from the archive, pipelines/engine/inputs.py)
        self.first_copies: dict[str, dict[int, Message]] = {}
        self.keyed: dict[str, dict[str, list[dict]]] = {t.name: {} for t in view.tables if t.kind == "keyed"}
        self.appended: dict[str, list[dict]] = {t.name: [] for t in view.tables if t.kind == "append"}
        self.sums: dict[str, dict] = {}

    def pending_count(self) -> int:
        return sum(len(msgs) for msgs in self.pending.values())

    def _due(self, stream_id: str, t_us: int) -> bool:
        """A buffered stream a run walks with no new message (pipelines/engine/inputs.py's DUE_BUFFERS)."""
        watermark, view = self.watermarks[stream_id], self.view
        return buffer_is_due(watermark["pending_count"], watermark["parked"], watermark["blocked_since"],
                             view.gap_timeout_us, view.max_pending, t_us)

    def project(self, entries: list[PassEntry], by_stream: Mapping[str, list[Message]],
                bug_fails_run: bool = True) -> PassOutput:
        """One run's pass over `entries` (whose messages are `by_stream`) and its commit; returns what the walk
        emitted. The streams it walks are those the entries bring the view messages for or act on, and the
        buffered ones due by the last entry's time (pipelines/engine/inputs.py's `load_inputs`). A handler bug
        in a view with on_bug="fail" raises `HandlerBugFailure`, and nothing is committed (unless not
        `bug_fails_run`: then the walk's output is kept, the bug in its errors)."""
        view = self.view
        new = {sid: mine for sid, msgs in by_stream.items()
               if (mine := [m for m in msgs if m.stream_type in view.subscribes])}
        t_us = max(e.t_us for e in entries)
        walked = set(new) | {sid for sid, msgs in self.pending.items() if msgs and self._due(sid, t_us)}
        walked |= {e.target_stream for e in entries if e.target_stream is not None}
        out = PassOutput()
        sums = {name: dict(rows) for name, rows in self.sums.items()}  # the walk replaces a sum, never changes one
        for sid in sorted(walked):
            state = StreamState.loaded(self.watermarks.get(sid, {}), sorted(self.skipped.get(sid, [])),
                                       self.first_seq)
            state.keyed_rows = {name: [dict(r) for r in rows.get(sid, [])] for name, rows in self.keyed.items()}
            state.newest_rows = {name: next((r for r in reversed(rows) if r[view.table(name).stream_key] == sid),
                                            None) for name, rows in self.appended.items()}
            first_copies = self.first_copies.get(sid, {})
            state.walked = {m.seq: first_copies[m.seq] for m in new.get(sid, ())
                            if m.seq <= state.last_seq and m.seq in first_copies}
            walk_stream(view, sid, state, self.pending.get(sid, []), new.get(sid, []), entries, out, sums)
        if out.fatal and bug_fails_run:
            raise HandlerBugFailure(out.fatal)
        self.sums = sums
        self._commit(out)
        for sid, msgs in new.items():
            first_copies = self.first_copies.setdefault(sid, {})
            for m in msgs:
                first_copies.setdefault(m.seq, m)
        return out

    def _commit(self, out: PassOutput) -> None:
        """Keep what the walk emitted, not the walk's own objects; the commit files every record under the
        view it names."""
        name = self.view.name
        for watermark in out.watermarks:
            if watermark.view == name:
                self.watermarks[watermark.stream_id] = watermark.state()
                self.pending[watermark.stream_id] = []
        for waiting in out.pending:
            if waiting.view == name:
                self.pending[waiting.stream_id].append(waiting.msg)
        for rows in out.rows:
            if rows.view != name:
                continue
            if rows.table in self.keyed:
                self.keyed[rows.table][rows.stream_id] = rows.rows
            else:
                self.appended[rows.table].extend(rows.rows)
        for gap in out.gaps:
            if gap.view == name:
                self.skipped.setdefault(gap.stream_id, []).append((gap.first_missing, gap.last_missing))

    def tables(self) -> dict[str, list[dict]]:
        """Each table's rows as the store holds them (typed values), sorted by primary key."""
        tables = {}
        for table in self.view.tables:
            if table.kind == "keyed":
                rows = [r for _, stream_rows in sorted(self.keyed[table.name].items()) for r in stream_rows]
            elif table.kind == "append":
                rows = list(self.appended[table.name])
            else:
                rows = aggregate_rows(table, self.sums.get(table.name, {}))
            keys = table.primary_key
            tables[table.name] = sorted(rows, key=lambda row: tuple(row[c] for c in keys))
        return tables


def aggregate_rows(table: Table, sums: dict) -> list[dict]:
    """The summed increments as the table would hold them (a value column no handler added to is 0)."""
    zero = {c: convert(0) for c, convert in codec_of(table).value_converters.items()}
    single = len(table.primary_key) == 1
    return [{**dict(zip(table.primary_key, (key,) if single else key)), **zero, **values}
            for key, values in sums.items()]


def _line(record: Any) -> bytes:
    """A record as one JSON Lines line: a str or bytes is taken as the line itself."""
    if isinstance(record, bytes):
        return record
    return (record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)).encode("utf-8")


def _batch(records: Any) -> bytes:
    """Records, streams and scenarios (each delivered as its records) as one JSON Lines batch."""
    if isinstance(records, (Stream, Scenario)):
        records = [records]
    lines = [line for r in records for line in (r.records() if isinstance(r, (Stream, Scenario)) else [r])]
    return b"".join(_line(line) + b"\n" for line in lines)


class Replay:
    """A view's runs at logical times, in memory: `run` is a batch received at `at`, `tick` logical time moving
    on with no batch (so gap timers fire). Watermarks, pending buffers and rows carry from one run to the next
    as the store keeps them; each call returns the store's state after it, which `result` also gives."""

    def __init__(self, view: View, mapping: SourceMapping | None = None, bug_fails_run: bool = True) -> None:
        self.mapping = mapping or SourceMapping()
        self.bug_fails_run = bug_fails_run
        self.state = ViewState(view, self.mapping.first_seq)
        self.errors: list[dict] = []
        self.gaps: list[dict] = []
        self.counts: dict[str, int] = {}
        self.entries = 0
        self.last_us: int | None = None  # the last entry's logical time

    def run(self, records: Iterable[Any] | Stream | Scenario, *, at: datetime,
            batch_id: str | None = None) -> ReplayResult:
        """One batch of `records` received at logical time `at` (no earlier than the last run's). A batch with
        no record at all is set aside, as an empty landing file is: nothing happens."""
        data = _batch(records)
        if not data:
            return self.result
        t_us = us_from_utc(at)
        if self.last_us is not None and t_us < self.last_us:
            raise ValueError(f"logical time only moves forward: a run at {at} is earlier than the last entry")
        entry_idx = self.entries + 1
        batch_id = batch_id or f"replay-{entry_idx}"
        inspected = inspect_json_lines(data, batch_id, entry_idx, self.mapping)
        by_stream: dict[str, list[Message]] = {}
        for row in inspected.messages.to_pylist():
            by_stream.setdefault(row["stream_id"], []).append(Message(**{name: row[name] for name in Message._fields}))
        malformed = [{"kind": "malformed", "stream_id": None, "seq": None, "message": reason, "reason": reason,
                      "batch_id": batch_id, "line": line, "raw": raw} for line, raw, reason in inspected.malformed]
        self._project(PassEntry(entry_idx, batch_id, EntryKind.BATCH, t_us), by_stream, malformed)
        return self.result

    def tick(self, *, at: datetime) -> ReplayResult:
        """Logical time moves on to `at` with no batch: every buffered stream whose gap timer is due by then is
        walked. As `inorder tick`, a tick is recorded only when `at` is past the last entry's time."""
        t_us = us_from_utc(at)
        if self.last_us is None or t_us > self.last_us:
            entry_idx = self.entries + 1
            self._project(PassEntry(entry_idx, f"tick-{entry_idx}", EntryKind.TICK, t_us), {}, [])
        return self.result

    def _project(self, entry: PassEntry, by_stream: dict[str, list[Message]], malformed: list[dict]) -> None:
        """The entry's pass and commit, and its log rows: the malformed records first, then the walk's."""
        out = self.state.project([entry], by_stream, self.bug_fails_run)
        self.entries, self.last_us = entry.entry_idx, entry.t_us
        self.errors.extend(malformed)
        for error in out.errors:
            msg, details = error.msg, error.details()
            details["logged_at_us"] = details.pop("logged_at")  # the kit's name since 0.1.0
            self.errors.append({"kind": error.kind, "stream_id": error.stream_id, "seq": msg.seq,
                                "message": error.message or error.reason, **details,
                                "event_type": msg.event_type, "batch_id": msg.batch_id, "line": msg.line})
        for gap in out.gaps:
            self.gaps.append({"stream_id": gap.stream_id, "reason": gap.reason, "first_missing": gap.first_missing,
                              "last_missing": gap.last_missing, "waited_us": gap.waited_us,
                              "batch_id": gap.batch_id, "skipped_at_us": gap.skipped_at})
        for (_, _, outcome), n in out.counts.items():
            self.counts[outcome] = self.counts.get(outcome, 0) + n

    @property
    def result(self) -> ReplayResult:
        """The view's tables, logs, watermarks and counts after the runs so far (a copy)."""
        # the messages still buffered complete CONCEPTS §3's identity (selected = the outcomes + pending); like
        # every outcome, counted only when there are some
        pending = sum(w["pending_count"] for w in self.state.watermarks.values())
        return ReplayResult(tables={name: [Row(r) for r in rows] for name, rows in self.state.tables().items()},
                            errors=list(self.errors), gaps=list(self.gaps),
                            watermarks={sid: dict(w) for sid, w in self.state.watermarks.items()},
                            counts={**self.counts, **({"pending": pending} if pending else {})})


def replay(view: View, records: Iterable[Any] | Stream | Scenario, now: datetime | None = None,
           mapping: SourceMapping | None = None) -> ReplayResult:
    """Run `view` over `records` as one batch received at logical time `now` (default: the clock). A bug in a
    view with on_bug="fail" is returned in `errors` (class `bug`) for the test to read, where `inorder run` would
    fail the run; a `Replay` session raises `HandlerBugFailure` as the run does."""
    return Replay(view, mapping, bug_fails_run=False).run(records, at=now or datetime.now(timezone.utc), batch_id=REPLAY_BATCH)


def replay_runs(view: View, runs: Iterable[tuple[datetime, Any]], mapping: SourceMapping | None = None
                ) -> ReplayResult:
    """Run `view` over several runs in order: `(at, records)` is a batch received at logical time `at`, and
    `(at, None)` a tick. Returns what the store holds after the last."""
    session = Replay(view, mapping)
    for at, records in runs:
        if records is None:
            session.tick(at=at)
        else:
            session.run(records, at=at)
    return session.result
