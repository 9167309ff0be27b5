"""CONCEPTS §2 step 3: ordering per (view, stream) — duplicates, late, conflicts, gaps and timers.

`walk_stream` is the whole life of one (view, stream) during a pass over one or more entries
(batches, ticks, operator actions), in ingest order. It is plain Python so it runs unchanged
inside Spark executors and in tests.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from pipelines import faults
from pipelines.engine.apply import StreamApplier, describe_exception
from pipelines.faults import crash_point
from pipelines.message import Event, Message
from pipelines.engine.pass_data import (ErrorRecord, GapRecord, HandlerBug, PassOutput, PendingRecord, RowsRecord,
                                 WatermarkRecord)
from pipelines.view import Reject, View


class NotParked(ValueError):
    """retry/skip was asked for a stream that is not parked: refused, and nothing is recorded."""


class HandlerBugFailure(RuntimeError):
    """Handlers of views with on_bug="fail" raised: the run fails, and its pass is not committed."""

    def __init__(self, bugs: list[HandlerBug]) -> None:
        first = bugs[0]
        super().__init__(f"view {first.view} (on_bug='fail'): handler bug on stream {first.stream_id!r} seq "
                         f"{first.seq}: {first.reason}; nothing was committed"
                         + (f" ({len(bugs) - 1} more streams failed)" if len(bugs) > 1 else ""))
        self.bugs = bugs


@dataclass(frozen=True)
class PassEntry:
    """One entry of the pass as a view sees it."""

    entry_idx: int
    batch_id: str
    kind: str  # batch | tick | retry | skip
    t_us: int  # logical time, microseconds since epoch
    target_stream: str | None = None


@dataclass
class StreamState:
    """What the store remembers about one (view, stream) between passes."""

    stream_type: str | None = None
    last_seq: int = 0
    blocked_at: int | None = None
    blocked_since_us: int | None = None
    parked: bool = False
    attempts: int = 0  # failed attempts so far of the message at last_seq + 1 (a parked stream's)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # logged gap ranges, sorted
    keyed_rows: dict[str, list[dict]] = field(default_factory=dict)
    newest_rows: dict[str, dict | None] = field(default_factory=dict)

    @classmethod
    def loaded(cls, watermark: dict, skipped: list[tuple[int, int]], first_seq: int) -> "StreamState":
        """The state a pass starts a stream from: its watermark as the walk emitted it (empty for a stream
        the view never saw) and its logged gap ranges in seq order, a list of its own (the walk appends)."""
        return cls.watermarked(watermark.get("stream_type"), watermark.get("last_seq"), watermark.get("blocked_at"),
                               watermark.get("blocked_since_us"), watermark.get("parked"), watermark.get("attempts"),
                               skipped, first_seq)

    @classmethod
    def watermarked(cls, stream_type: str | None, last_seq: int | None, blocked_at: int | None,
                    blocked_since_us: int | None, parked: bool | None, attempts: int | None,
                    skipped: list[tuple[int, int]], first_seq: int) -> "StreamState":
        """`loaded`, from the watermark's fields (`last_seq` None: a stream the view never saw)."""
        return cls(stream_type, first_seq - 1 if last_seq is None else last_seq, blocked_at, blocked_since_us,
                   bool(parked), attempts or 0, skipped)


