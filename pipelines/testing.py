"""A test kit for views: run a view over records in memory, with no Spark and no store.

    from pipelines.testing import replay

    result = replay(ORDERS, [{"stream_id": "ord-1", "stream_type": "order", "seq": 1,
                              "type": "OrderPlaced", "payload": {"customer_id": "c-1"}}])
    assert result.tables["orders"][0]["status"] == "placed"
    assert result.errors == []

The records are one batch in the default record shape (or a source mapping's). They go through the
engine's own inspection (`pipelines.engine.normalise`), ordering walk (`pipelines.engine.order.walk_stream`) and
apply code, so a view behaves here as it does in `inorder run` on the same batch.

`replay_entries` runs views over a whole ingest log in memory: batch files (JSON Lines, CSV or
Parquet), ticks and operators' retry/skip, each at its logical time, one run per entry as `inorder
run` would, with the state a run keeps in the store carried from one entry to the next.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from pathlib import Path

from pipelines.engine.normalise import InspectedBatch, RejectedFile, SourceMapping, inspect_file, inspect_json_lines
from pipelines.message import Message
from pipelines.engine.order import HandlerBugFailure, NotParked, PassEntry, PassOutput, StreamState, walk_stream
from pipelines.store.database import us_from_utc
from pipelines.view import Table, View

REPLAY_BATCH = "replay"


@dataclass
class ReplayResult:
    """What one batch did to a view: its tables (typed values, sorted by primary key), its error log,
    skipped gaps, per-stream watermarks and the outcome counts of CONCEPTS §3."""

    tables: dict[str, list[dict]]
    errors: list[dict]
    gaps: list[dict] = field(default_factory=list)
    watermarks: dict[str, dict] = field(default_factory=dict)  # stream_id -> last_seq, parked, pending_count…
    counts: dict[str, int] = field(default_factory=dict)  # selected, applied, ignored, handler_error…

    @property
    def parked(self) -> list[str]:
        return sorted(s for s, w in self.watermarks.items() if w["parked"])


def _line(record: Any) -> bytes:
    """A record as one JSON Lines line: a str or bytes is taken as the line itself."""
    if isinstance(record, bytes):
        return record
    return (record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)).encode("utf-8")


def replay(view: View, records: Iterable[Any], now: datetime | None = None,
           mapping: SourceMapping | None = None) -> ReplayResult:
    """Run `view` over `records` as one batch received at logical time `now` (default: the clock)."""
    mapping = mapping or SourceMapping()
    t_us = us_from_utc(now or datetime.now(timezone.utc))
    data = b"".join(_line(r) + b"\n" for r in records)
    inspected = inspect_json_lines(data, REPLAY_BATCH, 1, mapping)
    entry = PassEntry(1, REPLAY_BATCH, "batch", t_us)
    streams: dict[str, list[Message]] = {}
    for row in inspected.messages.to_pylist():
        if row["stream_type"] in view.subscribes:
            streams.setdefault(row["stream_id"], []).append(
                Message(**{name: row[name] for name in Message._fields}))
    out = PassOutput()
    aggregates: dict[str, dict] = {}
    for stream_id, messages in streams.items():
        walk_stream(view, stream_id, StreamState(last_seq=mapping.first_seq - 1), [], messages, [entry], out,
                    aggregates)
    errors = [{"kind": "malformed", "stream_id": None, "seq": None, "message": reason, "reason": reason,
               "batch_id": REPLAY_BATCH, "line": line, "raw": raw} for line, raw, reason in inspected.malformed]
    result = ReplayResult(tables={t.name: [] for t in view.tables}, errors=errors)
    for rows in out.rows:
        result.tables[rows.table].extend(rows.rows)
    for error in out.errors:
        msg = error.msg
        result.errors.append({"kind": error.kind, "stream_id": error.stream_id, "seq": msg.seq,
                              "message": error.message or error.reason, **error.details(),
                              "event_type": msg.event_type, "batch_id": msg.batch_id, "line": msg.line})
    for gap in out.gaps:
        result.gaps.append({"stream_id": gap.stream_id, "reason": gap.reason, "first_missing": gap.first_missing,
                            "last_missing": gap.last_missing, "waited_us": gap.waited_us, "batch_id": gap.batch_id,
                            "skipped_at_us": gap.skipped_at_us})
    for watermark in out.watermarks:
        result.watermarks[watermark.stream_id] = watermark.state()
    for (_, _, outcome), n in out.counts.items():
        result.counts[outcome] = result.counts.get(outcome, 0) + n
    for table in view.tables:
        if table.kind == "aggregate":
            result.tables[table.name] = _aggregate_rows(table, aggregates.get(table.name, {}))
        keys = table.primary_key
        result.tables[table.name].sort(key=lambda row: tuple(row[c] for c in keys))
    return result


def _aggregate_rows(table: Table, sums: dict) -> list[dict]:
    """The summed increments as the table would hold them (a value column no handler added to is 0)."""
    zero = {c: convert(0) for c, convert in table.value_converters.items()}
    single = len(table.primary_key) == 1
    return [{**dict(zip(table.primary_key, (key,) if single else key)), **zero, **values}
            for key, values in sums.items()]


@dataclass(frozen=True)
class ReplayEntry:
    """One entry of the ingest log for `replay_entries`, at logical time `received_at`: a batch file
    (`data`, its format from `file_name`'s suffix; its batch id is the name's stem), a tick, or an
    operator's retry/skip of a parked stream of `target_view`."""

    kind: str  # batch | tick | retry | skip
    received_at: datetime
    data: bytes = b""
    file_name: str = ""
    target_view: str | None = None
    target_stream: str | None = None

    @property
    def batch_id(self) -> str:
        return Path(self.file_name).stem


