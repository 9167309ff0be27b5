"""Views that change (issue 14): a view's fingerprint, what a run does when the code no longer matches
what built the stored rows, migrations, and rebuilds beside the live view, swapped in at once.

The shop's `orders` view is the one that changes (tests/shop_changed.py): a user's domain, not the bank's."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import pipelines.engine.spark_pass
from pipelines.store.layout import Layout
from pipelines.store.rebuild import prepare_shadow
from pipelines.registry import load_views
from pipelines.facade import project_views, rebuild, run
from pipelines.observe.status import format_status, read_status
from pipelines.store.database import Home, Store
from pipelines.store.versions import compare, fingerprint, read_versions, record_projection, table_declarations
from pipelines.view import DECIMAL, Alerts, Column, Handlers, Thresholds, add_column
from demos.shop import GeneratorConfig, generate
from tests.harness import across_passes, assert_conserved, assert_same_store, fresh_home, read_store
from tests.shop_changed import changed_orders

OTHERS = tuple(v for v in load_views("shop.views") if v.name != "orders")
ORIGINAL = changed_orders("")
T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)


def shop_views(change: str) -> list:
    return [*OTHERS, changed_orders(change)]


# -- the fingerprint ---------------------------------------------------------------------------------

def _other_placed(event, tables) -> None:
    ORIGINAL.handlers["OrderPlaced"](event, tables)


def _predicate(event) -> bool:
    return True


(TABLE,) = ORIGINAL.tables
CHANGES_THAT_COUNT = {
    "a handler": dict(handlers=Handlers("orders", {**ORIGINAL.handlers, "OrderPlaced": _other_placed})),
    "a handler more": dict(handlers=Handlers("orders", {**ORIGINAL.handlers, "Gift": _other_placed})),
    "a handler less": dict(handlers=Handlers("orders", {k: v for k, v in ORIGINAL.handlers.items()
                                                        if k != "OrderPaid"})),
    "a column": dict(tables=(replace(TABLE, columns={**TABLE.columns, "note": Column(str)}),)),
    "a column's type": dict(tables=(replace(TABLE, columns={
        **TABLE.columns, "total": replace(TABLE.columns["total"], type=DECIMAL(14, 2))}),)),
    "the primary key": dict(tables=(replace(TABLE, primary_key=("order_id", "customer_id")),)),
    "the table's kind": dict(tables=(replace(TABLE, kind="append"),)),
    "a subscription": dict(subscribes=("order", "customer")),
    "gap_timeout": dict(gap_timeout=ORIGINAL.gap_timeout + 1),
    "max_pending": dict(max_pending=ORIGINAL.max_pending + 1),
    "on_error": dict(on_error="skip"),
    "on_bug": dict(on_bug="skip"),
    "a predicate": dict(predicate=_predicate),
    "the version": dict(version="2"),
}
CHANGES_THAT_DO_NOT = {
    "a column's rules and words": dict(tables=(replace(TABLE, columns={
        **TABLE.columns, "total": replace(TABLE.columns["total"], min=1, not_null=True, doc="another text")}),)),
    "alerts": dict(alerts=Alerts(late_rate=Thresholds(0.2, 0.3))),
    "owners and tags": dict(owners=("team:shop",), tags={"tier": "gold"}),
    "freshness": dict(fresh_within=timedelta(hours=1)),
    "on_change": dict(on_change="rebuild"),
}


@pytest.mark.parametrize("change", sorted(CHANGES_THAT_COUNT))
def test_every_change_to_what_decides_rows_changes_the_fingerprint(change):
    changed = replace(ORIGINAL, **CHANGES_THAT_COUNT[change])
    assert fingerprint(changed) != fingerprint(ORIGINAL)
    assert fingerprint(changed) == fingerprint(replace(ORIGINAL, **CHANGES_THAT_COUNT[change]))  # deterministic


@pytest.mark.parametrize("change", sorted(CHANGES_THAT_DO_NOT))
def test_what_decides_no_row_leaves_the_fingerprint(change):
    assert fingerprint(replace(ORIGINAL, **CHANGES_THAT_DO_NOT[change])) == fingerprint(ORIGINAL)


def _stored(view) -> tuple:
    from pipelines.store.versions import code_parts

    return (fingerprint(view), json.dumps(table_declarations(view.tables)), json.dumps(code_parts(view)),
            None, None, None)


def test_a_change_is_classified_and_named():
    row = _stored(ORIGINAL)
    assert compare(ORIGINAL, row).change == "same" and compare(ORIGINAL, row).matches
    assert compare(ORIGINAL, None).change == "new"
    handler = compare(changed_orders("handler"), row)
    # the handler, and the module it now comes from (a view's own modules are part of its code)
    assert (handler.change, handler.what) == ("code", "handler OrderPlaced, module tests.shop_changed changed")
    table = compare(changed_orders("table"), row)
    assert table.refused and table.what == "table orders: column channel VARCHAR added"
    refusal = table.refusal()
    assert "\n" not in refusal and "`inorder rebuild orders`" in refusal and "channel" in refusal
    # a nullable column added, and nothing else: the migration that needs no rebuild is offered too
    assert refusal.endswith('; or, if the rows already stored are right with NULL there, declare '
                            '`migrations=(add_column("orders", "channel"),)` on the view and run again: no rebuild)')
    assert compare(changed_orders("migration"), row).change == "migration"
    typed = compare(replace(ORIGINAL, **CHANGES_THAT_COUNT["a column's type"]), row)
    assert typed.refused and "total DECIMAL(12,2) -> DECIMAL(14,2)" in typed.what
    assert "add_column" not in typed.refusal()  # a type changed: only a rebuild fits
    # a migration that declares more than a nullable column added is refused, not applied
    both = replace(changed_orders("migration"), tables=(replace(changed_orders("migration").tables[0],
                                                                primary_key=("order_id", "customer_id")),))
    assert compare(both, row).refused


def test_the_mark_of_where_the_new_code_began_stays_put_over_later_passes(tmp_path):
    """What a pass's commit records of a view projected by code other than what built its rows (no Spark): the
    first pass's first batch, b3, stays the mark as two more passes commit, while the newest code is noted."""
    home = fresh_home(tmp_path)
    Store.open(home, shop_views("")).close()
    changed = shop_views("handler")
    with Store.open(home, changed) as store:
        for entry_idx in (3, 5, 6):  # the first pass projected b3 and b4
            record_projection(store.con, changed, {"orders": (entry_idx, f"b{entry_idx}")})
            orders = read_versions(store.con, changed)["orders"]
            assert (orders.newer, orders.since_entry, orders.since_batch) == (fingerprint(changed[-1]), 3, "b3")
            assert "mixed code: rows before batch b3 were built by older code" in orders.describe()
        assert all(read_versions(store.con, OTHERS)[v.name].matches for v in OTHERS)


