"""A store knows the views it serves (CONCEPTS §4): which loaded views it refuses and in what words, and the two
explicit acts that change its set, `remove_view` and `rename_view` (pipelines/store/versions.py), on a DuckDB
store in process. The same through the real `inorder`: tests/cli/test_home_safety.py and
tests/cli/test_view_owns_tables.py."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import pytest

from pipelines.store.database import Store
from pipelines.store.versions import ViewSetMismatch, remove_view, rename_view, stored_views
from pipelines.view import Column, Table, View
from tests.harness import fresh_home

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
NOTHING_WRITTEN = "; nothing was written"


def loaded(name: str, tables: tuple[str, ...], module: str | None) -> View:
    """A view with one per-stream table a name of `tables`, as the registry loads it from `module`."""
    view = View(name=name, tables=tuple(Table.per_stream(t, key="id", columns={"n": Column(int)}) for t in tables),
                subscribes=("thing",))
    object.__setattr__(view, "module", module)  # the registry's own way (View is frozen)
    return view


RIDES = loaded("rides", ("trips",), "ride_views")
FARES = loaded("fares", ("fares",), "fare_views")
HOLDING = [RIDES, FARES]


@pytest.fixture
def home(tmp_path):
    """A home whose store holds rides (module ride_views) and fares (module fare_views)."""
    home = fresh_home(tmp_path)
    Store.open(home, HOLDING).close()
    return home


def refusal(home, views, adding=()) -> str:
    with pytest.raises(ViewSetMismatch) as refused:
        Store.open(home, views, adding).close()
    message = str(refused.value)
    assert "\n" not in message and message.endswith(NOTHING_WRITTEN)
    return message


def test_views_of_the_store_some_or_all_or_added_explicitly_open_it(home):
    tolls = loaded("tolls", ("tolls",), "toll_views")
    for views, adding in (([RIDES], ()), ([FARES, RIDES], ()), ([*HOLDING, tolls], ["tolls"])):
        Store.open(home, views, adding).close()
    assert list(stored_views(duckdb.connect(str(home.database), read_only=True))) == ["fares", "rides", "tolls"]


def test_loaded_views_that_name_none_of_the_store_are_refused_with_the_modules_to_load(home):
    holds = "the store holds the views fares, rides, but INORDER_VIEWS loaded tolls: none of them is in the store. "
    assert refusal(home, [loaded("tolls", ("tolls",), "toll_views")]) == (
        f"{holds}Set INORDER_VIEWS=fare_views,ride_views, the modules of the store's views (or point INORDER_HOME "
        f"at the right home){NOTHING_WRITTEN}")
    assert refusal(home, [loaded("tolls", ("tolls",), "ride_views"), loaded("tips", ("tips",), "fare_views")]) == (
        "the store holds the views fares, rides, but INORDER_VIEWS loaded tolls, tips: none of them is in the store. "
        "The modules fare_views, ride_views no longer declare fares, rides: declare them again, or take them out "
        f"of the store with `inorder remove-view VIEW` (or point INORDER_HOME at the right home){NOTHING_WRITTEN}")


def test_a_store_of_one_view_names_its_one_module(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [RIDES]).close()
    holds = "the store holds the views rides, but INORDER_VIEWS loaded tolls: none of them is in the store. "
    assert refusal(home, [loaded("tolls", ("tolls",), "toll_views")]) == (
        f"{holds}Set INORDER_VIEWS=ride_views, the module of the store's views (or point INORDER_HOME at the right "
        f"home){NOTHING_WRITTEN}")
    assert refusal(home, [loaded("tolls", ("tolls",), "ride_views")]) == (
        f"{holds}The module ride_views no longer declares rides: declare it again, or take it out of the store with "
        f"`inorder remove-view rides` (or point INORDER_HOME at the right home){NOTHING_WRITTEN}")


def test_a_store_that_recorded_no_module_asks_for_the_modules_of_its_views(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [loaded("rides", ("trips",), None)]).close()
    assert refusal(home, [loaded("tolls", ("tolls",), "toll_views")]) == (
        "the store holds the views rides, but INORDER_VIEWS loaded tolls: none of them is in the store. Set "
        "INORDER_VIEWS to the modules of the store's views (or point INORDER_HOME at the right home)"
        f"{NOTHING_WRITTEN}")


def test_a_view_renamed_in_its_module_is_refused_with_rename_view_first(home):
    renamed = loaded("ride_trips", ("trips",), "ride_views")
    assert refusal(home, [renamed]) == (
        "the store holds the views fares, rides, but INORDER_VIEWS loaded ride_trips: none of them is in the store. "
        "If ride_trips is rides renamed (it declares the same tables), `inorder rename-view rides ride_trips` "
        "renames it in the store, with no replay; else set INORDER_VIEWS=fare_views,ride_views, the modules of the "
        f"store's views (or point INORDER_HOME at the right home){NOTHING_WRITTEN}")
    assert refusal(home, [FARES, renamed]) == (
        "the store holds the views fares, rides, but INORDER_VIEWS loaded fares, ride_trips: ride_trips would be "
        "added to it. If ride_trips is rides renamed (it declares the same tables), `inorder rename-view rides "
        "ride_trips` renames it in the store, with no replay; else add them explicitly with `inorder run "
        f"--add-views ride_trips`, or leave them out of INORDER_VIEWS{NOTHING_WRITTEN}")
    assert refusal(home, [FARES, renamed], adding=["ride_trips"]) == (
        "view ride_trips declares table trips, which the store's view rides owns: a table belongs to one view. "
        "If ride_trips is rides renamed (it declares the same tables), `inorder rename-view rides ride_trips` "
        "renames it in the store, with no replay; else rename the table, or take rides out of the store first "
        f"(`inorder remove-view rides`){NOTHING_WRITTEN}")


def test_views_added_to_a_store_that_holds_others_are_refused_unless_added_explicitly(home):
    tolls, tips = loaded("tolls", ("tolls",), "ride_views"), loaded("tips", ("tips",), "ride_views")
    assert refusal(home, [RIDES, tolls, tips]) == (
        "the store holds the views fares, rides, but INORDER_VIEWS loaded rides, tolls, tips: tolls, tips would be "
        "added to it. Add them explicitly with `inorder run --add-views tolls,tips`, or leave them out of "
        f"INORDER_VIEWS{NOTHING_WRITTEN}")
    assert "would be added to it" in refusal(home, [RIDES, tolls, tips], adding=["tolls"])


def test_a_table_another_stored_view_owns_is_refused_whether_that_view_is_loaded_or_not(home):
    grabbing = loaded("fares", ("fares", "trips"), "fare_views")  # a stored view that now declares rides' table too
    owned = ("view fares declares table trips, which the store's view rides owns: a table belongs to one view. "
             f"Rename the table, or take rides out of the store first (`inorder remove-view rides`){NOTHING_WRITTEN}")
    assert refusal(home, [grabbing]) == owned
    assert refusal(home, [RIDES, grabbing]) == owned
    added = loaded("tolls", ("tolls", "fares"), "toll_views")  # an added view declaring another's table and its own
    assert refusal(home, [RIDES, added], adding=["tolls"]) == (
        "view tolls declares table fares, which the store's view fares owns: a table belongs to one view. Rename "
        f"the table, or take fares out of the store first (`inorder remove-view fares`){NOTHING_WRITTEN}")


def state_rows(con, view: str) -> None:
    """A watermark, a buffered message, an error, a gap and a ledger row of `view`."""
    con.execute("INSERT INTO inorder.watermarks (view, stream_id, last_seq) VALUES (?, 's', 1)", [view])
    con.execute("INSERT INTO inorder.pending (view, stream_id, seq) VALUES (?, 's', 3)", [view])
    con.execute("INSERT INTO inorder.errors (view, kind) VALUES (?, 'handler_error')", [view])
    con.execute("INSERT INTO inorder.gaps (view, stream_id, first_missing, last_missing, waited_seconds, reason) "
                "VALUES (?, 's', 2, 2, 600, 'timeout')", [view])
    con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) VALUES "
                "('b1', ?, 1, 'batch', ?), ('b2', ?, 2, 'batch', ?)", [view, T0, view, T0])


def engine_rows(con) -> dict[str, list]:
    return {table: sorted(con.execute(f"SELECT view FROM inorder.{table}").fetchall())
            for table in ("watermarks", "pending", "errors", "gaps", "batches", "view_versions")}


def view_tables(con) -> list[str]:
    return sorted(t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
                                            ).fetchall())


EACH_ONE = {"watermarks": 1, "pending": 1, "errors": 1, "gaps": 1, "batches": 2}


def test_remove_view_says_what_it_would_drop_and_drops_only_that_when_confirmed(home):
    with Store.open(home, HOLDING) as store:
        con = store.con
        for view in ("rides", "fares"):
            state_rows(con, view)
        con.execute("CREATE SCHEMA inorder_rebuild_rides")  # an interrupted rebuild's shadow
        before = engine_rows(con)
        would = remove_view(con, "rides", confirmed=False)
        assert (would.view, would.tables, would.state_rows, would.shared) == ("rides", ("trips",), EACH_ONE, ())
        assert engine_rows(con) == before and view_tables(con) == ["fares", "trips"]
        removed = remove_view(con, "rides", confirmed=True)
        assert removed == would
        assert engine_rows(con) == {table: [r for r in rows if r != ("rides",)] for table, rows in before.items()}
        assert view_tables(con) == ["fares"]
        assert not con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'inorder_rebuild_rides'"
                               ).fetchone()[0]
        assert list(stored_views(con)) == ["fares"]


def test_remove_view_keeps_a_table_another_view_claims(home):
    with Store.open(home, HOLDING) as store:
        con = store.con  # as older code let two views claim a table: fares claims trips too
        con.execute("""UPDATE inorder.view_versions SET tables = '[{"name": "fares"}, {"name": "trips"}]'
                       WHERE view = 'fares'""")
        removed = remove_view(con, "rides", confirmed=True)
        assert (removed.tables, removed.shared) == ((), ("trips",))
        assert view_tables(con) == ["fares", "trips"]


def test_remove_and_rename_refuse_a_view_the_store_does_not_hold(home):
    with Store.open(home, HOLDING) as store:
        for act in (lambda: remove_view(store.con, "tolls", confirmed=True),
                    lambda: rename_view(store.con, "tolls", "tips")):
            with pytest.raises(ViewSetMismatch) as refused:
                act()
            assert str(refused.value) == "the store holds no view 'tolls' (it holds fares, rides)"
    empty = fresh_home(home.root.parent, "empty")
    with Store.open(empty, ()) as store, pytest.raises(ViewSetMismatch) as refused:
        remove_view(store.con, "rides", confirmed=False)
    assert str(refused.value) == "the store holds no view 'rides' (it holds none)"


def test_rename_view_moves_the_views_history_to_its_new_name_and_drops_its_shadow(home):
    with Store.open(home, HOLDING) as store:
        con = store.con
        for view in ("rides", "fares"):
            state_rows(con, view)
        con.execute("INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, status, target_view, "
                    "target_stream) VALUES (3, 'skip-3', 'skip', ?, 'ingested', 'rides', 's'), "
                    "(4, 'retry-4', 'retry', ?, 'ingested', 'fares', 's')", [T0, T0])
        con.execute("CREATE SCHEMA inorder_rebuild_rides")
        before = engine_rows(con)
        assert rename_view(con, "rides", "ride_trips") == EACH_ONE
        assert engine_rows(con) == {table: sorted(("ride_trips",) if r == ("rides",) else r for r in rows)
                                    for table, rows in before.items()}
        assert con.execute("SELECT target_view FROM inorder.ingest_log ORDER BY entry_idx").fetchall() == [
            ("ride_trips",), ("fares",)]
        assert not con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'inorder_rebuild_rides'"
                               ).fetchone()[0]
        assert stored_views(con)["ride_trips"].tables == ("trips",) and view_tables(con) == ["fares", "trips"]


def test_rename_view_refuses_a_name_the_store_holds_and_a_name_that_is_no_identifier(home):
    with Store.open(home, HOLDING) as store:
        con = store.con
        state_rows(con, "rides")
        before = engine_rows(con)
        with pytest.raises(ViewSetMismatch) as refused:
            rename_view(con, "rides", "fares")
        assert str(refused.value) == ("the store holds a view 'fares' already: `inorder remove-view fares` takes it "
                                      "out first, if it is the one to go; nothing was written")
        with pytest.raises(ValueError, match="view"):
            rename_view(con, "rides", "ride trips")
        assert engine_rows(con) == before
