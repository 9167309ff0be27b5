"""The reference model against the engine's own ordering, apply and inspection code run in memory
(`tests/memory_engine.py`, `replay_entries`): many examples, no Spark. The Spark-backed tests
(tests/engine/test_engine_vs_model.py) keep the pass and the commit honest; these keep the core honest.

How many examples: the Hypothesis profile (tests/conftest.py): `dev` 200, `ci` 500 (derandomized),
`nightly` 20,000, `mutation` 60 (what `make mutation` runs for each mutant)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from hypothesis import HealthCheck, given, settings
import pytest
from hypothesis import strategies as st

from pipelines.engine.normalise import SourceMapping
from pipelines.testing import Replay
from tests.memory_engine import HandlerBugFailure, ReplayEntry, ReplayedStore, replay_entries
from tests.builders import T0, TIMERS_DUE_IN_A_PASS, batch, dep, opened, wd
from tests.domains import BANK_VIEWS, SHOP_VIEWS
from tests.harness import across_passes
from tests.holds_views import HOLDS
from tests.reference_model import Entry, RunFailed, last_line, run_model, split_lines
from tests.shop_strategies import shop_scenarios
from tests.strategies import hard_scenarios
from pipelines.view import Handlers, Reject
from views import accounts as accounts_view
from tests.builders import amount_of

FAST = settings(deadline=None, suppress_health_check=list(HealthCheck))


def skip_every_third_withdrawal(event) -> bool:
    """A view predicate: a message it refuses is `ignored`, and still moves the watermark."""
    return not (event.event_type == "Withdrawn" and event.seq % 3 == 0)


@st.composite
def bank_variants(draw) -> tuple[list, int]:
    """The bank's views with `accounts` under other policies (a small max_pending: capacity skips;
    park; a predicate; no gap timeout at all), and a first_seq of 0, 1 or 5."""
    accounts = dataclasses.replace(
        accounts_view.VIEW, max_pending=draw(st.sampled_from([1, 2, 3, 10_000])),
        on_error=draw(st.sampled_from(["skip", "park"])),
        predicate=draw(st.sampled_from([None, skip_every_third_withdrawal])),
        gap_timeout=draw(st.sampled_from([600.0, 600.0, 0.0])))
    views = [accounts if v.name == "accounts" else v for v in BANK_VIEWS]
    return views, draw(st.sampled_from([1, 1, 0, 5]))


def replay_entries_of(entries: list[Entry]) -> list[ReplayEntry]:
    """The model's entries as `replay_entries` takes them (a batch's lines as its JSON Lines file)."""
    out = []
    for e in entries:
        at = datetime.fromtimestamp(e.T, timezone.utc)
        if e.kind == "batch" and e.fmt != "jsonl":
            out.append(ReplayEntry("batch", at, e.lines, f"{e.batch_id}.{e.fmt}"))
        elif e.kind == "batch":
            lines = split_lines(e.lines) if isinstance(e.lines, (str, bytes)) else (e.lines or [])
            data = b"".join((line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")) + b"\n"
                            for line in lines)
            out.append(ReplayEntry("batch", at, data, f"{e.batch_id}.jsonl"))
        elif e.kind == "tick":
            out.append(ReplayEntry("tick", at))
        else:
            out.append(ReplayEntry(e.kind, at, target_view=e.target_view, target_stream=e.target_stream))
    return out


def _seconds(us: int | None) -> float | None:
    return None if us is None else us / 1e6


def image(store: ReplayedStore, views) -> dict[str, list[dict]]:
    """The replayed store in the reference model's shape (tests/reference_model.py `Model.result`)."""
    from tests.reference_model import _plain

    out = {t.name: [{c: _plain(v) for c, v in row.items()} for row in store.tables[t.name]]
           for v in views for t in v.tables}
    out["watermarks"] = [{**w, "blocked_since": _seconds(w["blocked_since"])} for w in store.watermarks]
    out["pending"] = list(store.pending)
    out["errors"] = [{**e, "logged_at": _seconds(e["logged_at"]), "traceback": last_line(e.get("traceback"))}
                     for e in store.errors]
    out["gaps"] = [{**g, "skipped_at": _seconds(g["skipped_at"])} for g in store.gaps]
    out["batches"] = [{**b, "received_at": _seconds(b["received_at"])} for b in store.batches]
    return out


