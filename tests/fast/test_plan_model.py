"""`plan_passes` against a planner written from its contract (docs/ARCHITECTURE.md, "Plan"; DESIGN §7): the
entries some view has not committed, in ingest order, each with the views that still have it to do; cut
greedily by records and by (view, stream) pairs; an entry over a bound alone starts a pass only entries adding
nothing join. Stores are small, so the sketches' counts are exact. No Spark: the ingest and the ledger only."""

from __future__ import annotations

import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.engine.ingest import record_entry
from pipelines.engine.planning import PassBounds, entries_waiting, plan_passes, views_waiting
from pipelines.store.database import Home, Store, us_from_utc
from tests.entry_stores import SUBSCRIBES, VIEWS, build
from tests.profiles import examples

STREAMS = st.sampled_from([("account", f"a{i}") for i in range(4)] + [("order", f"o{i}") for i in range(3)]
                          + [("customer", "c0"), ("parcel", "p0")])
ENTRY = st.one_of(
    st.tuples(st.just("batch"), st.lists(STREAMS, min_size=1, max_size=6)),
    st.tuples(st.just("tick"), st.just([])),
    st.tuples(st.sampled_from(["retry", "skip"]), st.tuples(st.sampled_from([v.name for v in VIEWS]), STREAMS)),
)


def model_rows(entries: list, committed: set[tuple[str, int]]) -> list[dict]:
    """Each entry some view has to do: its index, kind, records, target and the views with their streams."""
    rows = []
    for idx, (kind, what) in enumerate(entries, start=1):
        todo = [v for v in sorted(SUBSCRIBES) if (v, idx) not in committed
                and (kind not in ("retry", "skip") or what[0] == v)]
        if not todo:
            continue
        if kind == "batch":
            streams = {v: {s for t, s in what if t in SUBSCRIBES[v]} for v in todo}
            streams = {v: s for v, s in streams.items() if s}
        else:
            streams = {}
        # an operator's action brings its target stream, counted as one more pair (it has no sketch)
        rows.append({"idx": idx, "kind": kind, "records": len(what) if kind == "batch" else 0, "todo": todo,
                     "streams": streams, "unsketched": int(kind in ("retry", "skip"))})
    return rows


def model_cut(rows: list[dict], bounds: PassBounds) -> list[tuple[list[int], int, bool]]:
    passes: list[dict] = []
    for row in rows:
        current = passes[-1] if passes else None
        merged = {v: set(s) for v, s in (current["streams"] if current else {}).items()}
        for v, s in row["streams"].items():
            merged.setdefault(v, set()).update(s)
        pairs = sum(map(len, merged.values())) + (current["unsketched"] if current else 0) + row["unsketched"]
        if current is None or (current["records"] + row["records"] > bounds.records and row["records"]) or (
                pairs > bounds.pairs and pairs > current["pairs"]):
            current = {"idx": [], "records": 0, "streams": {}, "pairs": 0, "unsketched": 0}
            merged = {v: set(s) for v, s in row["streams"].items()}
            passes.append(current)
        current["idx"].append(row["idx"])
        current["records"] += row["records"]
        current["unsketched"] += row["unsketched"]
        current["streams"] = merged
        current["pairs"] = sum(map(len, merged.values())) + current["unsketched"]
    return [(p["idx"], p["pairs"], p["records"] > bounds.records or p["pairs"] > bounds.pairs) for p in passes]


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(entries=st.lists(ENTRY, min_size=1, max_size=6), data=st.data(),
       bounds=st.builds(PassBounds, records=st.integers(1, 12), pairs=st.integers(1, 20)))
def test_plan_passes_is_the_planner_of_its_contract(entries, data, bounds):
    committed = set(data.draw(st.lists(st.tuples(st.sampled_from(sorted(SUBSCRIBES)),
                                                 st.integers(1, len(entries))), max_size=8), label="committed"))
    with tempfile.TemporaryDirectory() as folder:
        home = Home(Path(folder) / "home").ensure()
        with build(home, entries) as store:
            for view, idx in committed:
                store.con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) "
                                  "SELECT batch_id, ?, entry_idx, kind, received_at FROM inorder.ingest_log "
                                  "WHERE entry_idx = ?", [view, idx])
            log = {idx: (batch_id, kind, us_from_utc(received_at), target_view, target_stream) for
                   idx, batch_id, kind, received_at, target_view, target_stream in store.con.execute(
                       "SELECT entry_idx, batch_id, kind, received_at, target_view, target_stream "
                       "FROM inorder.ingest_log").fetchall()}
            plans = plan_passes(store, VIEWS, bounds)
            waiting, waiting_views = entries_waiting(store, VIEWS), views_waiting(store, VIEWS)
    rows = model_rows(entries, committed)
    assert [([e["entry_idx"] for e in p.entries], p.pairs, p.over_bounds) for p in plans] == model_cut(rows, bounds)
    by_idx = {row["idx"]: row for row in rows}
    for plan in plans:
        for e in plan.entries:
            batch_id, kind, t_us, target_view, target_stream = log[e["entry_idx"]]
            assert e == {"entry_idx": e["entry_idx"], "batch_id": batch_id, "kind": kind, "target_view": target_view,
                         "target_stream": target_stream}
        projected = {(view, p.entry_idx) for view, es in plan.by_view.items() for p in es}
        assert projected == {(v, e["entry_idx"]) for e in plan.entries for v in by_idx[e["entry_idx"]]["todo"]}
        for es in plan.by_view.values():
            assert [p.entry_idx for p in es] == sorted(p.entry_idx for p in es)
            for p in es:
                batch_id, kind, t_us, _, target_stream = log[p.entry_idx]
                assert (p.batch_id, p.kind, p.t_us, p.target_stream) == (batch_id, kind, t_us, target_stream)
    assert waiting == [(log[row["idx"]][0], row["todo"]) for row in rows if row["kind"] != "tick"]
    assert waiting_views == {v for row in rows if row["kind"] != "tick" for v in row["todo"]}


def test_a_pass_entry_keeps_its_logical_time():
    """The entry's `received_at` reaches the walk as microseconds (the timers' clock), unrounded."""
    with tempfile.TemporaryDirectory() as folder:
        home = Home(Path(folder) / "home").ensure()
        with Store.open(home, VIEWS) as store:
            t = us_from_utc(datetime(2026, 11, 28, 7, 30, 1, 123456, tzinfo=timezone.utc))
            record_entry(store, "tick", t)
            (plan,) = plan_passes(store, VIEWS, PassBounds())
    assert {e.t_us for es in plan.by_view.values() for e in es} == {t}
