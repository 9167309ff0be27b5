"""CONCEPTS §2 step 5: write a pass's results in ONE read-store transaction.

View tables, watermarks, pending buffers, error and gap rows and the ledger rows of every entry
in the pass commit together or not at all.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from pipelines.faults import crash_point
from pipelines.engine.output import PassResult
from pipelines.engine.planning import PassPlan
from pipelines.engine.rules import running_pending
from pipelines.store.layout import LIVE, Layout
from pipelines.engine.pass_data import ERROR_DETAILS, MESSAGE_IN_PASS, OutputKind, row_column
from pipelines.store.database import Store
from pipelines.engine.outcomes import COUNTED, Outcome, OUTCOME_COLUMNS
from pipelines.message import Message
from pipelines.records import STORED_WATERMARK, WatermarkRecord, select
from pipelines.store.versions import record_projection
from pipelines.view import Table, View


def pass_rows_sql(view: View, table: Table, kind: OutputKind) -> str:
    """The typed rows the pass wrote to `table` (kind ROWS or AGGREGATE), under the table's column names."""
    row = f'o."{row_column(view.name, table.name)}"'
    fields = ", ".join(f"{row}.\"{c}\" AS \"{c}\"" for c in table.columns)
    return (f"SELECT {fields} FROM pass_out o "
            f"WHERE o.kind = '{kind.value}' AND o.view = '{view.name}' AND o.name = '{table.name}'")


def walked_streams_sql(view: View) -> str:
    """The streams of `view` the pass walked (one watermark record each): column `stream_id`."""
    return f"SELECT o.stream_id FROM pass_out o WHERE o.kind = '{OutputKind.WATERMARK.value}' AND o.view = '{view.name}'"


def _write_view_tables(store: Store, view: View, layout: Layout) -> None:
    con = store.con
    for table in view.tables:
        target = layout.table(table.name)
        cols = ", ".join(f'"{c}"' for c in table.columns)
        if table.kind == "keyed":
            con.execute(f'DELETE FROM {target} t USING ({walked_streams_sql(view)}) w '
                        f'WHERE t."{table.stream_key}" = CAST(w.stream_id AS {table.sql_types[table.stream_key]})')
        if table.kind in ("keyed", "append"):
            con.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM ({pass_rows_sql(view, table, OutputKind.ROWS)})")
        if table.kind == "append":  # the newest row of each stream that appended (Layout.newest_rows)
            newest = layout.newest_rows(table.name)
            key = f'n."{table.stream_key}"'
            order = ", ".join(f'n."{c}" DESC' for c in table.primary_key)
            con.execute(f"DELETE FROM {newest} n USING ({pass_rows_sql(view, table, OutputKind.ROWS)}) a "
                        f'WHERE {key} = a."{table.stream_key}"')
            con.execute(f"INSERT INTO {newest} ({cols}) SELECT {cols} FROM ({pass_rows_sql(view, table, OutputKind.ROWS)}) n "
                        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {order}) = 1")
        if table.kind in ("keyed", "append"):
            continue
        keys = ", ".join(f'"{c}"' for c in table.primary_key)
        values = ", ".join(f'"{c}"' for c in table.value_columns)
        partial_keys = ", ".join(f'p."{c}"' for c in table.primary_key)
        sums = ", ".join(f'coalesce(sum(p."{c}"), 0)' for c in table.value_columns)
        updates = ", ".join(f'"{c}" = "{table.name}"."{c}" + excluded."{c}"' for c in table.value_columns)
        con.execute(f"INSERT INTO {target} ({keys}, {values}) "
                    f"SELECT {partial_keys}, {sums} FROM ({pass_rows_sql(view, table, OutputKind.AGGREGATE)}) p "
                    f"GROUP BY {partial_keys} ON CONFLICT ({keys}) DO UPDATE SET {updates}")


# the ledger's columns (docs/STORE.md), in the order `_ledger_rows` gives them
LEDGER_COLUMNS = ("batch_id", "view", "entry_idx", "kind", "received_at", "records", "malformed", "normalised",
                  Outcome.SELECTED.value, "unrouted", *OUTCOME_COLUMNS, "pending", Outcome.GAPS_SKIPPED.value,
                  "committed_at")


def _ledger_rows(store: Store, plan: PassPlan, subscribed_types: set[str], layout: Layout) -> list[list]:
    con = store.con
    counts: dict[tuple[str, int, str], int] = {}
    for view, entry_idx, name, n in con.execute(
            f"SELECT o.view, o.entry_idx, o.name, sum(o.n) FROM pass_out o WHERE o.kind = '{OutputKind.COUNT.value}' "
            "GROUP BY o.view, o.entry_idx, o.name").fetchall():
        counts[(view, entry_idx, name)] = int(n)
    info = {r[0]: r[1:] for r in con.execute(
        "SELECT l.entry_idx, l.received_at, l.records, l.malformed, l.normalised FROM inorder.ingest_log l "
        "WHERE list_contains(?, l.entry_idx)", [sorted({e["entry_idx"] for e in plan.entries})]).fetchall()}
    unrouted: dict[int, int] = {}
    for (entry_idx, stream_type), n in plan.message_counts.items():
        if stream_type not in subscribed_types:
            unrouted[entry_idx] = unrouted.get(entry_idx, 0) + n
    pending_before = dict(con.execute(f"SELECT p.view, count(*) FROM {layout.state}.pending p GROUP BY p.view").fetchall())
    now = datetime.now(timezone.utc)
    rows = []
    for view, entries in plan.by_view.items():
        entry_counts = [{name: counts.get((view, entry.entry_idx, name), 0) for name in COUNTED} for entry in entries]
        for entry, c, pending in zip(entries, entry_counts, running_pending(pending_before.get(view, 0), entry_counts)):
            received_at, records, malformed, normalised = info[entry.entry_idx]
            rows.append([entry.batch_id, view, entry.entry_idx, entry.kind, received_at, records, malformed,
                         normalised, c[Outcome.SELECTED], unrouted.get(entry.entry_idx, 0),
                         *(c[name] for name in OUTCOME_COLUMNS), pending, c[Outcome.GAPS_SKIPPED], now])
    return rows


