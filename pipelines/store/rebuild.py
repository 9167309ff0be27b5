"""A rebuild's shadow: a view built anew beside the live one, then swapped in at once (CONCEPTS §5).

The shadow lives in a schema of its own (`Layout.shadow`): the view's tables and the engine's state
tables, holding that view's rows only. Runs neither read nor write it, so they go on while it is
built; readers see the live view, whole, until the swap's commit and the new view, whole, after it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from pipelines.store.layout import LIVE, STATE_DDL, STATE_TABLES, Layout
from pipelines.store.database import Store
from pipelines.store.versions import keep_newest_rows, record
from pipelines.view import View


def prepare_shadow(store: Store, view: View, shadow: Layout) -> None:
    """Fresh shadow tables and state for `view` (whatever an interrupted rebuild left goes first),
    recorded as built by the code loaded now."""
    with store.transaction() as con:
        con.execute(f"DROP SCHEMA IF EXISTS {shadow.state} CASCADE")
        con.execute(STATE_DDL.format(schema=shadow.state))
        for table in view.tables:
            con.execute(table.ddl(shadow.table(table.name)))
        record(con, view, shadow)
    for table in view.tables:
        if table.kind == "append":
            keep_newest_rows(store.con, table, shadow)


def _columns(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> str:
    """The stored (not generated) columns of a table, quoted, in order."""
    names = con.execute("SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? "
                        "AND NOT is_generated ORDER BY column_index", [schema, table]).fetchall()
    return ", ".join(f'"{n}"' for (n,) in names)


def _live_table_names(con: duckdb.DuckDBPyConnection, view: View) -> set[str]:
    """The view's tables in the live store: as recorded (they may be other than the declared ones)."""
    row = con.execute("SELECT tables FROM inorder.view_versions WHERE view = ?", [view.name]).fetchone()
    return {t["name"] for t in json.loads(row[0])} if row else set()


def swap(store: Store, view: View, shadow: Layout) -> None:
    """Replace the live view by its shadow in ONE transaction: its tables (dropped and made again
    when their declaration changed, else emptied and refilled, so what readers built on them stays),
    its engine state rows and its version record; then the shadow is dropped."""
    with store.transaction() as con:
        recorded = _live_table_names(con, view)
        same_shape = {t.name: _columns(con, LIVE.tables, t.name) == _columns(con, shadow.tables, t.name)
                      for t in view.tables}
        for name in recorded - {t.name for t in view.tables}:
            con.execute(f"DROP TABLE IF EXISTS {LIVE.table(name)}")
            con.execute(f"DROP TABLE IF EXISTS {LIVE.newest_rows(name)}")
        for table in view.tables:
            if same_shape[table.name]:
                con.execute(f"DELETE FROM {LIVE.table(table.name)}")
            else:
                con.execute(f"DROP TABLE IF EXISTS {LIVE.table(table.name)}")
                con.execute(table.ddl(LIVE.table(table.name)))
            columns = ", ".join(f'"{c}"' for c in table.columns)
            con.execute(f"INSERT INTO {LIVE.table(table.name)} ({columns}) "
                        f"SELECT {columns} FROM {shadow.table(table.name)}")
            if table.kind == "append":  # the engine's copy of each stream's newest row goes with it
                con.execute(f"DROP TABLE IF EXISTS {LIVE.newest_rows(table.name)}")
                con.execute(f"CREATE TABLE {LIVE.newest_rows(table.name)} AS "
                            f"SELECT * FROM {shadow.newest_rows(table.name)}")
        for state_table in STATE_TABLES:
            columns = _columns(con, shadow.state, state_table)
            con.execute(f"DELETE FROM {LIVE.state}.{state_table} WHERE view = ?", [view.name])
            con.execute(f"INSERT INTO {LIVE.state}.{state_table} ({columns}) "
                        f"SELECT {columns} FROM {shadow.state}.{state_table} WHERE view = ?", [view.name])
        # the moment the view's rows were replaced as a whole (PostgreSQL copies older than it are republished)
        con.execute(f"UPDATE {LIVE.state}.view_versions SET recorded_at = ? WHERE view = ?",
                    [datetime.now(timezone.utc), view.name])
        con.execute(f"DROP SCHEMA {shadow.state} CASCADE")
