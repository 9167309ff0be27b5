"""The seed scenarios of the engine issue, run through the real engine (Spark + DuckDB).

Each scenario's store must equal the reference model's row for row; the model's own tests
(tests/fast/test_reference_model.py) pin down what those rows are.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import duckdb
import pytest

from pipelines.engine.ingest import ingest_landing, record_entry
from pipelines.engine.normalise import SourceMapping
from pipelines.facade import ingest_batches, project, project_views, rebuild, run
from pipelines.store.database import Store, us_from_utc
from tests.builders import T0, TIMERS_DUE_IN_A_PASS, batch, dep, msg, opened, tick, wd
from tests.harness import across_passes, assert_same_store, entry_time, fresh_home, read_store, run_entries, write_batch
from tests.reference_model import Entry, run_model
from tests.domains import BANK_VIEWS
from views import account_activity as activity_view
from views import accounts as accounts_view

PARKING = dataclasses.replace(accounts_view.VIEW, on_error="park")
QUICK_ACTIVITY = dataclasses.replace(activity_view.VIEW, gap_timeout=60)


def engine_equals_model(spark, tmp_path, entries, views=BANK_VIEWS):
    home = fresh_home(tmp_path)
    run_entries(spark, home, views, entries)
    store = read_store(home, views)
    assert_same_store(store, run_model(entries, views))
    return home, store


def ledger(store, view):
    return {r["batch_id"]: r for r in store["batches"] if r["view"] == view}


def test_waiting_in_one_view_in_order_in_another(spark, tmp_path):
    """seq 2 is late for a view whose gap timed out, and fills the gap in a view still waiting."""
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 30)),
        tick(2, 120),
        batch(3, 200, dep("a", 2, 20)),
    ], [accounts_view.VIEW, QUICK_ACTIVITY])
    assert ledger(store, "accounts")["b3"]["applied"] == 2
    assert ledger(store, "account_activity")["b3"]["late"] == 1
    assert [r["amount"] for r in store["account_activity"]] == [Decimal("30.00")]


def test_duplicate_discarded_by_one_view_processed_by_another(spark, tmp_path):
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 30)),
        tick(2, 120),
        batch(3, 200, dep("a", 3, 30), dep("a", 2, 20)),
    ], [accounts_view.VIEW, QUICK_ACTIVITY])
    assert ledger(store, "account_activity")["b3"]["duplicate"] == 1  # seq 3 was applied at the tick
    assert ledger(store, "accounts")["b3"]["applied"] == 2  # seq 3 waited, and is applied now
    assert store["accounts"][0]["balance"] == Decimal("50.00")


def test_two_streams_wait_independently(spark, tmp_path):
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 3), opened("b"), dep("b", 3, 3)),
        batch(2, 400, dep("b", 2, 2), dep("b", 5, 5)),
        tick(3, 600),
        tick(4, 1000),
    ])
    gaps = sorted((g["stream_id"], g["batch_id"]) for g in store["gaps"] if g["view"] == "accounts")
    assert gaps == [("a", "tick-3"), ("b", "tick-4")]


def test_poison_message_logged_while_later_messages_apply(spark, tmp_path):
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 2, "abc"), dep("a", 3, 7),
              msg("a", 4, "Deposited", occurred_at="yesterday", amount=1))])
    assert store["accounts"][0]["balance"] == Decimal("8.00")
    home_errors = [e for e in store["errors"] if e["kind"] == "handler_error"]
    assert len(home_errors) == 4


def test_gap_skipped_after_timeout_then_late(spark, tmp_path):
    home, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 30)),
        tick(2, 599),
        tick(3, 600),
        batch(4, 700, dep("a", 2, 20)),
    ])
    late = [(e["view"], e["seq"]) for e in store["errors"] if e["kind"] == "late"]
    assert sorted(late) == [("account_activity", 2), ("accounts", 2), ("daily_totals", 2)]
    assert {g["waited_seconds"] for g in store["gaps"]} == {600.0}
    con = duckdb.connect(str(home.database), read_only=True)  # DESIGN's own column names work too
    assert con.execute("SELECT DISTINCT waited FROM inorder.gaps").fetchall() == [(600.0,)]
    assert con.execute("SELECT pending_now FROM inorder.batches WHERE view = 'accounts' "
                       "ORDER BY entry_idx").fetchall() == [(1,), (1,), (0,), (0,)]
    con.close()


def test_duplicate_versus_conflict(spark, tmp_path):
    engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 30), dep("a", 3, 30), dep("a", 3, 99)),
        batch(2, 10, dep("a", 2, 20), opened("a"), msg("a", 1, "AccountOpened", owner="zed")),
    ])


def test_a_resend_that_rewrites_an_applied_message_is_a_conflict(spark, tmp_path):
    """DESIGN §2.3 (issue 33, finding 4): a batch resends seq 2 with another amount after seq 2 was applied in
    an earlier pass: a `conflict` whose error row names the walked copy's batch and line, not a silent
    duplicate; the identical resend stays a duplicate, and the seq skipped by its gap stays late."""
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 2, 20), dep("a", 4, 40)),
        tick(2, 600),  # seq 3's gap is skipped, seq 4 applied
        batch(3, 700, dep("a", 2, 99), dep("a", 2, 20), dep("a", 3, 30)),
    ], [accounts_view.VIEW])
    b3 = ledger(store, "accounts")["b3"]
    assert (b3["conflict"], b3["duplicate"], b3["late"], b3["applied"]) == (1, 1, 1, 0)
    (conflict,) = [e for e in store["errors"] if e["kind"] == "conflict"]
    assert (conflict["seq"], conflict["batch_id"], conflict["line"]) == (2, "b3", 1)
    assert conflict["reason"] == "seq 2 differs from the copy walked at that seq (batch b1, line 2)"
    assert store["accounts"][0]["balance"] == Decimal("60.00")


def test_park_retry_skip(spark, tmp_path):
    home, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), wd("a", 2, 5), dep("a", 3, 9), opened("b")),
        Entry("retry", "retry-2", T0 + 10, target_view="accounts", target_stream="a"),
        batch(3, 20, dep("a", 4, 1), wd("a", 2, 5)),
        Entry("skip", "skip-4", T0 + 30, target_view="accounts", target_stream="a"),
    ], [PARKING])
    assert store["accounts"][0]["balance"] == Decimal("10.00")


def test_parked_stream_waits(spark, tmp_path):
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), wd("a", 2, 5), dep("a", 3, 9)),
        batch(2, 700, dep("a", 5, 1)),
    ], [PARKING])
    (w,) = store["watermarks"]
    assert (w["parked"], w["last_seq"], w["pending_count"], w["blocked_at"]) == (True, 1, 3, None)


def test_capacity_skip(spark, tmp_path):
    engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), dep("a", 3, 3), dep("a", 4, 4)),
        batch(2, 5, dep("a", 6, 6)),
    ], [dataclasses.replace(accounts_view.VIEW, max_pending=2)])


def test_unrouted_and_malformed(spark, tmp_path):
    order = json.dumps({"stream_id": "o1", "stream_type": "order", "seq": 1, "type": "OrderPlaced"})
    _, store = engine_equals_model(spark, tmp_path, [
        batch(1, 0, opened("a"), order, "{oops", "", '{"stream_id": "a", "seq": 1.5, "type": "X"}'), tick(2, 1)])
    assert ledger(store, "accounts")["b1"]["unrouted"] == 1
    assert sorted(e["line"] for e in store["errors"] if e["kind"] == "malformed") == [3, 4, 5]


SCENARIO = [
    batch(1, 0, opened("a"), dep("a", 3, 30), opened("b"), dep("b", 2, 5), dep("b", 2, 6)),
    batch(2, 100, dep("a", 2, 20), wd("a", 4, 500), wd("b", 4, 1)),
    tick(3, 800),
    batch(4, 900, wd("b", 3, 1), dep("a", 5, 1)),
]


def test_rerunning_is_a_no_op(spark, tmp_path):
    home, live = engine_equals_model(spark, tmp_path, SCENARIO)
    with Store.open(home, BANK_VIEWS) as store:
        stats = project(spark, store, home, BANK_VIEWS, BANK_VIEWS, SourceMapping())
    assert (stats.passes, stats.entries) == (0, 0)
    write_batch(home, SCENARIO[0])  # the same batch file dropped again
    with Store.open(home, BANK_VIEWS) as store:
        assert ingest_landing(store, home, SourceMapping(), us_from_utc(entry_time(SCENARIO[-1]))) == []
    assert read_store(home, BANK_VIEWS) == live


def test_rebuild_equals_live(spark, tmp_path):
    home, live = engine_equals_model(spark, tmp_path, SCENARIO)
    for view in BANK_VIEWS:
        rebuild(spark, home, BANK_VIEWS, view)
    rebuilt = across_passes(read_store(home, BANK_VIEWS))
    live = across_passes(live)
    for name in rebuilt:
        assert sorted(rebuilt[name], key=repr) == sorted(live[name], key=repr), name


def test_several_batches_in_one_pass_equal_one_at_a_time(spark, tmp_path):
    """Ingesting all batches first and projecting them in one Spark pass gives the same store."""
    one_by_one, _ = engine_equals_model(spark, tmp_path / "a", SCENARIO)
    home = fresh_home(tmp_path, "b")
    with Store.open(home, BANK_VIEWS) as store:
        for entry in SCENARIO:
            t_us = us_from_utc(entry_time(entry))
            if entry.kind == "batch":
                write_batch(home, entry)
                ingest_landing(store, home, SourceMapping(), t_us)
            else:
                record_entry(store, "tick", t_us)
        stats = project(spark, store, home, BANK_VIEWS, BANK_VIEWS, SourceMapping())
    assert (stats.passes, stats.entries) == (1, len(SCENARIO))
    assert across_passes(read_store(home, BANK_VIEWS)) == across_passes(read_store(one_by_one, BANK_VIEWS))


def test_timers_due_inside_a_pass_of_several_entries_fire_at_their_entrys_time(spark, tmp_path):
    """As Dagster does once several files have landed: each batch ingested at its own logical time (its ingest
    asset), then the views projected once, the three entries in one pass. The buffers of the first pass fall due at
    the first, a middle and the last entry of the second, which brings none of their streams: each gap is skipped
    by the entry it falls due at, and the store is the model's, one entry at a time."""
    home = fresh_home(tmp_path)
    for first in (0, 3):
        for entry in TIMERS_DUE_IN_A_PASS[first:first + 3]:
            write_batch(home, entry)
            ingest_batches(home, BANK_VIEWS, [entry.batch_id], now=entry_time(entry))
        stats = project_views(spark, home, BANK_VIEWS, BANK_VIEWS)
        assert (stats.passes, stats.entries) == (1, 3)
    store = read_store(home, BANK_VIEWS)
    assert sorted((g["stream_id"], g["batch_id"]) for g in store["gaps"] if g["view"] == "accounts") == [
        ("x", "b4"), ("y", "b5"), ("z", "b6")]
    assert_same_store(across_passes(store), across_passes(run_model(TIMERS_DUE_IN_A_PASS, BANK_VIEWS)))


