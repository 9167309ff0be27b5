"""A view owns its tables (issue 33, item 1): a view renamed in its module is renamed in the store with
`inorder rename-view`, no replay, and ends as a single-view run would; adding it as a new view beside the
old one is refused before anything is written; `remove-view` drops only the tables its view owns. Through
the real `inorder` command, with a ride-hailing view of the user's own in a folder outside the repository."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest

from pipelines.config import Settings
from pipelines.facade import rename_view
from pipelines.registry import ViewDeclarationError, load_views
from pipelines.store.database import Home, Store
from pipelines.store.versions import ViewSetMismatch
from tests.cli.test_home_safety import store_contents
from tests.command import assert_started_no_server, clean_environment, inorder

FIRST, SECOND = "2026-11-20T10:00:00Z", "2026-11-20T11:00:00Z"
TABLES = ("trips", "driver_daily")

RIDE_VIEWS = '''
from inorder import Column, Reject, Table, View

TRIPS = Table.per_stream("trips", key="trip_id", columns={"driver_id": Column(str), "fare": Column(float)})
DRIVER_DAILY = Table.aggregate("driver_daily", key=("driver_id",), columns={
    "driver_id": Column(str), "trips": Column(int), "earnings": Column(float)})

RIDES = View(name=VIEW_NAME, tables=(TRIPS, DRIVER_DAILY), subscribes=("trip",))


@RIDES.on("Requested")
def requested(event, tables) -> None:
    if tables.trips.row is not None:
        raise Reject("trip already requested")
    fare = float(event.payload["fare"])
    tables.trips.save(driver_id=event.payload["driver_id"], fare=fare)
    tables.driver_daily.add({"driver_id": event.payload["driver_id"]}, trips=1, earnings=fare)


@RIDES.on("Adjusted")
def adjusted(event, tables) -> None:
    trip, by = tables.trips.row, float(event.payload["by"])
    tables.trips.save(fare=trip["fare"] + by)
    tables.driver_daily.add({"driver_id": trip["driver_id"]}, earnings=by)
'''


def trip(stream: str, seq: int, kind: str, **payload) -> str:
    return json.dumps({"stream_id": stream, "stream_type": "trip", "seq": seq, "type": kind, "payload": payload})


BATCHES = {
    "rides-1.jsonl": [trip("trip-1", 1, "Requested", driver_id="drv-1", fare=17.0),
                      trip("trip-1", 2, "Adjusted", by=1.6),
                      trip("trip-2", 1, "Requested", driver_id="drv-1", fare=13.0),
                      trip("trip-2", 2, "Requested", driver_id="drv-2", fare=9.0)],  # refused: a Reject
    "rides-2.jsonl": [trip("trip-3", 1, "Requested", driver_id="drv-2", fare=20.0),
                      trip("trip-2", 3, "Adjusted", by=-3.0)],
}


def views_folder(root: Path, view_name: str) -> Path:
    """A folder outside the repository holding the module `ride_views`, whose view is named `view_name`."""
    root.mkdir(parents=True)
    (root / "ride_views.py").write_text(RIDE_VIEWS.replace("VIEW_NAME", repr(view_name)))
    return root


def land(home: Path, *names: str) -> None:
    (home / "landing").mkdir(parents=True, exist_ok=True)
    for name in names:
        (home / "landing" / name).write_text("\n".join(BATCHES[name]) + "\n")


def query(home: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def view_rows(home: Path) -> dict[str, list[tuple]]:
    return {table: query(home, f'SELECT * FROM "{table}" ORDER BY ALL') for table in TABLES}


def projection(home: Path) -> dict[str, list[tuple]]:
    """What a view's run leaves: its tables, its watermarks and its error rows (logical times aside)."""
    return {**view_rows(home),
            "watermarks": query(home, "SELECT view, stream_id, last_seq FROM inorder.watermarks ORDER BY ALL"),
            "errors": query(home, "SELECT view, stream_id, seq, kind, message FROM inorder.errors ORDER BY ALL")}


@pytest.fixture(scope="module")
def rides_home(tmp_path_factory) -> Path:
    """A home whose store holds the view `rides`, which projected the first batch."""
    root = tmp_path_factory.mktemp("rides")
    home, views = root / "home", views_folder(root / "views", "rides")
    land(home, "rides-1.jsonl")
    inorder(clean_environment(home, "ride_views", path=(views,), as_a_user=True), "run", "--now", FIRST, cwd=views)
    return home


