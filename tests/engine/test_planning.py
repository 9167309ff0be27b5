"""Passes planned by records and by the (view, stream) pairs they bring (pipelines/engine/planning.py): the
cut as a pure function, the sketches the ingest records, and plan_passes on a small store (no Spark)."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest

from pipelines.engine.ingest import ingest_landing, record_entry
from pipelines.engine.normalise import SourceMapping
from pipelines.engine.planning import (SKETCH_SIZE, SKETCH_SQL, PassBounds,
                                PlannedEntry, StreamSketch, cut_passes)
from pipelines.engine.planning import plan_passes
from pipelines.config import Settings
from pipelines.store.database import Home, Store
from tests.builders import dep, opened
from tests.domains import BANK_VIEWS

T = 1_700_000_000_000_000


def ids(first: int, last: int) -> list[str]:
    return [f"acct-{i}" for i in range(first, last)]


def sketch(stream_ids: list[str]) -> StreamSketch:
    """The streams' sketch as the ingest records it (by DuckDB)."""
    con = duckdb.connect()
    con.register("ids", pa.table({"stream_id": stream_ids}))
    hashes, = con.execute(f"SELECT {SKETCH_SQL} FROM (SELECT DISTINCT stream_id FROM ids)").fetchone()
    return StreamSketch.recorded(hashes, len(set(stream_ids)))


def batch(entry_idx: int, records: int, **streams: list[str]) -> PlannedEntry:
    return PlannedEntry(entry_idx, records, {view: sketch(s) for view, s in streams.items()})


def shape(passes) -> list[tuple[list[int], int]]:
    return [([e.entry_idx for e in p.entries], p.pairs) for p in passes]


def test_a_sketch_counts_exactly_up_to_its_size_and_estimates_a_union_beyond():
    assert sketch(ids(0, SKETCH_SIZE - 1)).streams == SKETCH_SIZE - 1
    small = sketch(ids(0, 100)).union(sketch(ids(50, 200)))
    assert small.streams == 200
    big = sketch(ids(0, 60_000)).union(sketch(ids(40_000, 100_000)))
    assert 90_000 <= big.streams <= 110_000  # not 120,000: the 20,000 streams of both count once
    assert sketch(ids(0, 60_000)).streams == 60_000  # a batch's own count is exact
    assert small.union(StreamSketch(unsketched=30)).streams == 230  # a count without a sketch adds up
    # a small side unioned into a larger one that holds it: the estimate (below 60,000 here) is floored at the larger
    assert sketch(ids(0, 59_000)).union(sketch(ids(0, 60_000))).streams == 60_000


def test_batches_of_the_same_streams_share_a_pass_and_new_streams_cut_it():
    same = [batch(i, 1000, accounts=ids(0, 1000)) for i in range(1, 11)]
    assert shape(cut_passes(same, PassBounds(pairs=1000))) == [(list(range(1, 11)), 1000)]
    new = [batch(i, 1000, accounts=ids(i * 1000, (i + 1) * 1000)) for i in range(1, 6)]
    assert shape(cut_passes(new, PassBounds(pairs=2500))) == [([1, 2], 2000), ([3, 4], 2000), ([5], 1000)]


def test_pairs_count_each_view_that_walks_a_stream():
    both = [batch(1, 10, accounts=ids(0, 10), activity=ids(0, 10)), batch(2, 5, accounts=ids(10, 15))]
    assert shape(cut_passes(both, PassBounds(pairs=25))) == [([1, 2], 25)]
    assert shape(cut_passes(both, PassBounds(pairs=24))) == [([1], 20), ([2], 5)]


def test_records_still_cut_passes():
    same = [batch(i, 400, accounts=ids(0, 10)) for i in range(1, 6)]
    assert [len(p.entries) for p in cut_passes(same, PassBounds(records=1000))] == [2, 2, 1]
    assert [len(p.entries) for p in cut_passes(same, PassBounds(records=800))] == [2, 2, 1]  # at the bound: within it


def test_a_batch_over_the_bound_makes_a_pass_that_only_entries_adding_nothing_join():
    bounds = PassBounds(pairs=100)
    tick = PlannedEntry(3, 0)
    entries = [batch(1, 5, accounts=ids(0, 5)), batch(2, 500, accounts=ids(0, 500)), tick,
               batch(4, 50, accounts=ids(100, 150)), batch(5, 5, accounts=ids(500, 505))]
    passes = cut_passes(entries, bounds)
    assert shape(passes) == [([1], 5), ([2, 3, 4], 500), ([5], 5)]
    assert [p.over(bounds) for p in passes] == [False, True, False]
    by_records = cut_passes([batch(1, 5, accounts=ids(0, 1)), tick, batch(6, 1, accounts=ids(0, 1))],
                            PassBounds(records=4))
    assert [([e.entry_idx for e in p.entries], p.over(PassBounds(records=4))) for p in by_records] == [
        ([1, 3], True), ([6], False)]
    at_both = PassBounds(records=5, pairs=100)  # a pass at its bounds is within them: no "over the bound" warning
    assert [p.over(at_both) for p in cut_passes([batch(1, 5, accounts=ids(0, 100))], at_both)] == [False]