# Runs that find several entries waiting walk them in one pass; the watermarks' pass bookkeeping then
# follows the passes, not the entries, and is left out (`across_passes`): the model runs one entry at a time.
ENTRIES_PER_PASS = st.sampled_from([1, 1, 2, 3, 8])


def assert_replay_equals_model(views, entries: list[Entry], first_seq: int = 1,
                               entries_per_pass: int = 1) -> ReplayedStore:
    """Asserts the replay equals the model, and returns the replay."""
    refused: list = []
    model = run_model(entries, views, first_seq=first_seq, refused=refused)
    replayed = replay_entries(views, replay_entries_of(entries), SourceMapping(first_seq=first_seq),
                              entries_per_pass)
    got = image(replayed, views)
    if entries_per_pass > 1:
        model, got = across_passes(model), across_passes(got)
    for name, want in model.items():
        have = got[name]
        if name in ("watermarks", "pending", "gaps", "errors"):  # no order is promised between streams
            have, want = sorted(have, key=_order), sorted(want, key=_order)
        assert [{k: row.get(k) for k in w} for row, w in zip(have, want)] == want, name
        assert len(have) == len(want), f"{name}: replay has {len(have)} rows, the model {len(want)}"
    assert [(v, s) for v, s, _ in replayed.refused] == refused
    return replayed


def _order(row: dict) -> str:
    return repr([(k, str(row.get(k))) for k in ("view", "stream_id", "seq", "line", "batch_id", "kind",
                                                "first_missing")])


@FAST
@given(variant=bank_variants(), data=st.data(), per_pass=ENTRIES_PER_PASS)
def test_the_engines_core_equals_the_model_on_hard_bank_scenarios(variant, data, per_pass):
    views, first_seq = variant
    entries = data.draw(hard_scenarios(["acct-1", "acct-2", "100"], first_seq=first_seq))
    assert_replay_equals_model(views, entries, first_seq, per_pass)


@FAST
@given(entries=shop_scenarios(max_streams=4, max_events=30), per_pass=ENTRIES_PER_PASS)
def test_the_engines_core_equals_the_model_on_the_shop(entries, per_pass):
    assert_replay_equals_model(SHOP_VIEWS, entries, entries_per_pass=per_pass)


def buggy(event, tables) -> None:
    """A handler with a bug on every third seq (any exception but Reject), and a business refusal on
    the others of a withdrawal over 100."""
    if event.seq % 3 == 0:
        raise ZeroDivisionError("a bug in the view")
    if event.event_type == "Withdrawn" and amount_of(event) > 100:
        raise Reject("too much at once")
    tables.holds.put({"account_id": event.stream_id, "seq": event.seq, "amount": amount_of(event)})


@FAST
@given(data=st.data(), on_error=st.sampled_from(["skip", "park"]), on_bug=st.sampled_from(["park", "skip", "fail"]),
       per_pass=ENTRIES_PER_PASS)
def test_the_engines_core_equals_the_model_on_a_view_with_bugs(data, on_error, on_bug, per_pass):
    """on_error applies to a Reject, on_bug to any other exception; on_bug="fail" fails the run where
    the engine would (the model and the replay both raise there), and nothing of that entry is kept."""
    view = dataclasses.replace(HOLDS, name="bugs", handlers=Handlers("bugs", {"Deposited": buggy, "Withdrawn": buggy}),
                               on_error=on_error, on_bug=on_bug)
    entries = data.draw(hard_scenarios(["acct-1", "acct-2", "100"]))
    entries = [dataclasses.replace(e, target_view="bugs") if e.kind in ("retry", "skip") else e for e in entries]
    for n in range(len(entries), 0, -1):  # the longest prefix the model runs without failing
        try:
            run_model(entries[:n], [view])
        except RunFailed as failed:
            with pytest.raises(HandlerBugFailure) as raised:
                replay_entries([view], replay_entries_of(entries[:n]), entries_per_pass=per_pass)
            bugs = [(b.view, b.stream_id, b.seq, b.entry_idx) for b in raised.value.bugs]
            assert failed.bug in bugs, bugs  # the pass may hold other streams' bugs too
            continue
        assert_replay_equals_model([view], entries[:n], entries_per_pass=per_pass)
        return