def renamed_copy(rides_home: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of the rides home, a module in which the user renamed `rides` to `ride_trips`, and the environment
    that loads it (run `inorder` from its folder, as the user would)."""
    home = tmp_path / "home"
    shutil.copytree(rides_home, home)
    views = views_folder(tmp_path / "views", "ride_trips")
    return home, views, clean_environment(home, "ride_views", path=(views,), as_a_user=True)


def test_a_renamed_view_is_renamed_in_the_store_with_no_replay_and_ends_as_a_single_view_run(rides_home, tmp_path):
    home, views, env = renamed_copy(rides_home, tmp_path)
    refused = inorder(env, "status", code=5, cwd=views)
    assert refused.stderr.splitlines()[-1] == (
        "inorder: refused: the store holds the views rides, but INORDER_VIEWS loaded ride_trips: none of them is in "
        "the store. If ride_trips is rides renamed (it declares the same tables), `inorder rename-view rides "
        "ride_trips` renames it in the store, with no replay; else the module ride_views no longer declares rides: "
        "declare it again, or take it out of the store with `inorder remove-view rides` (or point INORDER_HOME at the "
        "right home); nothing was written")

    renamed = inorder(env, "rename-view", "rides", "ride_trips", cwd=views)
    assert renamed.stdout.startswith("renamed view rides to ride_trips in the store"), renamed.stdout
    assert query(home, "SELECT DISTINCT view FROM inorder.batches") == [("ride_trips",)]  # the ledger's history
    land(home, "rides-2.jsonl")
    ran = inorder(env, "run", "--now", SECOND, cwd=views)
    assert "ran 1 batch," in ran.stdout  # the first batch is not replayed
    inorder(env, "status", cwd=views)

    single = tmp_path / "single"
    land(single, "rides-1.jsonl", "rides-2.jsonl")
    inorder(clean_environment(single, "ride_views", path=(views,), as_a_user=True), "run", "--now", SECOND, cwd=views)
    assert projection(home) == projection(single)
    assert query(home, "SELECT fare FROM trips WHERE trip_id = 'trip-1'") == [(18.6,)]
    assert query(home, "SELECT view, batch_id, applied FROM inorder.batches ORDER BY entry_idx") == [
        ("ride_trips", "rides-1", 3), ("ride_trips", "rides-2", 2)]
    assert query(home, "SELECT view FROM inorder.view_versions") == [("ride_trips",)]


def test_adding_a_view_whose_tables_another_stored_view_owns_is_refused_and_writes_nothing(rides_home, tmp_path):
    home, views, env = renamed_copy(rides_home, tmp_path)
    land(home, "rides-2.jsonl")
    before = store_contents(home / "store.duckdb")
    done = inorder(env, "run", "--add-views", "ride_trips", "--now", SECOND, code=5, cwd=views)
    assert_started_no_server(home, done)
    assert done.stderr.splitlines()[-1] == (
        "inorder: refused: view ride_trips declares table trips, which the store's view rides owns: a table belongs "
        "to one view. If ride_trips is rides renamed (it declares the same tables), `inorder rename-view rides "
        "ride_trips` renames it in the store, with no replay; else rename the table, or take rides out of the store "
        "first (`inorder remove-view rides`); nothing was written")
    assert store_contents(home / "store.duckdb") == before


def test_remove_view_drops_only_the_tables_its_view_owns(rides_home, tmp_path):
    """A store that older code let two views claim `trips` in (`run --add-views` of the renamed view): every
    command refuses the view whose tables the other claims, and removing one keeps the tables the other uses."""
    home, views, env = renamed_copy(rides_home, tmp_path)
    con = duckdb.connect(str(home / "store.duckdb"))
    con.execute("INSERT INTO inorder.view_versions (view, fingerprint, tables, recorded_at) "
                "SELECT 'ride_trips', fingerprint, tables, recorded_at FROM inorder.view_versions")
    con.close()
    rows = view_rows(home)
    refused = inorder(env, "status", code=5, cwd=views)
    assert refused.stderr.splitlines()[-1].startswith(
        "inorder: refused: view ride_trips declares table trips, which the store's view rides owns")

    inorder(env, "remove-view", "rides", "--yes", cwd=views)
    assert view_rows(home) == rows
    assert query(home, "SELECT view FROM inorder.view_versions") == [("ride_trips",)]
    inorder(env, "status", cwd=views)


def test_rename_view_refuses_what_it_cannot_rename_and_writes_nothing(tmp_path):
    home = Home.of(Settings(), tmp_path / "home")
    Store.open(home, load_views("shop.views")).close()
    before = store_contents(home.database)
    assert before["inorder.view_versions"] and all("'shop.views'" in row for row in before["inorder.view_versions"])
    for old, new, refusal, says in [
            ("order", "orders_v2", ViewSetMismatch, "the store holds no view 'order' (it holds customers, order_items, "
                                                    "orders, shop_daily)"),
            ("orders", "customers", ViewSetMismatch, "the store holds a view 'customers' already"),
            ("orders", "errors", ViewDeclarationError, "a view cannot be named 'errors', the name of an engine asset"),
            ("orders", "two words", ValueError, "view 'two words' is not a valid name"),
    ]:
        with pytest.raises(refusal, match=re.escape(says)):
            rename_view(home, old, new)
    assert store_contents(home.database) == before
