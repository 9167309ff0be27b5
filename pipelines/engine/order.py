"""CONCEPTS §2 step 3: ordering per (view, stream) — duplicates, late, conflicts, gaps and timers.

`walk_stream` is the whole life of one (view, stream) during a pass over one or more entries
(batches, ticks, operator actions), in ingest order. It is plain Python so it runs unchanged
inside Spark executors and in tests.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from pipelines import faults
from pipelines.engine.apply import APPLIED, HANDLER_ERROR, IGNORED, StreamApplier, describe_exception
from pipelines.faults import crash_point
from pipelines.message import Event, Message
from pipelines.engine.pass_data import ErrorRecord, GapRecord, HandlerBug, PassOutput, PendingRecord, RowsRecord
from pipelines.records import WatermarkRecord
from pipelines.engine.outcomes import OPERATOR_KINDS, EntryKind, Outcome
from pipelines.view import Reject, View

# the walk's counts besides a handler's outcomes (pipelines/engine/apply.py), as plain strings; a late or
# conflicting message's error record is of the kind its count is named
SELECTED, DUPLICATE, LATE, CONFLICT, GAPS_SKIPPED = (o.value for o in (
    Outcome.SELECTED, Outcome.DUPLICATE, Outcome.LATE, Outcome.CONFLICT, Outcome.GAPS_SKIPPED))


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
    blocked_since: int | None = None
    parked: bool = False
    attempts: int = 0  # failed attempts so far of the message at last_seq + 1 (a parked stream's)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # logged gap ranges, sorted
    # seq -> the copy walked at it: loaded only for the seqs at or below last_seq that the pass's messages
    # resend (a resend with other content is a conflict, CONCEPTS §2), and added to as the walk goes
    walked: dict[int, Message] = field(default_factory=dict)
    keyed_rows: dict[str, list[dict]] = field(default_factory=dict)
    newest_rows: dict[str, dict | None] = field(default_factory=dict)

    @classmethod
    def loaded(cls, watermark: dict, skipped: list[tuple[int, int]], first_seq: int) -> "StreamState":
        """The state a pass starts a stream from: its watermark as the walk emitted it (empty for a stream
        the view never saw) and its logged gap ranges in seq order, a list of its own (the walk appends)."""
        return cls.watermarked(watermark.get("stream_type"), watermark.get("last_seq"), watermark.get("blocked_at"),
                               watermark.get("blocked_since"), watermark.get("parked"), watermark.get("attempts"),
                               skipped, first_seq)

    @classmethod
    def watermarked(cls, stream_type: str | None, last_seq: int | None, blocked_at: int | None,
                    blocked_since: int | None, parked: bool | None, attempts: int | None,
                    skipped: list[tuple[int, int]], first_seq: int) -> "StreamState":
        """`loaded`, from the watermark's fields (`last_seq` None: a stream the view never saw)."""
        return cls(stream_type, first_seq - 1 if last_seq is None else last_seq, blocked_at, blocked_since,
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
    if state.stream_type is None:
        first = pending_msgs or new_msgs
        if not first:  # an operator entry for a stream this view never saw: nothing to do
            return
        state.stream_type = first[0].stream_type
    StreamWalk(view, stream_id, state, pending_msgs, out, aggregate_sums).run(_by_entry(new_msgs), entries)


def _by_entry(new_msgs: list[Message]) -> dict[int, list[Message]]:
    """The pass's messages of the stream by entry (they come sorted by entry and line)."""
    if new_msgs and new_msgs[0].entry_idx == new_msgs[-1].entry_idx:  # the usual case: all from one entry
        return {new_msgs[0].entry_idx: new_msgs}
    by_entry: dict[int, list[Message]] = {}
    for m in new_msgs:
        by_entry.setdefault(m.entry_idx, []).append(m)
    return by_entry


class StreamWalk:
    """One (view, stream) through the entries of a pass, a step a method: each entry's messages are
    received (`receive`: duplicates, late, conflicts; the others buffered by seq), an operator's retry or
    skip unparks the stream (`operator_action`), the buffer is applied in seq order as far as it goes
    and gaps whose timer fired or that hold too much are skipped (`advance`); then the stream's
    watermark, buffer and rows are emitted (`finish`). The methods take the hot attributes as locals."""

    __slots__ = ("view", "name", "stream_id", "state", "out", "pending", "applier", "last_entry")

    def __init__(self, view: View, stream_id: str, state: StreamState, pending_msgs: list[Message],
                 out: PassOutput, aggregate_sums: dict[str, dict]) -> None:
        self.view, self.name, self.stream_id, self.state, self.out = view, view.name, stream_id, state, out
        self.pending: dict[int, Message] = {m.seq: m for m in pending_msgs}
        self.applier = StreamApplier(view, stream_id, state.keyed_rows, state.newest_rows, aggregate_sums)
        self.last_entry: int | None = None  # the last entry that walked the stream

    def run(self, by_entry: dict[int, list[Message]], entries: list[PassEntry]) -> None:
        state, stream_id = self.state, self.stream_id
        for entry in entries:
            arrived = by_entry.get(entry.entry_idx)
            operator = entry.kind in OPERATOR_KINDS
            if operator and entry.target_stream != stream_id:
                continue  # an operator action concerns one stream only
            if arrived is None and not self.pending and not operator:
                continue
            self.last_entry = entry.entry_idx
            if arrived:
                self.receive(entry, arrived)
            if operator and state.parked:
                self.operator_action(entry)
            if not state.parked:
                self.advance(entry)  # skipped ranges are appended in increasing seq order: `skipped` stays sorted
        if self.last_entry is not None:  # else a pass of another stream's operator action: this one stays as stored
            self.finish()

    def receive(self, entry: PassEntry, arrived: list[Message]) -> None:
        """Count the entry's messages as selected, and buffer each by its seq unless it is late (its gap was
        skipped), a duplicate (the same content as the copy walked or buffered at its seq) or a conflict
        (another content: the source rewrote the message)."""
        name, stream_id, state, pending, out = self.name, self.stream_id, self.state, self.pending, self.out
        entry_idx = entry.entry_idx
        out.count(name, entry_idx, SELECTED, len(arrived))
        for msg in arrived:
            seq = msg.seq
            if seq <= state.last_seq:
                if _in_skipped(state.skipped, seq):
                    out.count(name, entry_idx, LATE)
                    out.errors.append(ErrorRecord(name, stream_id, entry_idx, LATE, msg,
                                                  f"seq {seq} arrived after its gap was skipped", entry.t_us))
                else:  # no walked copy only where the archive holds none (docs/STORE.md): a duplicate
                    self._compare(entry, msg, state.walked.get(seq), "the copy walked at that seq")
                continue
            first = pending.get(seq)
            if first is None:
                pending[seq] = msg
                if faults.ARMED:
                    crash_point("order.candidate")
            else:
                self._compare(entry, msg, first, "the first received")

    def _compare(self, entry: PassEntry, msg: Message, kept: Message | None, which: str) -> None:
        """`msg` resends a seq whose copy `kept` the stream holds: a duplicate of the same content, else a
        conflict, logged with where `kept` came from."""
        if kept is None or kept.content == msg.content:
            self.out.count(self.name, entry.entry_idx, DUPLICATE)
            return
        self.out.count(self.name, entry.entry_idx, CONFLICT)
        self.out.errors.append(ErrorRecord(self.name, self.stream_id, entry.entry_idx, CONFLICT, msg,
                                           f"seq {msg.seq} differs from {which} "
                                           f"(batch {kept.batch_id}, line {kept.line})", entry.t_us))

    def operator_action(self, entry: PassEntry) -> None:
        """A retry or a skip of the parked stream unparks it; a skip drops its parked message (counted as
        the handler_error it was)."""
        state = self.state
        state.parked = False
        if entry.kind == EntryKind.SKIP:
            dropped = state.walked[state.last_seq + 1] = self.pending.pop(state.last_seq + 1)
            self.out.count(self.name, entry.entry_idx, HANDLER_ERROR)
            state.last_seq, state.attempts = dropped.seq, 0

    def advance(self, entry: PassEntry) -> None:
        """Apply the buffered messages in seq order from the watermark on, until a handler parks the
        stream or a seq is missing; a missing range whose timer fired (or with more buffered than
        max_pending behind it) is skipped, and the walk goes on after it."""
        state, pending, apply, stream_id = self.state, self.pending, self.applier.apply, self.stream_id
        walked = state.walked
        gap_timeout_us, max_pending = self.view.gap_timeout_us, self.view.max_pending
        nxt = state.last_seq + 1
        done = {APPLIED: 0, IGNORED: 0, HANDLER_ERROR: 0}
        while True:
            msg = pending.get(nxt)
            if msg is not None:
                outcome, exc = apply(Event(stream_id, msg))
                if exc is not None and self._handler_failed(entry, msg, nxt, exc):
                    break  # the message stays buffered: an operator decides (or the run fails)
                done[outcome] += 1
                walked[nxt] = pending.pop(nxt)  # a later entry of the pass may resend it
                nxt += 1
                continue
            if not pending:
                state.blocked_at = state.blocked_since = None
                break
            if state.blocked_at != nxt:
                state.blocked_at, state.blocked_since = nxt, entry.t_us
            waited = entry.t_us - state.blocked_since
            if waited >= gap_timeout_us:
                reason = "timeout"
            elif len(pending) > max_pending:
                reason = "capacity"
            else:
                break
            nxt = self._skip_gap(entry, nxt, reason, waited)
        state.last_seq = nxt - 1
        if state.parked:
            state.blocked_at = state.blocked_since = None
        else:
            state.attempts = 0
        for outcome, n in done.items():
            if n:
                self.out.count(self.name, entry.entry_idx, outcome, n)

    def _handler_failed(self, entry: PassEntry, msg: Message, nxt: int, exc: BaseException) -> bool:
        """Record a handler's failure on `msg`; whether the stream parks on it (its view's policy is not "skip")."""
        state, view, name = self.state, self.view, self.name
        rejected = isinstance(exc, Reject)
        policy = view.on_error if rejected else view.on_bug
        attempt = (state.attempts if nxt == state.last_seq + 1 else 0) + 1
        exc_type, message, trace = describe_exception(exc)
        error = ErrorRecord(name, self.stream_id, entry.entry_idx, HANDLER_ERROR, msg, f"{exc_type}: {message}",
                            entry.t_us, exc_type, message, trace, "reject" if rejected else "bug", attempt)
        self.out.errors.append(error)
        if policy == "skip":
            return False
        if policy == "fail":
            self.out.fatal.append(HandlerBug(name, self.stream_id, msg.seq, entry.entry_idx, error.reason))
        state.parked, state.attempts = True, attempt
        return True

    def _skip_gap(self, entry: PassEntry, nxt: int, reason: str, waited: int) -> int:
        """Log the missing range from `nxt` to the first buffered seq as skipped; returns that seq."""
        name, out = self.name, self.out
        first_waiting = min(self.pending)
        out.gaps.append(GapRecord(name, self.stream_id, entry.entry_idx, reason, nxt, first_waiting - 1, waited,
                                  entry.batch_id, entry.t_us))
        out.count(name, entry.entry_idx, GAPS_SKIPPED)
        crash_point("order.gap_skipped")
        self.state.skipped.append((nxt, first_waiting - 1))
        return first_waiting

    def finish(self) -> None:
        """Emit the stream's watermark, its buffer, and its keyed rows and appended rows."""
        name, stream_id, state, pending, out, last_entry = (self.name, self.stream_id, self.state, self.pending,
                                                            self.out, self.last_entry)
        out.watermarks.append(WatermarkRecord(name, stream_id, last_entry, state.stream_type, state.last_seq,
                                              state.blocked_at, state.blocked_since, state.parked, len(pending),
                                              state.attempts))
        if pending:
            out.pending.extend(PendingRecord(name, stream_id, msg) for msg in sorted(pending.values()))
        if faults.ARMED:
            crash_point("order.stream_walked")
        for table in self.view.tables:
            member = self.applier.tables[table.name]
            if table.kind == "keyed":
                out.rows.append(RowsRecord(name, stream_id, table.name, list(member.rows.values())))
            elif table.kind == "append" and member.appended:
                out.rows.append(RowsRecord(name, stream_id, table.name, member.appended))
