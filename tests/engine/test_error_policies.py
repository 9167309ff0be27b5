"""Business refusals are not bugs (issue 10 §2), through the real engine: a `Reject` follows on_error,
any other exception parks the stream by default (on_bug), one error row per failed attempt, the
ledger counts messages that ended as errors, and conservation holds throughout. Each run is also
compared with the reference model, which knows nothing of the engine's code."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

from pipelines.facade import HandlerBugFailure, operator_action, run
from pipelines.view import Handlers
from tests.builders import batch, dep, opened
from tests.harness import assert_conserved, assert_same_store, entry_time, fresh_home, read_store, run_entries, \
    write_batch
from tests.reference_model import Entry, run_model
from views import account_activity as activity_view
from views import accounts as accounts_view


def deposited_with_a_bug(event, tables):
    """The real handler, with a bug: a large amount hits a typo (a KeyError), a bad one is still refused."""
    amount = event.payload.get("amount")
    if isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount > 100:
        return event.payload["amout"]
    return accounts_view.VIEW.handlers["Deposited"](event, tables)  # the typed handler, as the engine calls it


BROKEN = dataclasses.replace(accounts_view.VIEW, handlers=Handlers("accounts", {**accounts_view.VIEW.handlers,
                                                                               "Deposited": deposited_with_a_bug}))
FIXED = accounts_view.VIEW
ENTRIES = [batch(1, 0, opened("a"), dep("a", 2, 500), dep("a", 3, 5), opened("b"), dep("b", 2, "abc"),
                 dep("b", 3, 7))]


def errors(home) -> list[tuple]:
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        return con.execute("SELECT stream_id, seq, error_class, attempt, exception_type FROM inorder.errors "
                           "WHERE kind = 'handler_error' ORDER BY error_id").fetchall()
    finally:
        con.close()


def test_a_bug_parks_a_reject_skips_and_each_attempt_is_one_row(spark, tmp_path):
    home = fresh_home(tmp_path)
    retry_a = Entry("retry", "retry-2", 0, target_view="accounts", target_stream="a")
    run_entries(spark, home, [BROKEN], ENTRIES + [retry_a])  # the retry hits the same bug: attempt 2
    assert_same_store(read_store(home, [BROKEN]), run_model(ENTRIES + [retry_a], [BROKEN]))
    assert errors(home) == [("a", 2, "bug", 1, "KeyError"), ("b", 2, "reject", 1, "Reject"),
                            ("a", 2, "bug", 2, "KeyError")]
    store = read_store(home, [BROKEN])
    parked = {w["stream_id"]: (w["parked"], w["last_seq"], w["attempts"]) for w in store["watermarks"]}
    assert parked == {"a": (True, 1, 2), "b": (False, 3, 0)}
    assert sum(r["handler_error"] for r in store["batches"]) == 1  # b's refusal ended as an error; a's waits
    assert [(p["stream_id"], p["seq"]) for p in store["pending"]] == [("a", 2), ("a", 3)]

    # the fix is deployed: `inorder retry --view accounts --all` applies what waited
    assert operator_action(spark, home, [FIXED], FIXED, None, "retry") == ["a"]
    assert_conserved(home, [FIXED])
    store = read_store(home, [FIXED])
    assert [(r["account_id"], r["balance"]) for r in store["accounts"]] == [("a", 505), ("b", 7)]
    assert not any(w["parked"] for w in store["watermarks"]) and store["pending"] == []
    assert len(errors(home)) == 3  # a successful attempt adds no row
    assert operator_action(spark, home, [FIXED], FIXED, None, "retry") == []  # nothing parked: nothing to do


def test_a_retry_leaves_another_streams_due_buffer_as_it_was_stored(spark, tmp_path):
    """A retry's pass loads the view's buffers that are due at its time (here `c`'s, over a `max_pending` lowered
    since), but an operator entry walks its own stream alone: `c` keeps its buffer and the entry that last walked it
    (`updated_entry`, which the PostgreSQL catch-up follows) until a batch or a tick judges it."""
    home = fresh_home(tmp_path)
    first = batch(1, 0, opened("a"), dep("a", 2, 500), opened("c"), dep("c", 3, 1), dep("c", 4, 1))
    run_entries(spark, home, [BROKEN], [first])
    lowered = dataclasses.replace(BROKEN, max_pending=1)
    assert operator_action(spark, home, [lowered], lowered, ["a"], "retry") == ["a"]
    c = next(w for w in read_store(home, [lowered])["watermarks"] if w["stream_id"] == "c")
    assert (c["updated_entry"], c["last_seq"], c["pending_count"]) == (1, 1, 2)


@pytest.mark.parametrize("on_bug", ["skip", "park"])
def test_on_bug_skip_moves_on_and_skip_all_drops_parked_messages(spark, tmp_path, on_bug):
    view = dataclasses.replace(BROKEN, on_bug=on_bug)
    home = fresh_home(tmp_path)
    run_entries(spark, home, [view], ENTRIES)
    if on_bug == "park":
        assert operator_action(spark, home, [view], view, None, "skip") == ["a"]  # drops seq 2, applies 3
    assert_conserved(home, [view])
    store = read_store(home, [view])
    assert [(r["account_id"], r["balance"]) for r in store["accounts"]] == [("a", 5), ("b", 7)]
    assert sum(r["handler_error"] for r in store["batches"]) == 2
    assert [(s, q, c) for s, q, c, *_ in errors(home)] == [("a", 2, "bug"), ("b", 2, "reject")]


def test_on_bug_fail_fails_the_run_and_commits_nothing(spark, tmp_path):
    view = dataclasses.replace(BROKEN, on_bug="fail")
    home = fresh_home(tmp_path)
    (entry,) = ENTRIES
    write_batch(home, entry)
    with pytest.raises(HandlerBugFailure, match=r"view accounts \(on_bug='fail'\): handler bug on stream 'a' "
                                                r"seq 2: KeyError: 'amout'; nothing was committed"):
        run(spark, home, [view], now=entry_time(entry))
    store = read_store(home, [view])
    assert store["accounts"] == store["watermarks"] == store["errors"] == store["batches"] == []
    # the same batch projects once the view no longer fails on it
    run(spark, home, [FIXED], now=entry_time(entry))
    assert [(r["account_id"], r["balance"]) for r in read_store(home, [FIXED])["accounts"]] == [("a", 505),
                                                                                               ("b", 7)]


def test_retry_projects_only_its_own_view(spark, tmp_path):
    """An operator action on one view must not start the projection of the others."""
    parking, activity = dataclasses.replace(BROKEN, on_error="park"), activity_view.VIEW
    views = [parking, activity]
    home = fresh_home(tmp_path)
    (entry,) = ENTRIES
    write_batch(home, entry)
    run(spark, home, views, now=entry_time(entry), selected=[parking])  # account_activity left behind
    operator_action(spark, home, views, parking, ["b"], "skip")
    ledger = read_store(home, views)["batches"]
    assert {r["view"] for r in ledger} == {"accounts"}
