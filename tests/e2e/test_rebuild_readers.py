"""A view that changes, through the real `inorder` command, while a dashboard reads it (issue 14).

The view's code changes; `inorder status` says so; a changed table makes `inorder run` refuse that
view with one line; `inorder rebuild VIEW` (a Dagster run: the view's checks run after it) builds
the view anew beside the live one while another process reads it in a loop. On every read, the row
count and a checksum equal either the old view or the new one, never anything in between; and the
rebuilt view equals a fresh run of the new code.

The shop's `orders` in CI; the bank's `account_activity` on the 1M-event store (long)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from demos.shop import GeneratorConfig, generate
from tests import bank_changed, shop_changed
from tests.dagster.test_dagster import VIEW_CHECKS  # every check a view has, which a rebuild runs
from tests.command import REPO, clean_environment, inorder
from tests.view_reader import snapshot

NOW = "2026-11-02T00:00:00Z"


def env_for(home: Path, views: str, **extra: str) -> dict:
    return clean_environment(home, views, path=(REPO,), DAGSTER_HOME=str(home / "dagster"), **extra)


def read_tables(database: Path, tables: list[str]) -> dict:
    con = duckdb.connect(str(database), read_only=True)
    try:
        return snapshot(con, tables)
    finally:
        con.close()


@dataclass
class Rebuilt:
    reads: list[dict]  # each read's {table: [rows, checksum]}
    old: dict
    new: dict
    output: str  # what `inorder rebuild` printed
    seconds: float


def rebuild_under_a_reader(home: Path, env: dict, view: str, tables: list[str]) -> Rebuilt:
    """`inorder rebuild VIEW` while tests/view_reader.py reads the view's tables in a loop."""
    old = read_tables(home / "store.duckdb", tables)
    out, stop = home.parent / f"reads-{view}.jsonl", home.parent / f"stop-{view}"
    reader = subprocess.Popen([sys.executable, "-m", "tests.view_reader", str(home / "store.duckdb"), str(out),
                               str(stop), *tables], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = time.perf_counter()
        done = inorder(env, "rebuild", view, timeout=1800)
        seconds = time.perf_counter() - started
        time.sleep(0.5)  # a few reads of the swapped-in view
    finally:
        stop.touch()
        assert reader.wait(timeout=120) == 0
    reads = [json.loads(line)["tables"] for line in out.read_text().splitlines()]
    return Rebuilt(reads, old, read_tables(home / "store.duckdb", tables), done.stdout, seconds)


def assert_never_partial(rebuilt: Rebuilt, min_reads: int) -> None:
    assert rebuilt.old != rebuilt.new  # the new code gives another view: a read can tell them apart
    assert len(rebuilt.reads) >= min_reads
    for i, read in enumerate(rebuilt.reads):
        assert read in (rebuilt.old, rebuilt.new), f"read {i} is neither the old view nor the new one: {read}"
    kinds = ["old" if read == rebuilt.old else "new" for read in rebuilt.reads]
    assert kinds[0] == "old" and kinds[-1] == "new"
    assert "old" not in kinds[kinds.index("new"):], "a reader saw the new view, then the old one again"


def checks_of(output: str) -> tuple[int, int, list[str]]:
    """(passed, run, failed names) from `inorder rebuild`'s summary line."""
    found = re.search(r"checks: (\d+) of (\d+) passed(?: \(failed: ([^)]*)\))?", output)
    assert found, output
    return int(found[1]), int(found[2]), found[3].split(", ") if found[3] else []


def test_a_changed_shop_view_is_noticed_refused_and_rebuilt_while_a_reader_reads_it(tmp_path):
    home = tmp_path / "home"
    generate(home / "landing", GeneratorConfig(events=3000, streams=60, batches=3, seed=5))
    shutil.copytree(home / "landing", tmp_path / "landed")
    original, handler, table = (env_for(home, shop_changed.VIEWS, SHOP_CHANGE=change)
                                for change in ("", "handler", "table"))
    inorder(original, "run", "--now", NOW)

    def orders_code(env: dict) -> dict:
        status = json.loads(inorder(env, "status", "--json").stdout)
        return next(v["code"] for v in status["views"] if v["view"] == "orders")

    assert orders_code(original)["matches"]
    edited = orders_code(handler)  # a handler edited: status says so before any run
    assert (edited["matches"], edited["change"], edited["what"]) == \
        (False, "code", "handler OrderPlaced, module tests.shop_changed changed")  # the handler and where it now lives
    assert "built by older code" in edited["state"] and edited["stored_fingerprint"] != edited["fingerprint"]

    # the UI marks it: the asset's code version is the new fingerprint, the last materialisation the old one
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    materialized = instance.get_latest_materialization_event(dg.AssetKey("orders")).asset_materialization
    assert materialized.tags["dagster/code_version"] == edited["stored_fingerprint"]
    code_version = subprocess.run(
        [sys.executable, "-c", "from inorder.definitions import defs; import dagster as dg; "
                               "print(defs().resolve_assets_def('orders').code_versions_by_key[dg.AssetKey('orders')])"],
        env=handler, capture_output=True, text=True, cwd=REPO, check=True).stdout.strip()
    assert code_version == edited["fingerprint"]

    # a table changed: `inorder run` refuses the view with one line, the others go on
    refused = inorder(table, "run", "--now", "2026-11-02T00:05:00Z", code=4)
    lines = [line for line in refused.stderr.splitlines() if "orders" in line and not line.startswith("[")]
    assert lines == ["inorder: view orders: table orders: column channel VARCHAR added; its rows were built with "
                     "the old tables, so it is not projected (run `inorder rebuild orders`; or, if the rows "
                     "already stored are right with NULL there, declare `migrations=(add_column(\"orders\", "
                     "\"channel\"),)` on the view and run again: no rebuild)"]
    assert orders_code(table)["change"] == "tables"

    rebuilt = rebuild_under_a_reader(home, table, "orders", ["orders"])
    assert_never_partial(rebuilt, min_reads=20)
    passed, ran, failed = checks_of(rebuilt.output)
    assert ran == len(VIEW_CHECKS) and not {"conservation", "expectations", "keys_unique"} & set(failed)
    assert orders_code(table)["matches"]

    fresh = tmp_path / "fresh"  # the new code from the start, over the same files at the same time
    shutil.copytree(tmp_path / "landed", fresh / "landing")
    inorder(env_for(fresh, shop_changed.VIEWS, SHOP_CHANGE="table"), "run", "--now", NOW)
    assert read_tables(fresh / "store.duckdb", ["orders"]) == rebuilt.new
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    assert "channel" in [d[0] for d in con.execute("SELECT * FROM orders LIMIT 0").description]
    con.close()


@pytest.mark.long
def test_a_rebuild_of_1m_bank_events_keeps_a_reader_whole(spark, tmp_path):
    """The 1M-event bank store (bench/freshness.py builds it once, into .inorder/bench/inputs): its
    `account_activity` (about a million rows) gets a new column and is rebuilt under a reader. Prints
    the rebuild's time against a fresh bulk run of the same events with the new code."""
    from bench.freshness import T0, reset, store_template
    from pipelines.facade import rebuild, run
    from pipelines.store.database import Home
    from tests.domains import BANK_VIEWS

    cache = REPO / ".inorder" / "bench" / "inputs"
    cache.mkdir(parents=True, exist_ok=True)
    home = Home(tmp_path / "home")
    reset(home, store_template(spark, cache, 1_000_000))
    env = env_for(home.root, bank_changed.VIEWS)
    tables = ["account_activity"]
    rebuilt = rebuild_under_a_reader(home.root, env, "account_activity", tables)
    assert_never_partial(rebuilt, min_reads=20)
    passed, ran, failed = checks_of(rebuilt.output)
    assert "conservation" not in failed and "expectations" not in failed

    # side by side in this session, after a warm-up pass (the session's first pass pays the JVM's
    # class loading and code generation): the engine's rebuild, and a fresh bulk run of the same events
    # into that view alone (what the rebuild replays), each from its own copy
    def fresh_bulk(name: str) -> tuple[Home, float]:
        fresh = Home(tmp_path / name)
        fresh.ensure()
        for path in sorted((tmp_path / "home" / "landing").iterdir()):
            shutil.copy(path, fresh.landing / path.name)
        started = time.perf_counter()
        run(spark, fresh, [bank_changed.ACCOUNT_ACTIVITY], now=T0)
        return fresh, time.perf_counter() - started

    fresh_bulk("warm-up")
    again = Home(tmp_path / "again")
    reset(again, store_template(spark, cache, 1_000_000))
    changed = [v for v in BANK_VIEWS if v.name != "account_activity"] + [bank_changed.ACCOUNT_ACTIVITY]
    started = time.perf_counter()
    rebuild(spark, again, changed, bank_changed.ACCOUNT_ACTIVITY)
    engine_rebuild = time.perf_counter() - started
    fresh, bulk = fresh_bulk("fresh")
    assert read_tables(fresh.database, tables) == rebuilt.new == read_tables(again.database, tables)
    print(f"\nrebuild of account_activity over 1M events: `inorder rebuild` {rebuilt.seconds:.1f}s (process, "
          f"Dagster run, Spark start, checks), {len(rebuilt.reads)} reads, all whole; in one warm session: "
          f"the engine's rebuild {engine_rebuild:.1f}s, a fresh bulk run of the same events into that view "
          f"{bulk:.1f}s (ratio {engine_rebuild / bulk:.2f})")