@pytest.mark.parametrize("split", [[1, 1, 1, 1, 1, 1, 1, 1], [8], [3, 5], [2, 2, 4]])
def test_batch_split_invariance(spark, tmp_path, split):
    lines = [dep("a", 3, 3), opened("a"), wd("a", 4, 1), dep("a", 2, 2), opened("b"), dep("b", 3, 7),
             dep("b", 2, 1), dep("a", 2, 2)]
    entries, start = [], 0
    for i, size in enumerate(split, start=1):
        entries.append(batch(i, i, *lines[start:start + size]))
        start += size
    home = fresh_home(tmp_path)
    run_entries(spark, home, BANK_VIEWS, entries)
    store = read_store(home, BANK_VIEWS)
    assert [r["balance"] for r in store["accounts"]] == [Decimal("4.00"), Decimal("8.00")]
    assert len(store["account_activity"]) == 5 and not store["gaps"]


def test_a_run_at_a_time_already_recorded_changes_nothing(spark, tmp_path):
    """Re-running `inorder run --now T` (e.g. after a crash) records no tick; a later T does."""
    entries = [batch(1, 0, opened("a"), dep("a", 3, 5)), tick(9, 0), tick(2, 1)]
    home, store = engine_equals_model(spark, tmp_path, entries)
    assert [r["batch_id"] for r in store["batches"] if r["view"] == "accounts"] == ["b1", "tick-2"]
    again = run_entries(spark, home, BANK_VIEWS, [tick(3, 1)]) or read_store(home, BANK_VIEWS)
    assert again == store



