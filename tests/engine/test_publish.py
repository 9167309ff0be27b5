"""Publishing to PostgreSQL (issue 11 §3), against a real server (tests/postgres_server.py), with the shop's
views (keyed, append and aggregate tables, every column type): after every run PostgreSQL holds
exactly DuckDB's view tables, `inorder_published` names DuckDB's newest entry, only changed rows
travel, and a publication missed for any reason is caught up without applying anything twice."""

from __future__ import annotations

import json
import random
import re
import shutil
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import psycopg
import pyarrow as pa
import pytest

from pipelines.config import Settings
from pipelines.engine.pass_data import OutputKind, output_schema, row_column
from pipelines.serve.publish import Publisher, Publishing, ServeTarget, committed_positions, pg_type, read_positions
from pipelines.facade import rebuild, run
from pipelines.store.database import Home, Store
from pipelines.view import DECIMAL, Column, Table, View
from demos.shop import GeneratorConfig, generate
from tests.domains import SHOP_VIEWS
from tests.harness import entry_time, write_batch
from tests.holds_views import DELETES_STORED_ROWS, HOLDS

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)


def duck_tables(home: Home, views=SHOP_VIEWS) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(home.database), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    try:
        return {t.name: sorted(con.execute(f'SELECT * FROM "{t.name}"').fetchall(), key=repr)
                for v in views for t in v.tables}
    finally:
        con.close()


def duck_entries(home: Home) -> dict[str, int]:
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        return dict(con.execute("SELECT view, max(entry_idx) FROM inorder.batches GROUP BY view").fetchall())
    finally:
        con.close()


def pg_tables(target: ServeTarget, views=SHOP_VIEWS) -> dict[str, list[tuple]]:
    with psycopg.connect(target.dsn) as pg:
        pg.execute("SET TimeZone = 'UTC'")
        return {t.name: sorted(pg.execute(f"SELECT * FROM {target.qualified(t.name)}").fetchall(), key=repr)
                for v in views for t in v.tables}


def pg_published(target: ServeTarget) -> dict[str, int]:
    with psycopg.connect(target.dsn) as pg:
        return dict(pg.execute(f"SELECT view, entry_idx FROM {target.qualified('inorder_published')}").fetchall())


@pytest.fixture
def target(postgres) -> ServeTarget:
    """A schema of its own on the test server."""
    return ServeTarget(postgres, f"t_{uuid.uuid4().hex[:12]}")


def serving(home: Path, target: ServeTarget, dsn: str | None = None) -> Home:
    """The home at `home`, publishing to `target` (its settings' INORDER_SERVE_POSTGRES and _SCHEMA), or to
    `dsn` instead (a server that is down)."""
    return Home.of(Settings(serve_postgres=dsn or target.dsn, serve_schema=target.schema), home)


def unreachable(target: ServeTarget) -> str:
    return re.sub(r"port=\d+", "port=1", target.dsn)