@dataclass
class ReplayedStore:
    """What the read store would hold after the entries: each table's rows (typed values, sorted by
    primary key) and the engine tables' rows under their column names (docs/STORE.md), times in
    microseconds; `rejected` (batch id, reason) for files set aside, `refused` (view, stream, why) for
    operator actions on streams that were not parked (refused, nothing recorded)."""

    tables: dict[str, list[dict]] = field(default_factory=dict)
    watermarks: list[dict] = field(default_factory=list)
    pending: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)


OUTCOMES = ("applied", "ignored", "handler_error", "duplicate", "late", "conflict")


class _ViewState:
    """One view's part of the store between entries: per stream its state and buffer, its rows."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.watermarks: dict[str, dict] = {}  # stream -> its watermark as the walk emitted it
        self.skipped: dict[str, list[tuple[int, int]]] = {}  # stream -> the gap ranges logged for it
        self.pending: dict[str, list[Message]] = {}
        self.updated: dict[str, tuple[int, int | None]] = {}  # stream -> (updated_entry, prev_last_seq)
        self.keyed: dict[str, dict[str, list[dict]]] = {t.name: {} for t in view.tables if t.kind == "keyed"}
        self.appended: dict[str, list[dict]] = {t.name: [] for t in view.tables if t.kind == "append"}
        self.sums: dict[str, dict] = {}


@dataclass(frozen=True)
class _Projected:
    """An entry of the ingest log as a pass projects it: its messages by stream, its ledger's base counts,
    and for an operator's action the view it concerns."""

    entry: PassEntry
    by_stream: dict[str, list[Message]]
    base: dict
    target_view: str | None = None