def _in_skipped(ranges: list[tuple[int, int]], seq: int) -> bool:
    i = bisect_right(ranges, (seq, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= seq <= ranges[i][1]


def walk_stream(view: View, stream_id: str, state: StreamState, pending_msgs: list[Message],
                new_msgs: list[Message], entries: list[PassEntry], out: PassOutput,
                aggregate_sums: dict[str, dict]) -> None:
    """Process one (view, stream) through every entry of the pass and emit its results.

    `pending_msgs` are buffered messages from earlier passes; `new_msgs` are this pass's messages
    for the stream, sorted by (entry_idx, line).
    """
    name = view.name
    pending: dict[int, Message] = {m.seq: m for m in pending_msgs}
    by_entry: dict[int, list[Message]] = {}
    if new_msgs and new_msgs[0].entry_idx == new_msgs[-1].entry_idx:  # sorted by entry: all from one entry
        by_entry[new_msgs[0].entry_idx] = new_msgs
    else:
        for m in new_msgs:
            by_entry.setdefault(m.entry_idx, []).append(m)
    if state.stream_type is None:
        first = pending_msgs or new_msgs
        if not first:  # an operator entry for a stream this view never saw: nothing to do
            return
        state.stream_type = first[0].stream_type
    applier = StreamApplier(view, stream_id, state.keyed_rows, state.newest_rows, aggregate_sums)
    apply = applier.apply
    gap_timeout_us = view.gap_timeout_us
    last_entry = 0

    def walk(entry: PassEntry) -> None:
        nxt = state.last_seq + 1
        done = {"applied": 0, "ignored": 0, "handler_error": 0}
        while True:
            msg = pending.get(nxt)
            if msg is not None:
                outcome, exc = apply(Event(stream_id, msg))
                if exc is not None:
                    rejected = isinstance(exc, Reject)
                    policy = view.on_error if rejected else view.on_bug
                    attempt = (state.attempts if nxt == state.last_seq + 1 else 0) + 1
                    exc_type, message, trace = describe_exception(exc)
                    error = ErrorRecord(name, stream_id, entry.entry_idx, "handler_error", msg,
                                        f"{exc_type}: {message}", entry.t_us, exc_type, message, trace,
                                        "reject" if rejected else "bug", attempt)
                    out.errors.append(error)
                    if policy != "skip":  # the message stays buffered: an operator decides (or the run fails)
                        if policy == "fail":
                            out.fatal.append(HandlerBug(name, stream_id, msg.seq, entry.entry_idx, error.reason))
                        state.parked, state.attempts = True, attempt
                        break
                done[outcome] += 1
                del pending[nxt]
                nxt += 1
                continue
            if not pending:
                state.blocked_at = state.blocked_since_us = None
                break
            if state.blocked_at != nxt:
                state.blocked_at, state.blocked_since_us = nxt, entry.t_us
            waited = entry.t_us - state.blocked_since_us
            if waited >= gap_timeout_us:
                reason = "timeout"
            elif len(pending) > view.max_pending:
                reason = "capacity"
            else:
                break
            first_waiting = min(pending)
            out.gaps.append(GapRecord(name, stream_id, entry.entry_idx, reason, nxt, first_waiting - 1, waited,
                                      entry.batch_id, entry.t_us))
            out.count(name, entry.entry_idx, "gaps_skipped")
            crash_point("order.gap_skipped")
            state.skipped.append((nxt, first_waiting - 1))
            nxt = first_waiting
        state.last_seq = nxt - 1
        if state.parked:
            state.blocked_at = state.blocked_since_us = None
        else:
            state.attempts = 0
        for outcome, n in done.items():
            if n:
                out.count(name, entry.entry_idx, outcome, n)

    for entry in entries:
        arrived = by_entry.get(entry.entry_idx)
        operator = entry.kind in ("retry", "skip")
        if operator and entry.target_stream != stream_id:
            continue  # an operator action concerns one stream only
        if arrived is None and not pending and not operator:
            continue
        last_entry = entry.entry_idx
        if arrived:
            out.count(name, entry.entry_idx, "selected", len(arrived))
        for msg in arrived or ():
            seq = msg.seq
            if seq <= state.last_seq:
                if _in_skipped(state.skipped, seq):
                    out.count(name, entry.entry_idx, "late")
                    out.errors.append(ErrorRecord(name, stream_id, entry.entry_idx, "late", msg,
                                                  f"seq {seq} arrived after its gap was skipped", entry.t_us))
                else:
                    out.count(name, entry.entry_idx, "duplicate")
                continue
            first = pending.get(seq)
            if first is None:
                pending[seq] = msg
                if faults.ARMED:
                    crash_point("order.candidate")
            elif first.content == msg.content:
                out.count(name, entry.entry_idx, "duplicate")
            else:
                out.count(name, entry.entry_idx, "conflict")
                out.errors.append(ErrorRecord(name, stream_id, entry.entry_idx, "conflict", msg,
                                              f"seq {seq} differs from the first received "
                                              f"(batch {first.batch_id}, line {first.line})", entry.t_us))
        if operator and state.parked:
            state.parked = False
            if entry.kind == "skip":
                dropped = pending.pop(state.last_seq + 1)
                out.count(name, entry.entry_idx, "handler_error")
                state.last_seq, state.attempts = dropped.seq, 0
        if not state.parked:
            walk(entry)  # skipped ranges are appended in increasing seq order: `skipped` stays sorted

    out.watermarks.append(WatermarkRecord(name, stream_id, last_entry, state.stream_type, state.last_seq,
                                          state.blocked_at, state.blocked_since_us, state.parked, len(pending),
                                          state.attempts))
    if pending:
        out.pending.extend(PendingRecord(name, stream_id, msg) for msg in sorted(pending.values()))
    if faults.ARMED:
        crash_point("order.stream_walked")
    for table in view.tables:
        member = applier.members[table.name]
        if table.kind == "keyed":
            out.rows.append(RowsRecord(name, stream_id, last_entry, table.name, list(member.rows.values())))
        elif table.kind == "append" and member.appended:
            out.rows.append(RowsRecord(name, stream_id, last_entry, table.name, member.appended))
