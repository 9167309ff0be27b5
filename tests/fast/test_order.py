"""The ordering walk on its own (no Spark): small inline streams."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from pipelines import faults
from pipelines.engine import apply, order
from pipelines.message import Message
from pipelines.engine.pass_data import ErrorRecord
from pipelines.engine.order import HandlerBug, HandlerBugFailure, PassEntry, PassOutput, StreamState, walk_stream
from tests.memory_engine import ReplayEntry, replay_entries
from pipelines.view import View
from views import accounts

VIEW = accounts.VIEW
SECOND = 1_000_000


def message(seq: int, entry: int, event_type: str = "Deposited", payload: str = '{"amount":1}') -> Message:
    return Message(seq, entry, seq, f"b{entry}", event_type, payload, "2026-11-01T00:00:00Z", None, "account")


def walk(state: StreamState, msgs: list[Message], entries: list[PassEntry]) -> PassOutput:
    out = PassOutput()
    walk_stream(VIEW, "a", state, [], msgs, entries, out, {})
    return out


def test_timer_starts_when_blocked_and_fires_after_gap_timeout_across_entries():
    entries = [PassEntry(1, "b1", "batch", 0), PassEntry(2, "tick-2", "tick", 599 * SECOND),
               PassEntry(3, "tick-3", "tick", 600 * SECOND)]
    state = StreamState(last_seq=0)
    out = walk(state, [message(1, 1, "AccountOpened", '{"owner":"ada"}'), message(3, 1)], entries)
    assert [(g.entry_idx, g.reason, g.first_missing, g.waited_us) for g in out.gaps] == [(3, "timeout", 2, 600 * SECOND)]
    assert (state.last_seq, state.blocked_at, state.skipped) == (3, None, [(2, 2)])
    assert out.counts[("accounts", 1, "applied")] == 1 and out.counts[("accounts", 3, "applied")] == 1


def test_an_operator_entry_for_an_unknown_stream_writes_nothing():
    out = walk(StreamState(), [], [PassEntry(1, "retry-1", "retry", 0, "a")])
    assert len(out) == 0 and out.counts == {}


def test_a_buffered_stream_that_no_entry_of_the_pass_walks_is_left_as_stored():
    """A pass of another stream's retry loads this view's buffers that are due at the retry's time (a
    `gap_timeout` or `max_pending` lowered since the last batch), but an operator entry walks its own stream only:
    this one emits nothing, so its stored watermark keeps the entry that last walked it (`updated_entry`, which the
    publication's catch-up follows). Through Spark: tests/engine/test_error_policies.py."""
    state = StreamState(last_seq=1, blocked_at=2, blocked_since=0)
    out = PassOutput()
    walk_stream(VIEW, "a", state, [message(3, 1)], [], [PassEntry(5, "retry-5", "retry", 700 * SECOND, "b")], out, {})
    assert len(out) == 0 and out.counts == {}


def test_the_watermark_names_the_last_entry_that_walked_the_stream():
    """docs/STORE.md `updated_entry`: an entry walks a stream it brings messages for, or that has a buffer;
    later entries of the same pass that do neither leave it."""
    entries = [PassEntry(1, "b1", "batch", 0), PassEntry(2, "b2", "batch", SECOND), PassEntry(3, "tick-3", "tick", 2 * SECOND)]
    opened = message(1, 1, "AccountOpened", '{"owner":"ada"}')
    out = walk(StreamState(last_seq=0), [opened, message(2, 1)], entries)
    (watermark,) = out.watermarks
    assert watermark.entry_idx == 1 and watermark.last_seq == 2
    out = walk(StreamState(last_seq=0), [opened, message(3, 1)], entries)  # seq 3 waits for 2 through entry 3
    (watermark,) = out.watermarks
    assert watermark.entry_idx == 3 and watermark.pending_count == 1


# A view whose withdrawals always fail (a bug: the stream parks), and a stream of it parked at seq 3.
PARKING = View(name="parking", tables=(), subscribes=("account",), on_bug="park")
PARKING.on("Deposited")(lambda event, tables: None)


@PARKING.on("Withdrawn")
def still_broken(event, tables) -> None:
    raise RuntimeError("still broken")


def operator_walk(action: str, attempts: int, msgs: list[Message]) -> tuple[StreamState, PassOutput, ErrorRecord]:
    """An operator's `action` on the stream parked at seq 3 after `attempts` failures: its state after, the
    output, and the one error logged (the failure of a later message)."""
    state = StreamState(stream_type="account", last_seq=2, parked=True, attempts=attempts)
    out = PassOutput()
    walk_stream(PARKING, "a", state, msgs, [], [PassEntry(2, f"{action}-2", action, SECOND, "a")], out, {})
    (error,) = out.errors
    return state, out, error


def test_a_failure_after_a_retried_message_applied_is_its_first_attempt():
    """`attempts` counts the failures of the message at last_seq + 1: once a retried message applies (its
    handler was fixed), a later message that fails in the same walk starts again at 1."""
    state, _, error = operator_walk("retry", 3, [message(3, 1), message(4, 1, "Withdrawn")])
    assert (error.msg.seq, error.attempt) == (4, 1)
    assert (state.last_seq, state.parked, state.attempts) == (3, True, 1)


class Crashed(Exception):
    """What a crash point raises here instead of killing the process."""


def reached(point: str, monkeypatch) -> bool:
    """Whether a replay of a bank scenario with a gap skipped, a handler error and a buffer reaches `point`."""
    monkeypatch.setattr(faults, "ARMED", point)
    monkeypatch.setattr(faults, "_point", point)
    monkeypatch.setattr(faults, "_nth", 1)
    monkeypatch.setattr(faults, "_hits", 0)
    monkeypatch.setattr(faults, "_delay_us", 0)

    def crash() -> None:
        raise Crashed(point)

    monkeypatch.setattr(faults, "_kill", crash)
    lines = [{"stream_id": "a", "seq": 1, "type": "AccountOpened", "payload": {"owner": "ada"}},
             {"stream_id": "a", "seq": 2, "type": "Withdrawn", "payload": {"amount": "abc"}},
             {"stream_id": "a", "seq": 4, "type": "Deposited", "payload": {"amount": "1"}}]
    log = [ReplayEntry("batch", datetime(2026, 1, 1, tzinfo=timezone.utc),
                       b"".join(json.dumps(line).encode() + b"\n" for line in lines), "b1.jsonl"),
           ReplayEntry("tick", datetime(2026, 1, 2, tzinfo=timezone.utc))]
    try:
        replay_entries([VIEW], log)
    except Crashed:
        return True
    return False


def test_every_crash_point_of_the_walk_is_armed_by_the_sweep_and_reached(monkeypatch):
    """The crash sweep (tests/crash_sweep.py) kills runs at these points: a point renamed or no longer
    passed would make its cases kill nothing."""
    from tests.crash_sweep import NAMED, REBUILD_POINTS

    source = "".join(Path(module.__file__).read_text() for module in (order, apply))
    in_the_walk = set(re.findall(r'crash_point\("([a-z_.]+)"\)', source))
    armed = {p for p, *_ in NAMED + REBUILD_POINTS if p.split(".")[0] in ("order", "apply")}
    assert in_the_walk == armed == {"order.candidate", "order.gap_skipped", "order.stream_walked",
                                    "apply.applied", "apply.handler_error"}
    for point in sorted(armed):
        assert reached(point, monkeypatch), point
    assert not reached("order.nowhere", monkeypatch)


def test_a_skip_drops_the_parked_message_and_a_failure_right_after_is_a_first_attempt():
    state, out, error = operator_walk("skip", 2, [message(3, 1, "Withdrawn"), message(4, 1, "Withdrawn")])
    assert (error.msg.seq, error.attempt) == (4, 1)
    assert (state.last_seq, state.parked, state.attempts) == (3, True, 1)
    assert out.counts[("parking", 2, "handler_error")] == 1  # the skipped message; the new failure waits, parked


def test_an_operator_action_for_another_stream_does_not_stop_this_streams_walk():
    """A pass may hold an operator's action for one stream and batches after it: the other streams go on."""
    state = StreamState(last_seq=0)
    out = walk(state, [message(1, 3, "AccountOpened", '{"owner":"ada"}'), message(2, 3)],
               [PassEntry(2, "retry-2", "retry", 0, "b"), PassEntry(3, "b3", "batch", SECOND)])
    assert state.last_seq == 2 and out.counts[("accounts", 3, "applied")] == 2


def test_a_failed_pass_names_its_first_handler_bug_and_counts_the_others():
    first = HandlerBug("accounts", "a", 3, 2, "ZeroDivisionError: a bug")
    assert str(HandlerBugFailure([first])) == (
        "view accounts (on_bug='fail'): handler bug on stream 'a' seq 3: ZeroDivisionError: a bug; nothing was committed")
    for others in ([HandlerBug("accounts", "b", 1, 2, "KeyError: 'x'")],
                   [HandlerBug("accounts", s, 1, 2, "KeyError: 'x'") for s in ("b", "c")]):
        failure = HandlerBugFailure([first, *others])
        assert str(failure).endswith(f"; nothing was committed ({len(others)} more streams failed)")
        assert failure.bugs == [first, *others]
