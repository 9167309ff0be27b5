"""A pass's inputs: the driver's DuckDB finds the (view, stream) pairs the pass touches and writes their
state and buffers to one typed Parquet file in the pass's scratch folder (docs/STORE.md, "The pass")."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pyarrow.parquet as pq

from pipelines.engine.ingest import archive_path
from pipelines.engine.outcomes import EntryKind
from pipelines.engine.pass_data import InputKind, row_column
from pipelines.engine.planning import PassPlan
from pipelines.message import Message
from pipelines.records import LOADED_STATE, select
from pipelines.engine.routing import subscriptions
from pipelines.store.database import Home, Store
from pipelines.store.layout import LIVE, Layout
from pipelines.view import View



@dataclass(frozen=True)
class PassInputs:
    """The touched state and buffers as the planner wrote them: the file (named anew for every pass, so that
    no cache of a reused Spark session keyed by path, or by a plan that names the path, can hand a later pass
    an earlier pass's file or schema), and its row count and columns, which the pass checks its read against."""

    path: Path
    rows: int
    columns: tuple[str, ...]


# The buffered streams (watermark w, view limits l) the entry at l.t_us must walk even without new
# messages: a gap timer due, or a buffer over max_pending; the others would walk to the state they have.
# Found by a filter on the watermarks (pending_count > 0, which DuckDB's row-group statistics skip on),
# not by a scan of the pending messages joined to every watermark.
DUE_BUFFERS = """
    SELECT w.view, w.stream_id FROM {state}.watermarks w JOIN {limits} ON l.view = w.view
    WHERE w.pending_count > 0 AND NOT w.parked
      AND (w.blocked_since IS NULL OR epoch_us(w.blocked_since) + l.gap_timeout_us <= l.t_us
           OR w.pending_count > l.max_pending)"""


def views_with_due_buffers(con, views: Iterable[View], t_us: int) -> list[str]:
    """The views that have a buffered stream a tick at `t_us` would walk (the tick schedule asks)."""
    limits = [(v.name, t_us, v.gap_timeout_us, v.max_pending) for v in views]
    if not limits:
        return []
    values = ", ".join("(?, ?, ?, ?)" for _ in limits)
    due = DUE_BUFFERS.format(state=LIVE.state, limits=f"(VALUES {values}) l(view, t_us, gap_timeout_us, max_pending)")
    return [r[0] for r in con.execute(f"SELECT DISTINCT d.view FROM ({due}) d ORDER BY 1",
                                      [x for row in limits for x in row]).fetchall()]


def load_inputs(store: Store, home: Home, views: list[View], plan: PassPlan, layout: Layout = LIVE
                ) -> tuple[PassInputs | None, list[str]]:
    """The STATE and PENDING rows of every (view, stream) the pass touches, as a Parquet file in the pass's
    scratch folder (None: there are none), and the archive files to read."""
    files = [str(archive_path(home, e["entry_idx"])) for e in plan.entries if e["kind"] == EntryKind.BATCH]
    _record_todo(store.con, views, plan)
    plan.message_counts = _scan_messages(store.con, files)
    _find_streams(store.con, views, plan, layout)
    _find_watermarks_and_gaps(store.con, layout)
    _find_walked_copies(store.con, home, files)
    return _write_inputs(store.con, home, views, plan, layout), files


def _record_todo(con, views: list[View], plan: PassPlan) -> None:
    """`pass_todo`: the (view, entry) pairs of the pass; `pass_subs`: the stream types each view subscribes to."""
    con.execute("CREATE OR REPLACE TEMP TABLE pass_todo (view VARCHAR, entry_idx BIGINT)")
    con.executemany("INSERT INTO pass_todo (view, entry_idx) VALUES (?, ?)", plan.view_entries)
    con.execute("CREATE OR REPLACE TEMP TABLE pass_subs (view VARCHAR, stream_type VARCHAR)")
    con.executemany("INSERT INTO pass_subs (stream_type, view) VALUES (?, ?)", subscriptions(views))


def _scan_messages(con, files: list[str]) -> dict[tuple[int, str], int]:
    """One scan of the archive (`pass_messages`): which streams the pass touches, and for the ledger, the
    messages of each (entry, stream type); with each stream's lowest seq, which tells the streams that may
    resend a seq they have walked (`_find_walked_copies`)."""
    con.execute("CREATE OR REPLACE TEMP TABLE pass_messages "
                "(entry_idx BIGINT, stream_type VARCHAR, stream_id VARCHAR, n BIGINT, min_seq BIGINT)")
    if files:
        con.execute("INSERT INTO pass_messages (entry_idx, stream_type, stream_id, n, min_seq) "
                    "SELECT a.entry_idx, a.stream_type, a.stream_id, count(*), min(a.seq) FROM read_parquet(?) a "
                    "GROUP BY a.entry_idx, a.stream_type, a.stream_id", [files])
    return {(entry_idx, stream_type): int(n) for entry_idx, stream_type, n in con.execute(
        "SELECT m.entry_idx, m.stream_type, sum(m.n) FROM pass_messages m GROUP BY m.entry_idx, m.stream_type"
    ).fetchall()}


def _find_streams(con, views: list[View], plan: PassPlan, layout: Layout) -> None:
    """`pass_streams`: the (view, stream) pairs the pass walks.

    A buffered stream that gets no message and no operator action changes only when a gap timer
    fires or its buffer is over `max_pending`; the others would walk to the same state, so they
    stay out of the pass (CONCEPTS §7: per-run work follows the batch and the buffers it touches)."""
    con.execute("CREATE OR REPLACE TEMP TABLE pass_limits "
                "(view VARCHAR, t_us BIGINT, gap_timeout_us BIGINT, max_pending BIGINT)")
    con.executemany("INSERT INTO pass_limits (view, t_us, gap_timeout_us, max_pending) VALUES (?, ?, ?, ?)", [
        (v.name, max(e.t_us for e in plan.by_view[v.name]), v.gap_timeout_us, v.max_pending)
        for v in views if v.name in plan.by_view])
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_streams AS
        {DUE_BUFFERS.format(state=layout.state, limits="pass_limits l")}
        UNION SELECT l.target_view, l.target_stream FROM inorder.ingest_log l
              JOIN pass_todo t ON t.entry_idx = l.entry_idx AND t.view = l.target_view
        UNION SELECT t.view, m.stream_id FROM pass_messages m
              JOIN pass_todo t ON t.entry_idx = m.entry_idx
              JOIN pass_subs s ON s.view = t.view AND s.stream_type = m.stream_type""")


BY_PAIR = "s.view = k.view AND s.stream_id = k.stream_id"  # a (view, stream) table's key against pass_streams


def _touched_rows(stored: str, alias: str, on: str) -> str:
    """`stored AS alias`, limited to the rows of the pass's streams (`on`: the join of the table's key
    columns `k` with `pass_streams s`). Without an index DuckDB scans to find keys, and the scan grows with
    the store: so it reads the key columns alone, and the rows found are fetched by rowid (a join on the
    key would read every column of every row)."""
    return f"{stored} {alias} WHERE {alias}.rowid IN (SELECT k.rowid FROM {stored} k JOIN pass_streams s ON {on})"


def _find_watermarks_and_gaps(con, layout: Layout) -> None:
    """`pass_watermarks`, `pass_skipped`: the touched streams' watermarks and skipped ranges, each table
    read once for all views (`_touched_rows`)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_watermarks AS
        SELECT w.view, w.stream_id, {select("w", LOADED_STATE)}
        FROM {_touched_rows(f"{layout.state}.watermarks", "w", BY_PAIR)}""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_skipped AS
        SELECT g.view, g.stream_id, list(struct_pack(first_missing := g.first_missing, last_missing := g.last_missing)
                                         ORDER BY g.first_missing, g.last_missing) AS skipped
        FROM {_touched_rows(f"{layout.state}.gaps", "g", BY_PAIR)}
        GROUP BY g.view, g.stream_id""")


def _find_walked_copies(con, home: Home, files: list[str]) -> None:
    """`pass_walked`: for each seq at or below its (view, stream)'s watermark that a message of the pass
    resends, the copy walked at it, which the walk compares the resend with (CONCEPTS §2: a duplicate, or a
    conflict). That copy is the first the archive holds of the seq among the view's stream types: a later one
    was a duplicate or a conflict of it, and a seq whose first copy came after its gap was skipped is late for
    good (the walk tells late before it looks for a copy). Its cost follows the pass: the streams whose lowest
    seq in the pass is at or below their watermark (`pass_messages`), none in the usual pass, lead to their
    resent seqs, and `inorder.ingest_seq_ranges` to the archived batches that hold a copy of them; only those
    are read."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE pass_resent AS
        SELECT DISTINCT t.view, m.stream_id, w.last_seq FROM pass_messages m
        JOIN pass_todo t ON t.entry_idx = m.entry_idx
        JOIN pass_subs s ON s.view = t.view AND s.stream_type = m.stream_type
        JOIN pass_watermarks w ON w.view = t.view AND w.stream_id = m.stream_id
        WHERE m.min_seq <= w.last_seq""")
    con.execute("CREATE OR REPLACE TEMP TABLE pass_walked AS SELECT * FROM inorder.pending LIMIT 0")  # its columns
    if not con.execute("SELECT count(*) FROM pass_resent").fetchone()[0]:
        return
    con.execute("""
        CREATE OR REPLACE TEMP TABLE pass_resent_seqs AS
        SELECT DISTINCT r.view, a.stream_id, a.seq FROM read_parquet(?) a
        JOIN pass_resent r ON r.stream_id = a.stream_id AND a.seq <= r.last_seq
        JOIN pass_todo t ON t.view = r.view AND t.entry_idx = a.entry_idx
        JOIN pass_subs s ON s.view = r.view AND s.stream_type = a.stream_type""", [files])
    holding = [str(archive_path(home, e)) for (e,) in con.execute("""
        SELECT DISTINCT i.entry_idx FROM inorder.ingest_seq_ranges i
        JOIN pass_resent_seqs r ON r.stream_id = i.stream_id AND r.seq BETWEEN i.min_seq AND i.max_seq
        ORDER BY 1""").fetchall()]
    if holding:
        con.execute(f"""
            INSERT INTO pass_walked BY NAME
            SELECT r.view, a.stream_id, {select("a", Message._fields)}
            FROM read_parquet(?) a
            JOIN pass_resent_seqs r ON r.stream_id = a.stream_id AND r.seq = a.seq
            JOIN pass_subs s ON s.view = r.view AND s.stream_type = a.stream_type
            QUALIFY row_number() OVER (PARTITION BY r.view, a.stream_id, a.seq ORDER BY a.entry_idx, a.line) = 1""",
                    [holding])


def _message_rows(source: str, alias: str, kind: InputKind) -> str:
    """The input rows (`kind` WALKED or PENDING) of the messages in `source AS alias`, a table of
    `inorder.pending`'s columns: every input column but the state's."""
    p = alias
    return f"""
        SELECT {p}.view, {p}.stream_id, {int(kind)}::INTEGER AS rec_type, {select(p, Message._fields)},
               NULL::VARCHAR AS views  -- a NEW message's; here so that the file has every input column
        FROM {source} {alias}"""


def _write_inputs(con, home: Home, views: list[View], plan: PassPlan, layout: Layout) -> PassInputs | None:
    """The touched state, typed, written by DuckDB itself where the executors read it (docs/STORE.md,
    "The pass"); None when it has no row."""
    scratch = pass_folder(home, layout)
    shutil.rmtree(scratch, ignore_errors=True)  # what a crashed pass left
    scratch.mkdir(parents=True)
    parts = [_state_sql(view, layout) for view in views if view.name in plan.by_view]
    parts.append(_message_rows(f"{layout.state}.pending", "p", InputKind.PENDING)
                 + " JOIN pass_streams s ON s.view = p.view AND s.stream_id = p.stream_id")
    parts.append(_message_rows("pass_walked", "w", InputKind.WALKED))
    path = scratch / f"inputs-{uuid.uuid4().hex}.parquet"
    target = str(path).replace("'", "''")
    (written,) = con.execute(f"COPY ({' UNION ALL BY NAME '.join(parts)}) TO '{target}' (FORMAT parquet)").fetchone()
    return PassInputs(path, written, tuple(pq.read_schema(path).names)) if written else None


def _state_sql(view: View, layout: Layout) -> str:
    """The STATE rows (pipelines/engine/pass_data.py) of `view`'s streams in `pass_streams`: its watermark and logged
    gap ranges (`pass_watermarks`, `pass_skipped`), a keyed table's rows and an append table's newest row. A
    stream with rows but no watermark (rows written outside inorder) has a state too: a keyed table is
    rewritten per stream."""
    joins, columns, present = [], [], []
    for i, table in enumerate(t for t in view.tables if t.kind != "aggregate"):
        rows, key = f"t{i}", f'r."{table.stream_key}"'
        row = "struct_pack(" + ", ".join(f'"{c}" := r."{c}"' for c in table.columns) + ")"
        stored = layout.table(table.name) if table.kind == "keyed" else layout.newest_rows(table.name)
        on = f"s.view = '{view.name}' AND s.stream_id = k.\"{table.stream_key}\""
        source = "FROM " + _touched_rows(stored, "r", on)
        if table.kind == "keyed":
            order = ", ".join(f'r."{c}"' for c in table.primary_key)
            sub = f"SELECT {key} AS stream_id, list({row} ORDER BY {order}) AS state {source} GROUP BY {key}"
        else:  # the newest row, which the engine keeps per stream: no read of the table's history
            sub = f"SELECT {key} AS stream_id, {row} AS state {source}"
        joins.append(f"LEFT JOIN ({sub}) {rows} ON {rows}.stream_id = s.stream_id")
        columns.append(f', {rows}.state AS "{row_column(view.name, table.name)}"')
        present.append(f" OR {rows}.stream_id IS NOT NULL")
    return f"""
        SELECT s.view, s.stream_id, {int(InputKind.STATE)}::INTEGER AS rec_type, 0::BIGINT AS entry_idx,
               0::BIGINT AS line, {select("w", LOADED_STATE)}, g.skipped{''.join(columns)}
        FROM pass_streams s
        LEFT JOIN pass_watermarks w ON w.view = s.view AND w.stream_id = s.stream_id
        LEFT JOIN pass_skipped g ON g.view = s.view AND g.stream_id = s.stream_id
        {' '.join(joins)}
        WHERE s.view = '{view.name}' AND (w.stream_id IS NOT NULL{''.join(present)})"""


def pass_folder(home: Home, layout: Layout = LIVE) -> Path:
    """Scratch space of the pass in progress (inputs and output); removed after its commit. A rebuild's
    passes have their own, since runs go on beside it."""
    return home.scratch / layout.scratch
