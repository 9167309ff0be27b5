"""DESIGN §2 step 5: write a pass's results in ONE read-store transaction.

View tables, watermarks, pending buffers, error and gap rows and the ledger rows of every entry
in the pass commit together or not at all.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from pipelines.faults import crash_point
from pipelines.project import PassPlan, PassResult
from pipelines.layout import LIVE, Layout
from pipelines.store import OUTCOME_COLUMNS, Store
from pipelines.versions import record_projection
from pipelines.view import Table, View


def _struct_type(table: Table) -> str:
    return json.dumps({c: t for c, t in table.columns.items()})


def pass_rows_sql(table: Table) -> str:
    """The typed rows the pass wrote to `table` (parameters: kind 'rows' or 'aggregate', view, table)."""
    return (f"SELECT r.* FROM (SELECT unnest(from_json(data, '[{_struct_type(table)}]')) AS r FROM pass_out "
            f"WHERE kind = ? AND view = ? AND name = ?)")


def _write_view_tables(store: Store, view: View, layout: Layout) -> None:
    con = store.con
    for table in view.tables:
        target = layout.table(table.name)
        cols = ", ".join(f'"{c}"' for c in table.columns)
        rows_sql = pass_rows_sql(table)
        if table.kind == "keyed":
            con.execute(f'DELETE FROM {target} WHERE "{table.stream_key}" IN '
                        "(SELECT stream_id FROM pass_out WHERE kind = 'watermark' AND view = ?)", [view.name])
        if table.kind in ("keyed", "append"):
            con.execute(f'INSERT INTO {target} ({cols}) {rows_sql}', ["rows", view.name, table.name])
            continue
        keys = ", ".join(f'"{c}"' for c in table.primary_key)
        values = ", ".join(f'"{c}"' for c in table.value_columns)
        sums = ", ".join(f'coalesce(sum("{c}"), 0) AS "{c}"' for c in table.value_columns)
        updates = ", ".join(f'"{c}" = "{table.name}"."{c}" + excluded."{c}"' for c in table.value_columns)
        con.execute(f'INSERT INTO {target} ({keys}, {values}) '
                    f"SELECT {keys}, {sums} FROM ({rows_sql}) GROUP BY ALL "
                    f"ON CONFLICT ({keys}) DO UPDATE SET {updates}", ["aggregate", view.name, table.name])


def _ledger_rows(store: Store, plan: PassPlan, subscribed_types: set[str], layout: Layout) -> list[list]:
    con = store.con
    counts: dict[tuple[str, int, str], int] = {}
    for view, entry_idx, name, n in con.execute(
            "SELECT view, entry_idx, name, sum(n) FROM pass_out WHERE kind = 'count' GROUP BY ALL").fetchall():
        counts[(view, entry_idx, name)] = int(n)
    info = {r[0]: r[1:] for r in con.execute(
        "SELECT entry_idx, received_at, records, malformed, normalised FROM inorder.ingest_log "
        "WHERE list_contains(?, entry_idx)", [sorted({e["entry_idx"] for e in plan.entries})]).fetchall()}
    unrouted: dict[int, int] = {}
    for (entry_idx, stream_type), n in plan.message_counts.items():
        if stream_type not in subscribed_types:
            unrouted[entry_idx] = unrouted.get(entry_idx, 0) + n
    pending_before = dict(con.execute(f"SELECT view, count(*) FROM {layout.state}.pending GROUP BY ALL").fetchall())
    now = datetime.now(timezone.utc)
    rows = []
    for view, entries in plan.by_view.items():
        pending = pending_before.get(view, 0)
        for entry in entries:
            c = {name: counts.get((view, entry.entry_idx, name), 0)
                 for name in ("selected", *OUTCOME_COLUMNS, "gaps_skipped")}
            pending += c["selected"] - sum(c[name] for name in OUTCOME_COLUMNS)
            received_at, records, malformed, normalised = info[entry.entry_idx]
            rows.append([entry.batch_id, view, entry.entry_idx, entry.kind, received_at, records, malformed,
                         normalised, c["selected"], unrouted.get(entry.entry_idx, 0),
                         *(c[name] for name in OUTCOME_COLUMNS), pending, c["gaps_skipped"], now])
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
        # keep the previous last_seq beside the new one, so a check can prove watermarks never move back
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE pass_prev AS
            SELECT w.view, w.stream_id, w.last_seq FROM {state}.watermarks w
            JOIN (SELECT view, stream_id FROM pass_out WHERE kind = 'watermark') t USING (view, stream_id)""")
        crash_point("commit.begun")
        con.execute(f"""
            DELETE FROM {state}.watermarks w USING pass_prev t WHERE w.view = t.view AND w.stream_id = t.stream_id""")
        con.execute(f"""
            INSERT INTO {state}.watermarks
            SELECT o.view, o.stream_id, data->>'stream_type', (data->>'last_seq')::BIGINT,
                   (data->>'blocked_at')::BIGINT, make_timestamp((data->>'blocked_since_us')::BIGINT)::TIMESTAMPTZ,
                   (data->>'parked')::BOOLEAN, (data->>'pending_count')::BIGINT, entry_idx, p.last_seq,
                   (data->>'attempts')::BIGINT
            FROM pass_out o LEFT JOIN pass_prev p USING (view, stream_id) WHERE kind = 'watermark'""")
        crash_point("commit.watermarks")
        con.execute(f"""
            DELETE FROM {state}.pending p USING (SELECT view, stream_id FROM pass_out WHERE kind = 'watermark') t
            WHERE p.view = t.view AND p.stream_id = t.stream_id""")
        con.execute(f"""
            INSERT INTO {state}.pending
            SELECT view, stream_id, seq, stream_type, event_type, payload, occurred_at, event_id, batch_id, line,
                   msg_entry_idx
            FROM pass_out WHERE kind = 'pending'""")
        crash_point("commit.pending")
        con.execute(f"""
            INSERT INTO {state}.errors (view, stream_id, seq, kind, event_type, payload, occurred_at, event_id,
                                        batch_id, line, reason, exception_type, message, traceback, logged_at,
                                        entry_idx, error_class, attempt)
            SELECT view, stream_id, seq, name, event_type, payload, occurred_at, event_id, batch_id, line,
                   data->>'reason', data->>'exception_type', data->>'message', data->>'traceback',
                   make_timestamp((data->>'logged_at_us')::BIGINT)::TIMESTAMPTZ, entry_idx,
                   data->>'error_class', (data->>'attempt')::BIGINT
            FROM pass_out WHERE kind = 'error'
            ORDER BY entry_idx, view, stream_id, seq, line""")
        crash_point("commit.errors")
        con.execute(f"""
            INSERT INTO {state}.gaps
            SELECT view, stream_id, (data->>'first_missing')::BIGINT, (data->>'last_missing')::BIGINT,
                   (data->>'waited_us')::BIGINT / 1e6, name, data->>'batch_id',
                   make_timestamp((data->>'skipped_at_us')::BIGINT)::TIMESTAMPTZ, entry_idx
            FROM pass_out WHERE kind = 'gap'
            ORDER BY entry_idx, view, stream_id, (data->>'first_missing')::BIGINT""")
        crash_point("commit.gaps")
        for view in views:
            if view.name in plan.by_view:
                _write_view_tables(store, view, layout)
        crash_point("commit.view_tables")
        con.executemany(
            f"INSERT INTO {state}.batches VALUES (" + ", ".join("?" * 19) + ")", ledger)
        crash_point("commit.ledger")
        record_projection(con, views, {name: (entries[0].entry_idx, entries[0].batch_id)
                                       for name, entries in plan.by_view.items()}, layout)