@FAST
@given(data=st.data(), per_pass=ENTRIES_PER_PASS)
def test_the_engines_core_equals_the_model_on_a_view_that_deletes(data, per_pass):
    entries = data.draw(hard_scenarios(["acct-1", "acct-2", "100"]))
    assert_replay_equals_model([HOLDS, accounts_view.VIEW], [dataclasses.replace(e, target_view="holds")
                                                             if e.kind in ("retry", "skip") else e for e in entries],
                               entries_per_pass=per_pass)


def count_then_fail(event, tables) -> None:
    """Counts the message in an aggregate before it finds it cannot apply it: a bug on every fifth seq,
    a refusal of a withdrawal over 100 (or of an amount that is not one). The increment must go with
    the failed handler's other writes, and a retry that fails again must not add it a second time."""
    tables.releases.add({"account_id": event.stream_id}, n=1)
    if event.seq % 5 == 0:
        raise ZeroDivisionError("a bug in the view")
    if event.event_type == "Withdrawn" and amount_of(event) > 100:
        raise Reject("too much at once")


COUNTS = dataclasses.replace(HOLDS, name="counts", handlers=Handlers("counts", {"Deposited": count_then_fail,
                                                                                "Withdrawn": count_then_fail}))


def counted(store: ReplayedStore) -> int:
    return sum(row["n"] for row in store.tables["releases"])


def applied(store: ReplayedStore, view: str) -> int:
    return sum(row["applied"] for row in store.batches if row["view"] == view)


@FAST
@given(data=st.data(), on_error=st.sampled_from(["skip", "park"]), on_bug=st.sampled_from(["park", "skip"]),
       per_pass=ENTRIES_PER_PASS)
def test_the_engines_core_equals_the_model_on_a_view_that_adds_to_an_aggregate_then_fails(
        data, on_error, on_bug, per_pass):
    """Every handled message adds 1 before its handler may fail (parked streams are retried and skipped at
    random): the aggregate counts exactly the messages applied, whichever failed, how often and how."""
    view = dataclasses.replace(COUNTS, on_error=on_error, on_bug=on_bug)
    entries = data.draw(hard_scenarios(["acct-1", "acct-2", "100"]))
    entries = [dataclasses.replace(e, target_view="counts") if e.kind in ("retry", "skip") else e for e in entries]
    replayed = assert_replay_equals_model([view], entries, entries_per_pass=per_pass)
    assert counted(replayed) == applied(replayed, "counts")


def test_a_handler_that_adds_to_an_aggregate_then_fails_adds_nothing_however_often_it_is_retried():
    view = dataclasses.replace(COUNTS, on_error="park")
    operator = [Entry(kind, "", T0 + t, target_view="counts", target_stream="a")
                for kind, t in (("retry", 10), ("retry", 20), ("skip", 30))]
    entries = [batch(1, 0, opened("a"), dep("a", 2, 5), wd("a", 3, 500), dep("a", 4, 1)), *operator]
    parked = assert_replay_equals_model([view], entries[:3])  # seq 3 refused three times: the stream waits
    assert counted(parked) == applied(parked, "counts") == 1
    assert [(e["seq"], e["attempt"]) for e in parked.errors] == [(3, 1), (3, 2), (3, 3)]
    skipped = assert_replay_equals_model([view], entries)  # skipped: seq 4 applies, and counts once
    assert counted(skipped) == applied(skipped, "counts") == 2
    assert skipped.tables["releases"] == [{"account_id": "a", "n": 2}]