def test_a_migration_must_name_a_declared_nullable_column():
    with pytest.raises(ValueError, match="does not declare"):
        replace(ORIGINAL, migrations=(add_column("orders", "nope"),))
    with pytest.raises(ValueError, match="primary key"):
        replace(ORIGINAL, migrations=(add_column("orders", "order_id"),))


# -- the engine --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shop-batches")
    generate(folder, GeneratorConfig(events=2400, streams=50, batches=3, seed=14))
    return sorted(folder.glob("*.jsonl"))


def land_and_run(spark, home: Home, views, batch: Path, hour: int):
    shutil.copy(batch, home.landing / batch.name)
    return run(spark, home, views, now=T0 + timedelta(hours=hour))


def fresh_run(spark, tmp_path: Path, views, batches: list[Path]) -> dict:
    """The store a fresh home gets from the same batches at the same logical times, all with `views`."""
    home = fresh_home(tmp_path, "fresh")
    for hour, batch in enumerate(batches):
        land_and_run(spark, home, views, batch, hour)
    return read_store(home, views)


def projected_by(home: Home, batch_id: str) -> set[str]:
    """The views whose ledger has the batch."""
    with Store.open_read_only(home) as store:
        return {r[0] for r in store.con.execute("SELECT view FROM inorder.batches WHERE batch_id = ?",
                                                 [batch_id]).fetchall()}