def replay_entries(views: Sequence[View], entries: Iterable[ReplayEntry], mapping: SourceMapping | None = None,
                   entries_per_pass: int = 1) -> ReplayedStore:
    """Run `views` over an ingest log in memory, as `inorder run` would: a batch already ingested is
    skipped, an unreadable or empty file is set aside, a tick is recorded only when logical time moved,
    and an operator action on a stream that is not parked is refused. Each run projects one entry
    (`entries_per_pass=1`), or up to that many waiting entries in one pass, as a run does that finds
    several (each stream walks them all at once; an operator's action is checked once what came before
    it is committed)."""
    mapping = mapping or SourceMapping()
    states = {v.name: _ViewState(v) for v in views}
    subscribed = {t for v in views for t in v.subscribes}
    store = ReplayedStore()
    seen: set[str] = set()
    waiting: list[_Projected] = []
    entry_idx, last_us = 0, None

    def commit_waiting() -> None:
        for view in views:
            mine = [w for w in waiting if w.target_view in (None, view.name)]
            if mine:
                _project_pass(states[view.name], mine, store, mapping.first_seq)
        waiting.clear()

    for e in entries:
        t_us = us_from_utc(e.received_at)
        by_stream: dict[str, list[Message]] = {}
        base = dict.fromkeys(("records", "malformed", "normalised", "unrouted"), 0)
        if e.kind == "batch":
            if e.batch_id in seen:
                continue
            seen.add(e.batch_id)
            entry_idx, last_us = entry_idx + 1, t_us
            try:
                inspected = _inspect(e, entry_idx, mapping)
            except RejectedFile as exc:
                store.rejected.append((e.batch_id, str(exc)))
                continue
            for line, raw, reason in inspected.malformed:
                store.errors.append({"view": None, "stream_id": None, "seq": None, "kind": "malformed",
                                     "batch_id": e.batch_id, "line": line, "raw": raw, "reason": reason,
                                     "logged_at": t_us, "entry_idx": entry_idx})
            rows = inspected.messages.to_pylist()
            base.update(records=inspected.records, malformed=len(inspected.malformed), normalised=len(rows),
                        unrouted=sum(r["stream_type"] not in subscribed for r in rows))
            for row in rows:
                by_stream.setdefault(row["stream_id"], []).append(Message(**{n: row[n] for n in Message._fields}))
            entry = PassEntry(entry_idx, e.batch_id, "batch", t_us)
        elif e.kind == "tick":
            if last_us is not None and t_us <= last_us:
                continue
            entry_idx, last_us = entry_idx + 1, t_us
            entry = PassEntry(entry_idx, f"tick-{entry_idx}", "tick", t_us)
        elif e.kind in ("retry", "skip"):
            commit_waiting()  # `inorder retry/skip` checks the stream against what is committed
            watermark = states[e.target_view].watermarks.get(e.target_stream)
            if watermark is None or not watermark["parked"]:
                store.refused.append((e.target_view, e.target_stream, str(NotParked(
                    f"stream {e.target_stream!r} of view {e.target_view} is not parked"))))
                continue
            entry_idx = entry_idx + 1
            entry = PassEntry(entry_idx, f"{e.kind}-{entry_idx}", e.kind, last_us, e.target_stream)
        else:
            raise ValueError(f"unknown entry kind {e.kind!r}")
        waiting.append(_Projected(entry, by_stream, base, e.target_view if e.kind in ("retry", "skip") else None))
        if len(waiting) >= entries_per_pass:
            commit_waiting()
    commit_waiting()
    store.batches.sort(key=lambda row: row["entry_idx"])  # the ledger in ingest order (stable: views in order)
    for vs in states.values():
        _store_view(vs, store)
    return store