@pytest.mark.parametrize("arrives_after, reason", [(600.0, "timeout"), (599.0, "capacity")])
def test_a_due_timeout_and_a_full_buffer_in_the_same_walk_skip_the_gap_as_a_timeout(arrives_after, reason):
    """DESIGN §2: the gap timer is looked at first, so a gap whose timer is due when the buffer also
    goes over `max_pending` is a `timeout`; a second earlier, the same buffer skips it as `capacity`."""
    small = dataclasses.replace(accounts_view.VIEW, max_pending=2)  # gap_timeout 600 s
    entries = [batch(1, 0, opened("a"), dep("a", 3, 3), dep("a", 4, 4)),
               batch(2, arrives_after, dep("a", 6, 6))]  # 3 waiting: one more than max_pending
    replayed = assert_replay_equals_model([small], entries)
    (gap,) = replayed.gaps
    assert (gap["first_missing"], gap["last_missing"], gap["reason"], gap["batch_id"]) == (2, 2, reason, "b2")
    assert gap["waited_seconds"] == arrives_after
    (watermark,) = replayed.watermarks  # seq 5's gap starts its own timer, and one waiting is within max_pending
    assert (watermark["last_seq"], watermark["blocked_at"], watermark["pending_count"]) == (4, 5, 1)


def test_timers_due_at_the_first_a_middle_and_the_last_entry_of_a_pass_fire_at_their_entrys_time():
    """A pass of three entries (as a run that finds several batches) judges each buffer's timer at each entry's
    logical time, as one entry per run would (the model): each gap is skipped by the entry it falls due at.
    tests/engine/test_engine_scenarios.py holds the same through Spark, with the state the driver loads."""
    replayed = assert_replay_equals_model(BANK_VIEWS, TIMERS_DUE_IN_A_PASS, entries_per_pass=3)
    assert sorted((g["view"], g["stream_id"], g["batch_id"]) for g in replayed.gaps) == [
        (view.name, stream, batch_id) for view in sorted(BANK_VIEWS, key=lambda v: v.name)
        for stream, batch_id in (("x", "b4"), ("y", "b5"), ("z", "b6"))]


def test_a_second_copy_that_differs_only_in_occurred_at_or_event_id_is_a_conflict():
    """DESIGN: the same seq twice among candidates keeps the first; if the contents differ (event type,
    payload, occurred_at, event_id), it is a `conflict`. A re-serialised copy is a duplicate."""
    first = '{"stream_id": "a", "seq": 2, "type": "Deposited", "payload": {"amount": 5}, ' \
            '"occurred_at": "2024-03-01T10:00:00Z", "event_id": "e2"}'
    copies = {
        "occurred_at": '{"stream_id": "a", "seq": 2, "type": "Deposited", "payload": {"amount": 5}, '
                       '"occurred_at": "2024-03-01T10:00:01Z", "event_id": "e2"}',
        "event_id": '{"stream_id": "a", "seq": 2, "type": "Deposited", "payload": {"amount": 5}, '
                    '"occurred_at": "2024-03-01T10:00:00Z", "event_id": "e2b"}',
        "reserialised": '{"event_id":"e2","occurred_at":"2024-03-01T10:00:00Z","payload":{"amount":5},'
                        '"seq":2,"stream_id":"a","type":"Deposited"}',
    }
    for differs, copy in copies.items():
        entries = [Entry("batch", "b1", 1_700_000_000.0, lines=[first, copy])]  # seq 1 missing: both wait
        for views in ([accounts_view.VIEW],):
            replayed = replay_entries(views, replay_entries_of(entries))
            (row,) = replayed.batches
            expected = "duplicate" if differs == "reserialised" else "conflict"
            assert row[expected] == 1 and row["conflict" if expected == "duplicate" else "duplicate"] == 0, differs
            assert_replay_equals_model(views, entries)


