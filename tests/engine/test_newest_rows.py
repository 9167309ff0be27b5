"""The engine keeps each stream's newest row of an append table (`Layout.newest_rows`), so a pass loads
it without reading the table's history (DESIGN §7). A store made before it was kept gets it at the
writer's open, from that history, once."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from pipelines.store.layout import LIVE
from pipelines.facade import run
from tests.clashing_views import CLASHING, LOG
from tests.harness import fresh_home
from tests.cli.test_column_names import expected, records

NOW = datetime(2026, 5, 1, tzinfo=timezone.utc)


def newest_rows(home, sql_from: str) -> list[tuple]:
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        return con.execute(f'SELECT * FROM {sql_from} ORDER BY "name"').fetchall()
    finally:
        con.close()


def test_a_store_without_the_engines_newest_rows_gets_them_at_open_and_appends_on_from_them(spark, tmp_path):
    everything = records()
    batch_of = {(r["stream_id"], r["seq"]): "b1" if r["seq"] <= 3 else "b2" for r in everything}
    home = fresh_home(tmp_path)
    (home.landing / "b1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in everything if r["seq"] <= 3))
    run(spark, home, [CLASHING], now=NOW)
    newest_by_history = f"""(SELECT * FROM "{LOG.name}" r
        QUALIFY row_number() OVER (PARTITION BY r."name" ORDER BY r."stream_id" DESC) = 1)"""
    kept = newest_rows(home, LIVE.newest_rows(LOG.name))
    assert kept == newest_rows(home, newest_by_history) and [row[2] for row in kept] == [3, 3, 3]  # entry_idx: the seq

    con = duckdb.connect(str(home.database))  # as a store made before the engine kept them
    con.execute(f"DROP TABLE {LIVE.newest_rows(LOG.name)}")
    con.close()
    (home.landing / "b2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in everything if r["seq"] > 3))
    run(spark, home, [CLASHING], now=NOW.replace(hour=1))

    con = duckdb.connect(str(home.database), read_only=True)
    try:
        cursor = con.execute(f'SELECT * FROM "{LOG.name}" ORDER BY "name", "stream_id"')
        names = [d[0] for d in cursor.description]
        log = [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        con.close()
    assert log == expected(everything, batch_of)["log"]  # lines 4 and 5 follow the newest rows of run 1
    kept = newest_rows(home, LIVE.newest_rows(LOG.name))
    assert kept == newest_rows(home, newest_by_history) and [row[2] for row in kept] == [5, 5, 5]