def versions(home: Home, views) -> dict:
    with Store.open_read_only(home) as store:
        return read_versions(store.con, views)


def test_a_changed_handler_goes_on_and_says_since_which_batch(spark, tmp_path, batches):
    """The third batch, cut in four, is projected by the changed handler in three passes: its first two parts in
    one, then one part each. The mark of where the new code began stays at the first part's batch."""
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches[:2]):
        land_and_run(spark, home, shop_views(""), batch, hour)
    assert all(v.matches for v in versions(home, shop_views("")).values())
    changed = shop_views("handler")
    before = versions(home, changed)["orders"]
    assert (before.change, before.newer) == ("code", None) and "built by older code" in before.describe()
    lines, parts = batches[2].read_text().splitlines(keepends=True), []
    for n in range(4):  # written beside the home, landed pass by pass
        parts.append(tmp_path / f"{batches[2].stem}-{n + 1}.jsonl")
        parts[-1].write_text("".join(lines[n * len(lines) // 4:(n + 1) * len(lines) // 4]))
    for i, landed in enumerate((parts[:2], parts[2:3], parts[3:])):
        for part in landed:
            shutil.copy(part, home.landing / part.name)
        stats = run(spark, home, changed, now=T0 + timedelta(hours=2 + i)).projection
        assert stats.refused == {} and "orders" in stats.by_view and stats.passes == 1  # it went on
        after = versions(home, changed)
        orders = after["orders"]
        assert (orders.stored, orders.newer, orders.since_batch) == (fingerprint(ORIGINAL), fingerprint(changed[-1]),
                                                                     parts[0].stem)
        assert (f"mixed code: rows before batch {parts[0].stem} were built by older code ({fingerprint(ORIGINAL)}), "
                "rows from it on by this code") in status_of(home, changed) and not orders.matches
        assert all(after[v.name].matches for v in OTHERS)
    with Store.open_read_only(home) as store:  # the rows placed by batch 3 were built by the new handler
        placed = store.con.execute("SELECT count(*) FILTER (WHERE customer_id = upper(customer_id)), count(*) "
                                   "FROM orders").fetchone()
    assert 0 < placed[0] < placed[1]


def test_a_changed_table_is_refused_while_the_others_go_on_and_a_rebuild_equals_a_fresh_run(spark, tmp_path,
                                                                                            batches):
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches[:2]):
        land_and_run(spark, home, shop_views(""), batch, hour)
    old_orders = read_store(home, [ORIGINAL])["orders"]
    changed = shop_views("table")
    stats = land_and_run(spark, home, changed, batches[2], 2).projection
    assert list(stats.refused) == ["orders"] and "\n" not in stats.refused["orders"]
    assert "`inorder rebuild orders`" in stats.refused["orders"]
    assert projected_by(home, batches[2].stem) == {v.name for v in OTHERS}  # the others went on
    assert read_store(home, [ORIGINAL])["orders"] == old_orders  # untouched, still the old shape
    with Store.open(home, changed) as store:  # a rebuild that got as far as its shadow, then died
        prepare_shadow(store, changed[-1], Layout.shadow("orders"))
    assert "orders: a rebuild's shadow (schema inorder_rebuild_orders) is in the store" in status_of(home, changed)

    rebuilt = rebuild(spark, home, changed, changed[-1])
    assert rebuilt.rebuilt == ["orders"] and rebuilt.entries == 3
    assert_same_store(across_passes(read_store(home, changed)), across_passes(fresh_run(spark, tmp_path, changed, batches)))
    assert versions(home, changed)["orders"].matches
    assert_conserved(home, changed)
    with Store.open_read_only(home) as store:  # no shadow is left behind
        assert store.con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name LIKE 'inorder_rebuild%'"
                                 ).fetchone()[0] == 0
    assert "shadow" not in status_of(home, changed)


def status_of(home: Home, views) -> str:
    with Store.open_read_only(home) as store:
        return format_status(read_status(store.con, views))


def test_a_declared_migration_adds_the_column_in_place(spark, tmp_path, batches):
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches[:2]):
        land_and_run(spark, home, shop_views(""), batch, hour)
    old = {r["order_id"]: r for r in read_store(home, [ORIGINAL])["orders"]}
    migrated = shop_views("migration")
    stats = land_and_run(spark, home, migrated, batches[2], 2).projection
    assert stats.refused == {} and "orders" in stats.by_view
    assert versions(home, migrated)["orders"].matches  # the migration recorded the new fingerprint
    rows = {r["order_id"]: r for r in read_store(home, migrated)["orders"]}
    untouched = [k for k, r in old.items() if rows[k]["version"] == r["version"]]
    assert untouched and all(rows[k] == {**old[k], "channel": None} for k in untouched)
    assert any(r["channel"] == "web" for r in rows.values())


