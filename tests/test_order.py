"""The ordering walk on its own (no Spark): small inline streams."""

from __future__ import annotations

from pipelines.message import Message
from pipelines.order import PassEntry, PassOutput, StreamState, walk_stream
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
    gaps = [r for r in out.records if r[0] == "gap"]
    assert [(r[3], r[4], r[5]["first_missing"], r[5]["waited_us"]) for r in gaps] == [(3, "timeout", 2, 600 * SECOND)]
    assert (state.last_seq, state.blocked_at, state.skipped) == (3, None, [(2, 2)])
    assert out.counts[("accounts", 1, "applied")] == 1 and out.counts[("accounts", 3, "applied")] == 1


def test_an_operator_entry_for_an_unknown_stream_writes_nothing():
    out = walk(StreamState(), [], [PassEntry(1, "retry-1", "retry", 0, "a")])
    assert out.records == [] and out.counts == {}