@contextmanager
def pass_output(store: Store, result: PassResult) -> Iterator[None]:
    """The pass output as the temporary view `pass_out` on the store's connection, for the block
    (the commit, then the publication of what it changed)."""
    con = store.con
    if result.folder is None:
        con.register("pass_out", result.table)
    else:  # read where it lies: DuckDB scans only the columns each statement needs
        glob = str(result.folder / "*.parquet").replace("'", "''")
        con.execute(f"CREATE OR REPLACE TEMP VIEW pass_out AS SELECT * FROM read_parquet('{glob}')")
    try:
        yield
    finally:
        con.execute("DROP VIEW IF EXISTS pass_out")  # a registered table is a view too


def commit_pass(store: Store, views: list[View], plan: PassPlan, subscribed_types: set[str],
                layout: Layout = LIVE) -> None:
    """Write the pass output (`pass_output`) and its ledger rows atomically (after `run_pass` on the same
    store), where `layout` keeps the views' state and tables."""
    con = store.con
    ledger = _ledger_rows(store, plan, subscribed_types, layout)
    state = layout.state
    with store.transaction():
        _commit_watermarks(con, state)
        _commit_pending(con, state)
        _commit_errors_and_gaps(con, state)
        for view in views:
            if view.name in plan.by_view:
                _write_view_tables(store, view, layout)
        crash_point("commit.view_tables")
        con.executemany(f"INSERT INTO {state}.batches ({', '.join(LEDGER_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(LEDGER_COLUMNS))})", ledger)
        crash_point("commit.ledger")
        record_projection(con, views, {name: (entries[0].entry_idx, entries[0].batch_id)
                                       for name, entries in plan.by_view.items()}, layout)


def _commit_watermarks(con, state: str) -> None:
    """The walked streams' watermarks, each with its previous last_seq beside the new one, so a check can
    prove watermarks never move back."""
    watermark = f"'{OutputKind.WATERMARK.value}'"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_prev AS
        SELECT w.rowid AS row_id, w.view, w.stream_id, w.last_seq FROM {state}.watermarks w
        JOIN pass_out o ON o.kind = {watermark} AND o.view = w.view AND o.stream_id = w.stream_id""")
    crash_point("commit.begun")
    # by rowid, found in this transaction: no second scan of the whole table
    con.execute(f"DELETE FROM {state}.watermarks WHERE rowid IN (SELECT t.row_id FROM pass_prev t)")
    con.execute(f"""
        INSERT INTO {state}.watermarks BY NAME
        SELECT {select("o", WatermarkRecord._fields, target=STORED_WATERMARK)}, p.last_seq AS prev_last_seq
        FROM pass_out o LEFT JOIN pass_prev p ON p.view = o.view AND p.stream_id = o.stream_id
        WHERE o.kind = {watermark}""")
    crash_point("commit.watermarks")


def _commit_pending(con, state: str) -> None:
    """The walked streams' buffers, replaced by what the walk left buffered."""
    watermark, pending = (f"'{k.value}'" for k in (OutputKind.WATERMARK, OutputKind.PENDING))
    con.execute(f"""
        DELETE FROM {state}.pending p USING (SELECT o.view, o.stream_id FROM pass_out o WHERE o.kind = {watermark}) t
        WHERE p.view = t.view AND p.stream_id = t.stream_id""")
    con.execute(f"""
        INSERT INTO {state}.pending BY NAME
        SELECT o.view, o.stream_id, {select("o", Message._fields, source=MESSAGE_IN_PASS)}
        FROM pass_out o WHERE o.kind = {pending}""")
    crash_point("commit.pending")


# an error row keeps its message's fields but its entry (its entry_idx is the entry that logged it) and stream type
LOGGED_MESSAGE = [name for name in Message._fields if name not in ("entry_idx", "stream_type")]


def _commit_errors_and_gaps(con, state: str) -> None:
    """The pass's error records and skipped gap ranges, in entry order."""
    error, gap = (f"'{k.value}'" for k in (OutputKind.ERROR, OutputKind.GAP))
    con.execute(f"""
        INSERT INTO {state}.errors BY NAME
        SELECT o.view, o.stream_id, o.entry_idx, o.name AS kind, {select("o", LOGGED_MESSAGE)},
               {select("o", ERROR_DETAILS)}
        FROM pass_out o WHERE o.kind = {error}
        ORDER BY o.entry_idx, o.view, o.stream_id, o.seq, o.line""")
    crash_point("commit.errors")
    con.execute(f"""
        INSERT INTO {state}.gaps (view, stream_id, first_missing, last_missing, waited_seconds, reason, batch_id,
                                  skipped_at, entry_idx)
        SELECT o.view, o.stream_id, o.first_missing, o.last_missing, o.waited_us / 1e6, o.name, o.batch_id,
               o.skipped_at, o.entry_idx
        FROM pass_out o WHERE o.kind = {gap}
        ORDER BY o.entry_idx, o.view, o.stream_id, o.first_missing""")
    crash_point("commit.gaps")