@pytest.mark.parametrize("entries_per_pass", [1, 2])
def test_a_message_rewritten_after_it_was_applied_is_a_conflict_naming_the_walked_copy(entries_per_pass):
    """DESIGN §2.3: seq 2 resent with another amount after seq 2 was applied, in a later pass or later in the
    same pass, is a `conflict` whose row names the walked copy; an identical resend is a silent duplicate."""
    entries = [batch(1, 0, opened("a"), dep("a", 2, 20)), batch(2, 10, dep("a", 2, 99), dep("a", 2, 20))]
    replayed = assert_replay_equals_model([accounts_view.VIEW], entries, entries_per_pass=entries_per_pass)
    b2 = next(row for row in replayed.batches if row["batch_id"] == "b2")
    assert (b2["conflict"], b2["duplicate"], b2["applied"]) == (1, 1, 0)
    (conflict,) = replayed.errors
    assert (conflict["kind"], conflict["seq"], conflict["batch_id"], conflict["line"]) == ("conflict", 2, "b2", 1)
    assert conflict["reason"] == "seq 2 differs from the copy walked at that seq (batch b1, line 2)"


def test_the_test_kit_logs_a_message_rewritten_after_it_was_applied():
    session = Replay(accounts_view.VIEW)
    session.run([opened("a"), dep("a", 2, 20)], at=datetime.fromtimestamp(T0, timezone.utc), batch_id="b1")
    result = session.run([dep("a", 2, 99)], at=datetime.fromtimestamp(T0 + 10, timezone.utc), batch_id="b2")
    assert [(e["kind"], e["seq"], e["reason"]) for e in result.errors] == [
        ("conflict", 2, "seq 2 differs from the copy walked at that seq (batch b1, line 2)")]
    assert (result.counts["conflict"], result.counts.get("duplicate", 0)) == (1, 0)


@pytest.mark.parametrize("entries_per_pass", [1, 2])
@pytest.mark.parametrize("resent_amount, outcome", [(500, "duplicate"), (50, "conflict")])
def test_a_skipped_parked_message_resent_is_a_duplicate_or_a_conflict_of_the_dropped_copy(
        entries_per_pass, resent_amount, outcome):
    """DESIGN §2.3: a message an operator's `skip` dropped was walked (its outcome the handler_error it was). Seq 3
    parks the stream (refused), is skipped, and is resent, in the skip's pass (two entries a pass) or a later one:
    identical, a duplicate; with another amount, a conflict naming the dropped copy. Seq 2, walked before it and
    resent beside it unchanged, stays a duplicate."""
    view = dataclasses.replace(COUNTS, on_error="park")
    entries = [batch(1, 0, opened("a"), dep("a", 2, 5), wd("a", 3, 500), dep("a", 4, 1)),
               Entry("skip", "", T0 + 10, target_view="counts", target_stream="a"),
               batch(2, 20, dep("a", 2, 5), wd("a", 3, resent_amount))]
    replayed = assert_replay_equals_model([view], entries, entries_per_pass=entries_per_pass)
    b2 = next(row for row in replayed.batches if row["batch_id"] == "b2")
    assert (b2["selected"], b2["duplicate"], b2["conflict"], b2["applied"], b2["handler_error"]) == (
        2, 2 if outcome == "duplicate" else 1, 1 if outcome == "conflict" else 0, 0, 0)
    refused = [(e["kind"], e["seq"], e["batch_id"]) for e in replayed.errors if e["kind"] == "handler_error"]
    assert refused == [("handler_error", 3, "b1")]
    conflicts = [(e["seq"], e["batch_id"], e["line"], e["reason"]) for e in replayed.errors if e["kind"] == "conflict"]
    assert conflicts == ([(3, "b2", 2, "seq 3 differs from the copy walked at that seq (batch b1, line 3)")]
                         if outcome == "conflict" else [])
    (watermark,) = replayed.watermarks
    assert (watermark["last_seq"], watermark["parked"], watermark["pending_count"]) == (4, False, 0)