def order(stream: str) -> str:
    return json.dumps({"stream_id": stream, "stream_type": "order", "seq": 1, "type": "OrderPlaced"})


def test_the_ingest_records_each_batchs_streams_and_plans_follow_them(home):
    """The bank's three views subscribe to accounts: an order stream brings no pair. b1 and b2 share
    account a: together they bring 4 accounts, 12 pairs, not 5 accounts."""
    (home.landing / "b1.jsonl").write_text("\n".join([opened("a"), opened("b"), opened("c"), order("o1")]) + "\n")
    (home.landing / "b2.jsonl").write_text("\n".join([dep("a", 2, 5), opened("d")]) + "\n")
    (home.landing / "b3.jsonl").write_text("")  # empty: set aside, never planned
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), T)
        record_entry(store, "tick", T + 1)
        recorded = store.con.execute("SELECT entry_idx, stream_type, streams, len(sketch) FROM inorder.ingest_streams "
                                     "ORDER BY ALL").fetchall()
        assert recorded == [(1, "account", 3, 3), (1, "order", 1, 1), (2, "account", 2, 2)]

        def planned(pairs: int) -> list[tuple[list[str], int, bool]]:
            bounds = PassBounds(pairs=pairs)
            return [([e["batch_id"] for e in p.entries], p.pairs, p.over_bounds)
                    for p in plan_passes(store, BANK_VIEWS, bounds)]

        assert planned(12) == [(["b1", "b2", "tick-4"], 12, False)]
        assert planned(11) == [(["b1"], 9, False), (["b2", "tick-4"], 6, False)]
        assert planned(8) == [(["b1"], 9, True), (["b2", "tick-4"], 6, False)]
        # accounts committed b1 (projected alone, as its Dagster asset can be): b1 brings the other two views' 6
        # pairs, within a bound of 6; b2 its 3 views' 6, and b1 and b2 together 10 (a and d in accounts)
        store.con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) "
                          "SELECT batch_id, 'accounts', entry_idx, kind, received_at FROM inorder.ingest_log "
                          "WHERE batch_id = 'b1'")
        assert planned(6) == [(["b1"], 6, False), (["b2", "tick-4"], 6, False)]
        assert planned(10) == [(["b1", "b2", "tick-4"], 10, False)]
        store.con.execute("DELETE FROM inorder.batches")
        # a store made before the ingest recorded streams: each record may be a stream of its own
        store.con.execute("DELETE FROM inorder.ingest_streams")
        assert planned(18) == [(["b1", "b2", "tick-4"], 18, False)]
        assert planned(17) == [(["b1"], 12, False), (["b2", "tick-4"], 6, False)]
        store.con.execute("DROP TABLE inorder.ingest_streams")  # as read-only opens of such a store find it
        assert planned(17) == [(["b1"], 12, False), (["b2", "tick-4"], 6, False)]


def test_a_run_cuts_its_passes_by_pairs_and_says_when_a_batch_alone_is_over(spark, tmp_path):
    """Two batches of 3 and 2 accounts for one view, at most 2 pairs a pass: two passes, the first a
    batch over the bound by itself; together they project what one pass would. Then the other view projects
    them, at most 3 pairs a pass: the view that committed them adds nothing, so b1 is within the bound (no
    warning) and b2 cuts a second pass."""
    from pipelines.facade import run
    from views import account_activity, accounts

    home = Home.of(Settings(pass_streams=2), tmp_path / "home").ensure()
    (home.landing / "b1.jsonl").write_text("\n".join([opened("a"), opened("b"), opened("c")]) + "\n")
    (home.landing / "b2.jsonl").write_text("\n".join([dep("a", 2, 5), opened("d")]) + "\n")
    said: list[str] = []
    views = [accounts.VIEW, account_activity.VIEW]
    report = run(spark, home, views, progress=said.append, selected=[accounts.VIEW])  # as its Dagster asset alone
    assert report.projection.passes == 2
    assert [line for line in said if "alone brings" in line] == [
        "pass 1/2: batch b1 alone brings about 3 (view, stream) pairs or more records than a pass takes "
        "(INORDER_PASS_STREAMS, INORDER_PASS_RECORDS); a batch is never split, so this pass takes it whole"]
    with Store.open(home, [accounts.VIEW]) as store:
        assert store.con.execute("SELECT account_id, balance FROM accounts ORDER BY 1").fetchall() == [
            ("a", 5), ("b", 0), ("c", 0), ("d", 0)]
    home = Home.of(Settings(pass_streams=3), tmp_path / "home")
    said.clear()
    report = run(spark, home, views, progress=said.append)  # a tick, and account_activity's b1 and b2
    assert report.projection.passes == 2 and not [line for line in said if "alone brings" in line], said
