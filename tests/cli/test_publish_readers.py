"""Readers during runs (issue 11 §4), through the CLI, with the shop's views and a real PostgreSQL:

- a reader process queries PostgreSQL in a loop, one transaction per sample, while `inorder run`
  commits batches one at a time: every sample equals the view as DuckDB had it after the entry
  `inorder_published` names, and the reader never sees an error;
- the same loop through `inorder query` on DuckDB: samples may lag, never be wrong, and the runs succeed;
- then operating it: `inorder status` says where each view's publication stands, a run killed between
  the DuckDB commit and the publication is caught up by `inorder publish`, `--full` republishes a
  view, and a run that cannot reach PostgreSQL fails with one line after committing to DuckDB.

What each view must look like after batch k is computed independently of the store: the view
replayed in memory over batches 1..k (`pipelines.testing.replay`; these batches fill their gaps
long before any gap timeout, so how they are split into runs does not matter)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import psycopg

from pipelines.testing import replay
from demos.shop import GeneratorConfig, generate
from tests.command import clean_environment, inorder
from tests.domains import SHOP_VIEWS

TABLES = {v.name: [t.name for t in v.tables] for v in SHOP_VIEWS}
COLUMNS = {t.name: list(t.columns) for v in SHOP_VIEWS for t in v.tables}
KEYS = {t.name: t.primary_key[0] for v in SHOP_VIEWS for t in v.tables}


def digest(rows: list[list]) -> str:
    """A table's rows, order-free, each value as JSON (numbers) or its text (decimals, dates, times)."""
    lines = sorted(json.dumps(row, default=str) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


READER = textwrap.dedent("""
    import hashlib, json, os, sys, time
    import psycopg

    dsn, schema, out, stop, tables = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])

    def digest(rows):
        lines = sorted(json.dumps(list(row), default=str) for row in rows)
        return hashlib.sha256("\\n".join(lines).encode()).hexdigest()

    with psycopg.connect(dsn) as pg, open(out, "w") as f:
        pg.execute("SET TimeZone = 'UTC'")
        pg.commit()
        pg.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot per sample
        while not os.path.exists(stop):
            try:
                with pg.transaction():
                    exists = pg.execute("SELECT to_regclass(%s)", [f'"{schema}"."inorder_published"']).fetchone()[0]
                    published = dict(pg.execute(f'SELECT view, entry_idx FROM "{schema}"."inorder_published"')
                                     .fetchall()) if exists else {}
                    sample = {"published": published, "tables": {
                        name: digest(pg.execute(f'SELECT * FROM "{schema}"."{name}"').fetchall())
                        for view in published for name in tables[view]}}
            except Exception as exc:
                sample = {"error": repr(exc)}
            f.write(json.dumps(sample) + "\\n")
            f.flush()
            time.sleep(0.02)
""")


def expected_after(batches: list[Path]) -> dict[str, str]:
    """table -> digest of each view replayed over `batches` in memory."""
    lines = [line for path in batches for line in path.read_text().splitlines() if line.strip()]
    result = {}
    for view in SHOP_VIEWS:
        for name, rows in replay(view, lines).tables.items():
            result[name] = digest([[row[c] for c in COLUMNS[name]] for row in rows])
    return result


def query_sample(env: dict, table: str, view: str) -> tuple[int, str]:
    """(the view's newest DuckDB entry, the table's digest), read in one `inorder query`."""
    done = inorder(env, "query", f"SELECT e.entry, t.* FROM (SELECT max(entry_idx) AS entry FROM inorder.batches "
                                 f"WHERE view = '{view}') e LEFT JOIN \"{table}\" t ON true", "--format", "json",
                   timeout=300)
    rows = json.loads(done.stdout)
    rows = [r for r in rows if r[KEYS[table]] is not None]  # the LEFT JOIN's row for an empty table
    entry = json.loads(done.stdout)[0]["entry"]
    return entry, digest([[r[c] for c in COLUMNS[table]] for r in rows])


def test_readers_of_postgres_and_duckdb_see_only_whole_commits_and_operators_see_where_it_stands(tmp_path, postgres):
    schema = f"r_{uuid.uuid4().hex[:10]}"
    home, staging = tmp_path / "home", tmp_path / "staging"
    batches = generate(staging, GeneratorConfig(events=2000, streams=40, batches=5, disorder=0.2, duplicates=0.05,
                                                gaps=0.0, poison=0.01, seed=21))
    expected = {k: expected_after(batches[:k]) for k in range(1, len(batches) + 1)}
    env = clean_environment(home, "shop.views", INORDER_SPARK_WARM="1",  # warm, as a user's runs are
                            INORDER_SERVE_POSTGRES=postgres, INORDER_SERVE_SCHEMA=schema)
    (home / "landing").mkdir(parents=True)

    def inorder_run(k: int, code: int = 0, **extra: str) -> subprocess.CompletedProcess:
        path = batches[k - 1] if k <= len(batches) else None
        if path is not None:
            path.rename(home / "landing" / path.name)
        return inorder({**env, **extra}, "run", "--now", f"2026-11-02T00:{k:02d}:00Z", code=code)

    inorder_run(1)

    stop = tmp_path / "stop"
    samples_path = tmp_path / "pg-samples.jsonl"
    reader = subprocess.Popen([sys.executable, "-c", READER, postgres, schema, str(samples_path), str(stop),
                               json.dumps(TABLES)], env=env)
    query_samples: list[tuple[str, int, str]] = []

    def query_loop() -> None:
        names = [(t, v) for v, ts in TABLES.items() for t in ts]
        i = 0
        while not stop.exists():
            table, view = names[i % len(names)]
            query_samples.append((table, *query_sample(env, table, view)))
            i += 1
            time.sleep(1.0)  # a script polling, not a second load on a 2-core machine

    querying = threading.Thread(target=query_loop)
    querying.start()
    try:
        for k in (2, 3):
            inorder_run(k)
    finally:
        stop.touch()
        querying.join(timeout=300)
        reader.wait(timeout=60)

    samples = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert samples and not [s for s in samples if "error" in s][:1]
    seen = set()
    for sample in samples:
        for view, entry in sample["published"].items():
            seen.add(entry)
            for name in TABLES[view]:
                assert sample["tables"][name] == expected[entry][name], (view, name, entry)
    assert len(seen) >= 3, seen  # the reader sampled while the runs were publishing
    assert len(query_samples) >= 4
    last: dict[str, int] = {}
    for table, entry, table_digest in query_samples:
        assert table_digest == expected[entry][table], (table, entry)
        assert entry >= last.get(table, 0)  # delayed at worst, never going back
        last[table] = entry

    # operating it: where each view's publication stands, in the CLI and as a Dagster check
    status = inorder(env, "status", timeout=300)
    for view in TABLES:
        assert f"{view}: published to PostgreSQL up to entry 3, current" in status.stdout, status.stdout
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        for view in TABLES:
            key = dg.AssetCheckKey(dg.AssetKey(view), "published")
            execution = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
            assert execution.evaluation.passed, view
            metadata = instance.get_latest_materialization_event(dg.AssetKey(view)).asset_materialization.metadata
            assert metadata["published_entry"].value == 3 and metadata["published_behind_entries"].value == 0

    # killed between the DuckDB commit and the publication of its second view: caught up by `inorder publish`
    inorder_run(4, code=-9, INORDER_CRASH_AT="publish.staged:2")
    status = inorder(env, "status", timeout=300)
    behind = [line for line in status.stdout.splitlines() if "1 entries behind DuckDB (entry 4)" in line]
    assert len(behind) == len(TABLES) - 1, status.stdout  # the first view was published before the kill
    caught_up = inorder(env, "publish", timeout=300)
    assert caught_up.stdout.count("(catch-up") == len(TABLES) - 1, caught_up.stdout
    full = inorder(env, "publish", "--full", "orders", timeout=300)
    assert "orders to entry 4 (full" in full.stdout, full
    with psycopg.connect(postgres) as pg:
        pg.execute("SET TimeZone = 'UTC'")
        assert dict(pg.execute(f'SELECT view, entry_idx FROM "{schema}".inorder_published').fetchall()) == \
            dict.fromkeys(TABLES, 4)
        for view, names in TABLES.items():
            for name in names:
                rows = [list(r) for r in pg.execute(f'SELECT * FROM "{schema}"."{name}"').fetchall()]
                assert digest(rows) == expected[4][name], name

    # PostgreSQL unreachable: the run commits to DuckDB, then fails with one line saying so
    down = inorder_run(5, code=1, INORDER_SERVE_POSTGRES=re.sub(r"port=\d+", "port=1", postgres))
    assert down.stderr.strip().splitlines()[-1].startswith(
        "inorder: error: publishing to PostgreSQL failed: cannot connect to PostgreSQL"), down.stderr
    status = inorder(env, "status", timeout=300)
    assert status.stdout.count("1 entries behind DuckDB (entry 5)") == len(TABLES), status.stdout