def test_a_waiting_stream_is_walked_only_when_something_can_change(spark, tmp_path):
    """A buffered stream that a run brings nothing for stays out of the pass until its gap timer is
    due (DESIGN §7: per-run work follows the batch and the buffers it touches); the store still
    equals the model's, which re-examines every buffer every time."""
    entries = [
        batch(1, 0, opened("a"), dep("a", 3, 30), opened("b")),  # a waits for seq 2 from T=0
        batch(2, 30, dep("b", 2, 20)),  # a's 60 s timer is not due: only b is walked
        tick(3, 59),  # not due yet: nothing to walk
        tick(4, 60),  # due: a's gap is skipped
        batch(5, 70, dep("a", 2, 1), dep("b", 3, 5)),  # a's seq 2 is late now
    ]
    home = fresh_home(tmp_path)
    Store.open(home, [QUICK_ACTIVITY]).close()
    walked = []
    for entry in entries:
        if entry.kind == "batch":
            write_batch(home, entry)
        report = run(spark, home, [QUICK_ACTIVITY], now=entry_time(entry))
        walked.append(report.projection.streams_touched.get("account_activity", 0))
    assert walked == [2, 1, 0, 1, 2]
    assert_same_store(read_store(home, [QUICK_ACTIVITY]), run_model(entries, [QUICK_ACTIVITY]))