def _inspect(e: ReplayEntry, entry_idx: int, mapping: SourceMapping) -> InspectedBatch:
    """The entry's file, inspected as the landing file it stands for (Parquet is read from a file)."""
    if Path(e.file_name).suffix.lower() != ".parquet":
        return inspect_file(Path(e.file_name), e.batch_id, entry_idx, mapping, e.data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(e.file_name).name
        path.write_bytes(e.data)
        return inspect_file(path, e.batch_id, entry_idx, mapping)


def _due(view: View, watermark: dict, t_us: int) -> bool:
    """A buffered stream a run walks with no new message: its gap timer is due, or its buffer is over
    max_pending (the others would walk to the state they have: pipelines/engine/project.py's DUE_BUFFERS)."""
    since = watermark["blocked_since_us"]
    return not watermark["parked"] and (since is None or watermark["pending_count"] > view.max_pending
                                        or since + view.gap_timeout_us <= t_us)


def _project_pass(vs: _ViewState, projected: list[_Projected], store: ReplayedStore, first_seq: int) -> None:
    """One run's pass over some entries for one view, and its commit (the state it keeps): the streams
    it walks are those the entries bring messages for or act on, and the buffered ones due by the last
    entry's time (pipelines/engine/project.py's `load_inputs`)."""
    view = vs.view
    entries = [p.entry for p in projected]
    new: dict[str, list[Message]] = {}
    for p in projected:
        for sid, msgs in p.by_stream.items():
            new.setdefault(sid, []).extend(m for m in msgs if m.stream_type in view.subscribes)
    new = {sid: msgs for sid, msgs in new.items() if msgs}
    t_us = max(e.t_us for e in entries)
    walked = set(new) | {sid for sid, msgs in vs.pending.items() if msgs and _due(view, vs.watermarks[sid], t_us)}
    walked |= {e.target_stream for e in entries if e.target_stream is not None}
    pending_before = sum(len(msgs) for msgs in vs.pending.values())
    out = PassOutput()
    prev: dict[str, int | None] = {}
    for sid in sorted(walked):
        before = vs.watermarks.get(sid)
        prev[sid] = None if before is None else before["last_seq"]
        state = StreamState.loaded(before or {}, sorted(vs.skipped.get(sid, [])), first_seq)
        state.keyed_rows = {name: [dict(r) for r in rows.get(sid, [])] for name, rows in vs.keyed.items()}
        state.newest_rows = {name: next((r for r in reversed(rows) if r[_stream_key(view, name)] == sid), None)
                             for name, rows in vs.appended.items()}
        walk_stream(view, sid, state, vs.pending.get(sid, []), new.get(sid, []), entries, out, vs.sums)
        vs.pending[sid] = []
    if out.fatal:  # a handler bug in a view with on_bug="fail": the run fails, and nothing is committed
        raise HandlerBugFailure(out.fatal)
    # the commit files every record under the view it names, and keeps what the walk emitted, not the
    # walk's own objects
    for watermark in out.watermarks:
        if watermark.view == view.name:
            vs.watermarks[watermark.stream_id] = watermark.state()
            vs.updated[watermark.stream_id] = (watermark.entry_idx, prev[watermark.stream_id])
    for waiting in out.pending:
        if waiting.view == view.name:
            vs.pending[waiting.stream_id].append(waiting.msg)
    for rows in out.rows:
        if rows.view != view.name:
            continue
        if rows.table in vs.keyed:
            vs.keyed[rows.table][rows.stream_id] = rows.rows
        else:
            vs.appended[rows.table].extend(rows.rows)
    for error in out.errors:
        if error.view == view.name:
            details = error.details()
            store.errors.append({"view": error.view, "stream_id": error.stream_id, **_message(error.msg),
                                 "kind": error.kind, **{k: v for k, v in details.items() if k != "logged_at_us"},
                                 "logged_at": error.logged_at_us, "entry_idx": error.entry_idx})
    for gap in out.gaps:
        if gap.view == view.name:
            vs.skipped.setdefault(gap.stream_id, []).append((gap.first_missing, gap.last_missing))
            store.gaps.append({"view": gap.view, "stream_id": gap.stream_id, "first_missing": gap.first_missing,
                               "last_missing": gap.last_missing, "waited_seconds": gap.waited_us / 1e6,
                               "reason": gap.reason, "batch_id": gap.batch_id, "skipped_at": gap.skipped_at_us,
                               "entry_idx": gap.entry_idx})
    pending = pending_before  # after each entry: what was buffered, plus selected, less what left
    for p in projected:
        counts = {name: out.counts.get((view.name, p.entry.entry_idx, name), 0)
                  for name in ("selected", *OUTCOMES, "gaps_skipped")}
        pending += counts["selected"] - sum(counts[name] for name in OUTCOMES)
        store.batches.append({"batch_id": p.entry.batch_id, "view": view.name, "entry_idx": p.entry.entry_idx,
                              "kind": p.entry.kind, "received_at": p.entry.t_us, **p.base, **counts,
                              "pending": pending})


def _stream_key(view: View, table: str) -> str:
    return view.table(table).stream_key


def _message(msg: Message) -> dict:
    return {"seq": msg.seq, "event_type": msg.event_type, "payload": msg.payload, "occurred_at": msg.occurred_at,
            "event_id": msg.event_id, "batch_id": msg.batch_id, "line": msg.line}


def _store_view(vs: _ViewState, store: ReplayedStore) -> None:
    view = vs.view
    for sid, watermark in sorted(vs.watermarks.items()):
        updated_entry, prev = vs.updated[sid]
        store.watermarks.append({
            "view": view.name, "stream_id": sid, "stream_type": watermark["stream_type"],
            "last_seq": watermark["last_seq"], "blocked_at": watermark["blocked_at"],
            "blocked_since": watermark["blocked_since_us"], "parked": watermark["parked"],
            "pending_count": watermark["pending_count"], "attempts": watermark["attempts"],
            "updated_entry": updated_entry, "prev_last_seq": prev})
        for msg in sorted(vs.pending.get(sid, [])):
            store.pending.append({"view": view.name, "stream_id": sid, "stream_type": msg.stream_type,
                                  **_message(msg), "entry_idx": msg.entry_idx})
    for table in view.tables:
        if table.kind == "keyed":
            rows = [r for _, stream_rows in sorted(vs.keyed[table.name].items()) for r in stream_rows]
        elif table.kind == "append":
            rows = list(vs.appended[table.name])
        else:
            rows = _aggregate_rows(table, vs.sums.get(table.name, {}))
        keys = table.primary_key
        store.tables[table.name] = sorted(rows, key=lambda row: tuple(row[c] for c in keys))