@pytest.fixture(scope="module")
def shop_batches(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shop-batches")
    return generate(folder, GeneratorConfig(events=3000, streams=60, batches=5, disorder=0.2, duplicates=0.05,
                                            gaps=0.01, poison=0.01, seed=11))


def land(home: Home, paths) -> None:
    home.ensure()
    for path in paths:
        shutil.copy(path, home.landing / path.name)


def ticket_records(tickets: int, seed: int = 5) -> list[dict]:
    """Help-desk tickets opened, replied to, worked on and closed, in order, hours apart."""
    rng, records = random.Random(seed), []
    for t in range(tickets):
        moment = T0 + timedelta(minutes=rng.randrange(600))
        events = [("TicketOpened", {"title": f"ticket {t}", "priority": rng.randint(1, 5), "urgent": rng.random() < .3,
                                    "cost": rng.choice([0, 12.5, 99.999, 250])})]
        events += [rng.choice([("Replied", {}), ("EffortLogged", {"hours": rng.randint(1, 40) / 4, "rate": 60})])
                   for _ in range(rng.randint(0, 4))] + [("Closed", {})]
        for seq, (kind, payload) in enumerate(events, start=1):
            moment += timedelta(minutes=rng.choice([7, 90, 1440]))
            records.append({"stream_id": f"T-{t}", "stream_type": "ticket", "seq": seq, "type": kind,
                            "payload": payload, "occurred_at": moment.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return records


def test_the_publication_names_the_newest_entrys_batch_whatever_the_names_order(tmp_path, target):
    """`inorder_published.batch_id` is the batch of the view's newest committed entry: ingested after `zz-first`,
    `aa-second` is the newest though it sorts first, and then `mm-third`. No Spark: the ledger rows are written as
    commits write them, and the publication reads them."""
    orders = [v for v in SHOP_VIEWS if v.name == "orders"]
    with Store.open(serving(tmp_path / "home", target).ensure(), orders) as store, Publisher(target) as publisher:
        for entry_idx, batch_id in enumerate(("zz-first", "aa-second", "mm-third"), start=1):
            store.con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) "
                              "VALUES (?, 'orders', ?, 'batch', ?)", [batch_id, entry_idx, T0])
            if entry_idx == 1:
                continue  # the first two entries are published together
            assert committed_positions(store.con, ["orders", "customers"]) == {"orders": (entry_idx, batch_id)}
            (publication,) = publisher.publish(store.con, orders)
            assert (publication.entry_idx, publication.batch_id) == (entry_idx, batch_id)
            with psycopg.connect(target.dsn) as pg:
                assert pg.execute(f"SELECT view, entry_idx, batch_id FROM {target.qualified('inorder_published')}"
                                  ).fetchall() == [("orders", entry_idx, batch_id)]


def test_every_run_publishes_exactly_duckdbs_views(spark, tmp_path, target, shop_batches):
    home = serving(tmp_path / "home", target)
    modes = []
    for i, path in enumerate(shop_batches):
        land(home, [path])
        report = run(spark, home, SHOP_VIEWS, now=T0 + timedelta(minutes=i))
        assert report.projection.publish_error is None
        modes += [p.mode for p in report.projection.publications]
        assert pg_tables(target) == duck_tables(home)
        assert pg_published(target) == duck_entries(home)
    # the first publication of each view is full; later ones send only what their pass changed
    assert modes[:len(SHOP_VIEWS)] == ["full"] * len(SHOP_VIEWS)
    assert set(modes[len(SHOP_VIEWS):]) == {"delta"}
    tick = run(spark, home, SHOP_VIEWS, now=T0 + timedelta(hours=2))  # gaps time out: a tick changes rows too
    assert {p.mode for p in tick.projection.publications} == {"delta"}
    assert pg_tables(target) == duck_tables(home)
    assert pg_published(target) == duck_entries(home)


def test_a_delta_carries_only_the_rows_its_pass_changed(spark, tmp_path, target, shop_batches):
    home = serving(tmp_path / "home", target)
    land(home, shop_batches[:4])
    run(spark, home, SHOP_VIEWS, now=T0)
    land(home, shop_batches[4:])
    report = run(spark, home, SHOP_VIEWS, now=T0 + timedelta(minutes=1))
    sent = {p.view: p.rows for p in report.projection.publications}
    tables = duck_tables(home)
    total = {v.name: sum(len(tables[t.name]) for t in v.tables) for v in SHOP_VIEWS}
    assert all(p.mode == "delta" for p in report.projection.publications)
    assert 0 < sent["orders"] < total["orders"] and sent["order_items"] < total["order_items"]
    assert pg_tables(target) == tables


def test_rows_a_pass_deleted_go_from_postgres_by_a_catch_up_and_by_a_delta(spark, tmp_path, target):
    """A view that deletes (tests/holds_views.py), a stream's last keyed row included. Run 2 deletes
    acct-1's only hold while PostgreSQL is down: run 3's catch-up deletes it there. Run 3 deletes
    acct-2's last hold: its delta deletes it there."""
    home = serving(tmp_path / "home", target).ensure()
    first, second, third = DELETES_STORED_ROWS

    def run_entry(entry, dsn: str | None = None) -> list[str]:
        write_batch(home, entry)
        report = run(spark, serving(home.root, target, dsn), [HOLDS], now=entry_time(entry))
        assert report.projection.entries == 1
        return [p.mode for p in report.projection.publications]

    assert run_entry(first) == ["full"]
    assert [row[:2] for row in pg_tables(target, [HOLDS])["holds"]] == [("acct-1", 2), ("acct-2", 2), ("acct-2", 3)]
    assert run_entry(second, unreachable(target)) == []
    assert run_entry(third) == ["catch-up", "delta"]
    assert pg_tables(target, [HOLDS]) == duck_tables(home, [HOLDS])
    assert pg_tables(target, [HOLDS]) == {"holds": [], "releases": [("acct-1", 1), ("acct-2", 1)]}
    assert pg_published(target) == duck_entries(home)


def test_missed_publications_are_caught_up_once(spark, tmp_path, target, shop_batches):
    """PostgreSQL unreachable for two runs: DuckDB commits, the runs report it; the next run catches
    up (aggregates as absolute values, so nothing is counted twice) and ends equal."""
    home = serving(tmp_path / "home", target)
    land(home, shop_batches[:2])
    run(spark, home, SHOP_VIEWS, now=T0)
    for i, path in enumerate(shop_batches[2:4], start=1):
        land(home, [path])
        report = run(spark, serving(home.root, target, unreachable(target)), SHOP_VIEWS, now=T0 + timedelta(minutes=i))
        assert report.projection.publish_error and "cannot connect to PostgreSQL" in report.projection.publish_error
        assert report.projection.entries == 1  # DuckDB went on
    assert pg_tables(target) != duck_tables(home)
    land(home, shop_batches[4:])
    report = run(spark, home, SHOP_VIEWS, now=T0 + timedelta(minutes=5))
    modes = [p.mode for p in report.projection.publications]
    assert modes[:len(SHOP_VIEWS)] == ["catch-up"] * len(SHOP_VIEWS) and set(modes[len(SHOP_VIEWS):]) == {"delta"}
    assert pg_tables(target) == duck_tables(home)
    assert pg_published(target) == duck_entries(home)
    with Publisher(target) as publisher:  # a second catch-up finds nothing to do
        con = duckdb.connect(str(home.database), read_only=True)
        assert publisher.publish(con, SHOP_VIEWS) == []
        con.close()


def test_a_table_that_no_longer_matches_is_refused_until_published_in_full(spark, tmp_path, target, shop_batches):
    home = serving(tmp_path / "home", target)
    land(home, shop_batches[:2])
    run(spark, home, SHOP_VIEWS, now=T0)
    with psycopg.connect(target.dsn) as pg:
        pg.execute(f"ALTER TABLE {target.qualified('customers')} ADD COLUMN extra text")
    land(home, shop_batches[2:3])
    report = run(spark, home, SHOP_VIEWS, now=T0 + timedelta(minutes=1))
    assert "does not match view customers" in report.projection.publish_error
    assert "inorder publish --full customers" in report.projection.publish_error
    # the other views went on
    assert sorted(p.view for p in report.projection.publications) == sorted(v.name for v in SHOP_VIEWS
                                                                           if v.name != "customers")
    assert {v: e for v, e in pg_published(target).items() if v != "customers"} == \
        {v: e for v, e in duck_entries(home).items() if v != "customers"}
    with Publisher(target) as publisher:
        con = duckdb.connect(str(home.database))
        assert publisher.publish(con, SHOP_VIEWS) == [] and "customers" in publisher.refused
        (full,) = publisher.publish(con, [v for v in SHOP_VIEWS if v.name == "customers"], full=True)
        assert publisher.publish(con, SHOP_VIEWS) == [] and not publisher.refused
        con.close()
    assert full.mode == "full"
    assert pg_tables(target) == duck_tables(home)
    assert pg_published(target) == duck_entries(home)


def test_a_rebuilt_view_is_published_whole(spark, tmp_path, target, shop_batches):
    home = serving(tmp_path / "home", target)
    land(home, shop_batches)
    run(spark, home, SHOP_VIEWS, now=T0)
    before = pg_tables(target)
    orders = next(v for v in SHOP_VIEWS if v.name == "orders")
    stats = rebuild(spark, home, SHOP_VIEWS, orders)
    assert [(p.view, p.mode) for p in stats.publications] == [("orders", "full")]
    assert pg_tables(target) == duck_tables(home) == before
    assert pg_published(target) == duck_entries(home)


def test_postgres_types_hold_every_value_exactly(spark, tmp_path, target):
    """The help-desk view uses every column type (tests/helpdesk_views.py): what PostgreSQL returns
    equals what DuckDB returns, value for value and type for type."""
    from tests.helpdesk_views import HELPDESK

    home = serving(tmp_path / "home", target)
    home.ensure()
    (home.landing / "batch-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ticket_records(40)))
    run(spark, home, [HELPDESK], now=T0)
    duck, pg = duck_tables(home, [HELPDESK]), pg_tables(target, [HELPDESK])
    assert pg == duck and any(pg.values())
    for table in HELPDESK.tables:
        for duck_row, pg_row in zip(duck[table.name], pg[table.name]):
            assert [type(v) for v in duck_row] == [type(v) for v in pg_row]
    with psycopg.connect(target.dsn) as conn:
        columns = dict(conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0", [f"{target.schema}.{HELPDESK.tables[0].name}"]).fetchall())
    assert columns == {c: pg_type(t) for c, t in HELPDESK.tables[0].sql_types.items()}


CUSTOMERS = [v for v in SHOP_VIEWS if v.name == "customers"]


def ledger(con, view: str, entry_idx: int) -> None:
    """A view's ledger row for entry `entry_idx` (batch `b<entry_idx>`), as a commit writes it."""
    con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) "
                "VALUES (?, ?, ?, 'batch', ?)", [f"b{entry_idx}", view, entry_idx, T0])


def customer(con, customer_id: str, version: int, entry_idx: int) -> None:
    """The customer's row at `version`, written by entry `entry_idx` (its stream's watermark moved there)."""
    con.execute("DELETE FROM customers WHERE customer_id = ?", [customer_id])
    con.execute("INSERT INTO customers (customer_id, name, version) VALUES (?, 'ada', ?)", [customer_id, version])
    con.execute("DELETE FROM inorder.watermarks WHERE view = 'customers' AND stream_id = ?", [customer_id])
    con.execute("INSERT INTO inorder.watermarks (view, stream_id, last_seq, updated_entry) "
                "VALUES ('customers', ?, ?, ?)", [customer_id, version, entry_idx])


def test_positions_count_the_entries_each_view_is_behind_and_read_positions_says_the_same(tmp_path, target):
    """No Spark: ledger rows as commits write them. A view with no entry is current; one never published is behind by
    all its entries; after a publication, by the entries committed since."""
    views = [v for v in SHOP_VIEWS if v.name in ("orders", "customers", "order_items")]
    settings = Settings(serve_postgres=target.dsn, serve_schema=target.schema)
    with Store.open(serving(tmp_path / "home", target).ensure(), views) as store, Publisher(target) as publisher:
        con = store.con
        for view, entry_idx in (("orders", 1), ("customers", 1), ("orders", 2), ("orders", 3), ("customers", 2)):
            ledger(con, view, entry_idx)
        positions = [(p.view, p.committed, p.published, p.behind) for p in publisher.positions(con, views)]
        assert positions == [("customers", 2, None, 2), ("order_items", None, None, 0), ("orders", 3, None, 3)]
        assert [p.view for p in publisher.positions(con, views[::-1])] == ["orders", "order_items", "customers"]
        assert [(p.view, p.entry_idx, p.batch_id, p.mode) for p in publisher.publish(con, views)] == [
            ("customers", 2, "b2", "full"), ("orders", 3, "b3", "full")]  # order_items has no entry: not published
        assert publisher.published() == {"customers": 2, "orders": 3}
        for entry_idx in (4, 6):
            ledger(con, "orders", entry_idx)
        read = read_positions(con, views, settings)
        assert (read.configured, read.error) == (True, None)
        assert [(p.view, p.committed, p.published, p.behind) for p in read.entries] == [
            ("customers", 2, 2, 0), ("order_items", None, None, 0), ("orders", 6, 3, 2)]
        assert [p.view for p in read.behind] == ["orders"]
        (items,) = [p for p in publisher.publish(con, views, full=True) if p.view == "order_items"]
        assert (items.entry_idx, items.batch_id, items.mode, items.rows) == (0, "", "full", 0)  # empty, published


def test_a_publication_is_full_then_nothing_when_current_then_a_catch_up_of_the_streams_that_moved(tmp_path, target):
    """No Spark: the customers table and its watermarks written as commits write them. The first publication is
    full; a view PostgreSQL holds at DuckDB's entry is left alone; a later one carries the rows of the streams whose
    watermark moved after the published entry, and only those; PostgreSQL ahead of DuckDB (a store made again)
    gets the view in full."""
    with Store.open(serving(tmp_path / "home", target).ensure(), CUSTOMERS) as store, Publisher(target) as publisher:
        con = store.con
        for customer_id in ("c1", "c2", "c3"):
            customer(con, customer_id, 1, 1)
        ledger(con, "customers", 1)
        (full,) = publisher.publish(con, CUSTOMERS)
        assert (full.mode, full.rows, full.entry_idx) == ("full", 3, 1)
        assert publisher.publish(con, CUSTOMERS) == []
        customer(con, "c2", 2, 2)
        ledger(con, "customers", 2)
        (catch_up,) = publisher.publish(con, CUSTOMERS)
        assert (catch_up.mode, catch_up.rows, catch_up.entry_idx, catch_up.batch_id) == ("catch-up", 1, 2, "b2")
        assert [(r[0], r[-1]) for r in pg_tables(target, CUSTOMERS)["customers"]] == [("c1", 1), ("c2", 2), ("c3", 1)]
        con.execute("DELETE FROM inorder.batches WHERE entry_idx = 2")
        (ahead,) = publisher.publish(con, CUSTOMERS)
        assert (ahead.mode, ahead.rows, ahead.entry_idx) == ("full", 3, 1)
        (forced,) = publisher.publish(con, CUSTOMERS, full=True)
        assert (forced.mode, forced.entry_idx) == ("full", 1)


NOTES = View(name="notes", subscribes=("note",), tables=(
    Table.per_stream("note_text", key="note_id", columns={"text": Column(str)}),
    Table.append("note_log", key=("pos", "note_id"), stream_key="note_id",  # the stream key second: indexed
                 columns={"note_id": Column(str), "pos": Column(int), "what": Column(str)}),
    # two key columns, two value columns (one DECIMAL), and a table of keys alone
    Table.aggregate("note_days", key=("day", "kind"), columns={"day": Column(str), "kind": Column(str),
                                                               "n": Column(int), "amount": Column(DECIMAL(10, 2))}),
    Table.aggregate("note_words", key=("word",), columns={"word": Column(str)})))


def notes_rows(con) -> dict[str, list[tuple]]:
    return {t.name: sorted(con.execute(f'SELECT * FROM "{t.name}"').fetchall()) for t in NOTES.tables}


def test_a_delta_carries_the_walked_streams_the_appended_rows_and_the_aggregate_keys_added_to_and_nothing_else(
        tmp_path, target):
    """No Spark: a keyed, an append and an aggregate table written as commits write them, and the pass output
    (`pass_out`) in its own schema, as the walk writes it. The first publication is full; a delta for the next entry
    carries the rows of the streams the pass walked (a stream whose rows the pass deleted loses them), the rows it
    appended and the aggregate keys it added to, as absolute values; a row no pass wrote does not travel."""
    with Store.open(serving(tmp_path / "home", target).ensure(), [NOTES]) as store, Publisher(target) as publisher:
        con = store.con
        con.execute("INSERT INTO note_text VALUES ('n1', 'a'), ('n2', 'b'), ('n3', 'c')")
        con.execute("INSERT INTO note_log VALUES ('n1', 1, 'made'), ('n2', 1, 'made')")
        con.execute("INSERT INTO note_days VALUES ('d1', 'k', 2, 1.50), ('d2', 'k', 1, 0.25)")
        con.execute("INSERT INTO note_words VALUES ('w1')")
        ledger(con, "notes", 1)
        (full,) = publisher.publish(con, [NOTES])
        before = notes_rows(con)
        assert (full.mode, full.rows, full.entry_idx) == ("full", 8, 1) and pg_tables(target, [NOTES]) == before
        # entry 2: n1 rewritten and appended to, n2's row deleted, d1 added to and d3 new; n3 changed by no pass
        con.execute("UPDATE note_text SET text = 'a2' WHERE note_id = 'n1'")
        con.execute("DELETE FROM note_text WHERE note_id = 'n2'")
        con.execute("UPDATE note_text SET text = 'stray' WHERE note_id = 'n3'")
        con.execute("INSERT INTO note_log VALUES ('n1', 2, 'edited')")
        con.execute("UPDATE note_days SET n = 3, amount = 2.00 WHERE day = 'd1'")
        con.execute("INSERT INTO note_days VALUES ('d3', 'k', 1, 9.99)")
        con.execute("INSERT INTO note_words VALUES ('w2')")
        ledger(con, "notes", 2)
        walked = [{"kind": OutputKind.WATERMARK.value, "view": "notes", "stream_id": s} for s in ("n1", "n2")]
        rows = [{"kind": OutputKind.ROWS.value, "view": "notes", "name": "note_log", "stream_id": "n1",
                 row_column("notes", "note_log"): {"note_id": "n1", "pos": 2, "what": "edited"}}]
        sums = [{"kind": OutputKind.AGGREGATE.value, "view": "notes", "name": "note_days",
                 row_column("notes", "note_days"): {"day": day, "kind": "k", "n": 1}} for day in ("d1", "d3")]
        sums += [{"kind": OutputKind.AGGREGATE.value, "view": "notes", "name": "note_words",
                  row_column("notes", "note_words"): {"word": "w2"}}]
        con.register("pass_out", pa.Table.from_pylist(walked + rows + sums, schema=output_schema([NOTES])))
        (delta,) = publisher.publish(con, [NOTES], pass_start={"notes": 2})
        assert (delta.mode, delta.rows, delta.entry_idx, delta.batch_id) == ("delta", 5, 2, "b2")
        expected = {**notes_rows(con), "note_text": [("n1", "a2"), ("n3", "c")]}  # n3's stray write did not travel
        assert pg_tables(target, [NOTES]) == expected and before["note_text"] != expected["note_text"]
        assert pg_published(target) == {"notes": 2}


def test_a_catch_up_carries_every_table_of_the_streams_that_moved_and_whole_aggregates(tmp_path, target):
    """No Spark: publications missed for two entries (a crash after the DuckDB commits). The catch-up carries, for
    the streams whose watermark moved after the published entry, the rows of each keyed and append table (a deleted
    row goes), and each aggregate table whole; a stream that did not move does not travel."""
    def watermark(stream_id: str, entry_idx: int) -> None:
        con.execute("DELETE FROM inorder.watermarks WHERE view = 'notes' AND stream_id = ?", [stream_id])
        con.execute("INSERT INTO inorder.watermarks (view, stream_id, last_seq, updated_entry) VALUES "
                    "('notes', ?, ?, ?)", [stream_id, entry_idx, entry_idx])

    with Store.open(serving(tmp_path / "home", target).ensure(), [NOTES]) as store, Publisher(target) as publisher:
        con = store.con
        con.execute("INSERT INTO note_text VALUES ('n1', 'a'), ('n2', 'b'), ('n3', 'c')")
        con.execute("INSERT INTO note_log VALUES ('n1', 1, 'made'), ('n2', 1, 'made'), ('n3', 1, 'made')")
        con.execute("INSERT INTO note_days VALUES ('d1', 'k', 2, 1.50), ('d2', 'k', 1, 0.25)")
        for stream_id in ("n1", "n2", "n3"):
            watermark(stream_id, 1)
        ledger(con, "notes", 1)
        (full,) = publisher.publish(con, [NOTES])
        assert (full.mode, full.rows) == ("full", 8) and pg_tables(target, [NOTES]) == notes_rows(con)
        con.execute("UPDATE note_text SET text = 'a2' WHERE note_id = 'n1'")
        con.execute("INSERT INTO note_log VALUES ('n1', 2, 'edited')")
        watermark("n1", 2)
        con.execute("UPDATE note_days SET n = 3, amount = 2.00 WHERE day = 'd1'")
        ledger(con, "notes", 2)
        con.execute("DELETE FROM note_text WHERE note_id = 'n2'")
        watermark("n2", 3)
        con.execute("INSERT INTO note_days VALUES ('d3', 'k', 1, 9.99)")
        con.execute("UPDATE note_text SET text = 'stray' WHERE note_id = 'n3'")  # no watermark moved
        ledger(con, "notes", 3)
        (catch_up,) = publisher.publish(con, [NOTES])
        # n1's text and two log rows, n2's log row, the three aggregate rows
        assert (catch_up.mode, catch_up.rows, catch_up.entry_idx, catch_up.batch_id) == ("catch-up", 7, 3, "b3")
        assert pg_tables(target, [NOTES]) == {**notes_rows(con), "note_text": [("n1", "a2"), ("n3", "c")]}
        assert pg_published(target) == {"notes": 3}
        watermark("n3", 4)
        ledger(con, "notes", 4)
        with Publisher(target) as again:  # a new connection checks the tables' shapes, DECIMAL's among them
            assert [(p.mode, p.rows) for p in again.publish(con, [NOTES])] == [("catch-up", 5)]
            assert again.refused == {} and again.pg.execute("SHOW application_name").fetchone() == ("inorder publish",)


def test_a_view_rebuilt_after_its_publication_is_published_whole_and_a_table_of_many_fetches_travels_whole(
        tmp_path, target):
    """No Spark: a view whose version was recorded after PostgreSQL's publication (a rebuild or a migration) is
    published in full, not caught up; a table of more rows than one fetch travels whole, and is counted whole."""
    with Store.open(serving(tmp_path / "home", target).ensure(), [NOTES]) as store, Publisher(target) as publisher:
        con = store.con
        con.execute("INSERT INTO note_text SELECT 'n' || i, 't' FROM range(50001) r(i)")  # a fetch is 50,000
        ledger(con, "notes", 1)
        (full,) = publisher.publish(con, [NOTES])
        assert (full.mode, full.rows) == ("full", 50001) and pg_tables(target, [NOTES]) == notes_rows(con)
        con.execute("UPDATE note_text SET text = 'rebuilt' WHERE note_id = 'n7'")
        con.execute("UPDATE inorder.view_versions SET recorded_at = now() WHERE view = 'notes'")
        ledger(con, "notes", 2)  # no watermark moved: a catch-up would carry nothing
        (rebuilt,) = publisher.publish(con, [NOTES])
        assert (rebuilt.mode, rebuilt.rows, rebuilt.entry_idx) == ("full", 50001, 2)
        assert pg_tables(target, [NOTES]) == notes_rows(con)


def test_a_table_that_does_not_match_is_refused_alone_and_replaced_by_a_full_publication(tmp_path, target):
    """No Spark: PostgreSQL's note_log with the right columns but another primary key, while the view's first table
    matches: the view is refused naming that table, the views after it are published, and `full` replaces the table
    (its stream key, second in its key, indexed), after which the refusal is gone. Through `Publishing`, which passes
    each publication's arguments on and adds up its time."""
    other = View(name="other_notes", subscribes=("note",), tables=(
        Table.per_stream("other_text", key="note_id", columns={"text": Column(str)}),))
    with psycopg.connect(target.dsn, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{target.schema}"')
        pg.execute(f'CREATE TABLE {target.qualified("note_text")} (note_id text PRIMARY KEY, text text)')
        pg.execute(f'CREATE TABLE {target.qualified("note_log")} (note_id text, pos bigint, what text, '
                   "PRIMARY KEY (note_id, pos))")
    said: list[str] = []
    publishing, started = Publishing(said.append, target), time.perf_counter()
    with Store.open(serving(tmp_path / "home", target).ensure(), [NOTES, other]) as store:
        con = store.con
        con.execute("INSERT INTO note_log VALUES ('n1', 1, 'made')")
        con.execute("INSERT INTO other_text VALUES ('n1', 'x')")
        for view in ("notes", "other_notes"):
            ledger(con, view, 1)
        publishing.publish(con, [NOTES, other])
        assert [(p.view, p.mode) for p in publishing.publications] == [("other_notes", "full")]
        assert "note_log does not match view notes's declaration" in publishing.error
        publishing.publish(con, [NOTES], full=True)
        assert [(p.view, p.mode, p.rows) for p in publishing.publications][1:] == [("notes", "full", 1)]
        assert pg_tables(target, [NOTES]) == notes_rows(con) and publishing._publisher.refused == {}
        con.execute("INSERT INTO note_log VALUES ('n1', 2, 'again')")
        ledger(con, "notes", 2)
        con.register("pass_out", pa.Table.from_pylist([
            {"kind": OutputKind.WATERMARK.value, "view": "notes", "stream_id": "n1"},
            {"kind": OutputKind.ROWS.value, "view": "notes", "name": "note_log", "stream_id": "n1",
             row_column("notes", "note_log"): {"note_id": "n1", "pos": 2, "what": "again"}}],
            schema=output_schema([NOTES])))
        publishing.publish(con, [NOTES], pass_start={"notes": 2})
        assert [(p.view, p.mode, p.rows) for p in publishing.publications][2:] == [("notes", "delta", 1)]
        assert pg_tables(target, [NOTES]) == notes_rows(con)
    elapsed = time.perf_counter() - started
    assert sum(p.seconds for p in publishing.publications) <= publishing.seconds < elapsed
    with psycopg.connect(target.dsn) as pg:
        assert pg.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'note_log' "
                          "AND indexdef NOT LIKE '%%pkey%%'", [target.schema]).fetchall() == [
            (f'CREATE INDEX note_log_note_id_idx ON {target.schema}.note_log USING btree (note_id)',)]
    publishing.close()


def test_every_crash_point_of_the_publication_is_armed_by_the_sweep_and_reached(monkeypatch, tmp_path, target):
    """The crash sweep (tests/crash_sweep.py) kills runs at these points: a point renamed or no longer passed would
    make its cases kill nothing. No Spark: each is armed in turn (its kill made an exception) over a publication."""
    from pipelines import faults
    from pipelines.serve import publish
    from tests.crash_sweep import NAMED

    class Crashed(Exception):
        pass

    def reached(point: str) -> bool:
        for name, value in (("ARMED", point), ("_point", point), ("_nth", 1), ("_hits", 0), ("_delay_us", 0)):
            monkeypatch.setattr(faults, name, value)

        def crash() -> None:
            raise Crashed(point)

        monkeypatch.setattr(faults, "_kill", crash)
        schema = ServeTarget(target.dsn, f"{target.schema}_{point.split('.')[1]}")  # a schema of its own: fresh
        with Store.open(serving(tmp_path / point, schema).ensure(), [NOTES]) as store, Publisher(schema) as pub:
            ledger(store.con, "notes", 1)
            try:
                pub.publish(store.con, [NOTES])
            except Crashed:
                return True
        return False

    in_the_publication = set(re.findall(r'crash_point\("([a-z_.]+)"\)', Path(publish.__file__).read_text()))
    armed = {p for p, *_ in NAMED if p.startswith("publish.")}
    assert in_the_publication == armed == {"publish.begun", "publish.staged", "publish.committed"}
    for point in sorted(armed):
        assert reached(point), point
    assert not reached("publish.nowhere")


def test_publishing_says_each_publication_and_a_table_that_does_not_match_once_while_the_others_go_on(
        tmp_path, target):
    views = [v for v in SHOP_VIEWS if v.name in ("orders", "customers")]
    with psycopg.connect(target.dsn, autocommit=True) as pg:  # an orders table of someone else's
        pg.execute(f'CREATE SCHEMA "{target.schema}"')
        pg.execute(f"CREATE TABLE {target.qualified('orders')} (order_id text PRIMARY KEY)")
    said: list[str] = []
    publishing = Publishing(said.append, target)
    with Store.open(serving(tmp_path / "home", target).ensure(), views) as store:
        for entry_idx in (1, 2):
            for view in ("orders", "customers"):
                ledger(store.con, view, entry_idx)
            publishing.publish(store.con, views)
    refusal = (f"publishing to PostgreSQL failed: PostgreSQL table {target.schema}.orders does not match view orders's "
               "declaration: run `inorder publish --full orders` to replace it; DuckDB is committed, and the next run "
               "or `inorder publish` catches up")
    assert [re.sub(r"\d+\.\d\ds", "Ns", line) for line in said] == [
        "published customers to entry 1 (full, 0 rows, Ns)", refusal,
        "published customers to entry 2 (catch-up, 0 rows, Ns)"]
    assert publishing.active and publishing.error == refusal[len("publishing to PostgreSQL failed: "):
                                                             refusal.index("; DuckDB is committed")]
    assert [(p.view, p.entry_idx) for p in publishing.publications] == [("customers", 1), ("customers", 2)]
    assert pg_published(target) == {"customers": 2}
    publishing.close()