def test_on_change_rebuild_rebuilds_at_the_next_run(spark, tmp_path, batches):
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches[:2]):
        land_and_run(spark, home, shop_views(""), batch, hour)
    changed = shop_views("rebuild")
    report = land_and_run(spark, home, changed, batches[2], 2)
    assert report.projection.rebuilt == ["orders"]
    assert_same_store(across_passes(read_store(home, changed)), across_passes(fresh_run(spark, tmp_path, changed, batches)))
    assert versions(home, changed)["orders"].matches


def test_on_change_rebuild_rebuilds_when_dagster_projects_too(spark, tmp_path, batches):
    """`project_views` (the projections asset's engine call) rebuilds such a view as `run` does."""
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches):
        land_and_run(spark, home, shop_views(""), batch, hour)
    changed = shop_views("rebuild")
    stats = project_views(spark, home, changed, changed)
    assert stats.rebuilt == ["orders"] and stats.by_view["orders"]["selected"] > 0
    assert_same_store(across_passes(read_store(home, changed)), across_passes(fresh_run(spark, tmp_path, changed, batches)))


def test_runs_go_on_during_the_replay_and_the_rebuild_catches_up_before_the_swap(spark, tmp_path, batches,
                                                                                  monkeypatch):
    """A run that ingests batch 3 while the rebuild's replay of batches 1 and 2 is in Spark: it is not
    kept waiting (the replay holds neither the DuckDB file nor the writer lock), and the swapped-in
    view has batch 3 too (the catch-up), equal to a fresh run of the new code."""
    home = fresh_home(tmp_path)
    for hour, batch in enumerate(batches[:2]):
        land_and_run(spark, home, shop_views(""), batch, hour)
    changed = shop_views("table")
    real = pipelines.engine.spark_pass._order_and_apply_in_spark
    during: list = []

    def replay_with_a_run_beside_it(*args, **kwargs):
        out = real(*args, **kwargs)
        if args[-1].name == "rebuild_orders" and not during:  # the replay's pass (its own scratch folder)
            during.append(land_and_run(spark, home, changed, batches[2], 2))
        return out

    monkeypatch.setattr(pipelines.engine.spark_pass, "_order_and_apply_in_spark", replay_with_a_run_beside_it)
    stats = rebuild(spark, home, changed, changed[-1])
    (beside,) = during
    assert [r.batch_id for r in beside.ingested] == [batches[2].stem]
    assert list(beside.projection.refused) == ["orders"]  # refused until the swap
    assert stats.passes == 2  # the replay (batches 1 and 2), then the catch-up (batch 3)
    assert_same_store(across_passes(read_store(home, changed)), across_passes(fresh_run(spark, tmp_path, changed, batches)))
