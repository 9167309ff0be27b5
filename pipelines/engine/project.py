"""One projection pass: archived entries not yet committed for some views → ordered, applied, committed.

The driver loads the state of the streams the pass touches from the read store, Spark brings
each (view, stream)'s state, buffer and new messages together in one sorted partition, and
`walk_stream` orders and applies them there (Arrow batches in, Arrow batches out). The driver
then commits everything in one read-store transaction (pipelines/engine/commit.py).
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.engine.ingest import archive_path
from pipelines.engine.normalise import MESSAGE_SCHEMA
from pipelines.message import Message
from pipelines.engine.order import HandlerBug, PassEntry, PassOutput, StreamState, walk_stream
from pipelines.engine.planning import PassBounds, PlannedEntry, StreamSketch, cut_passes
from pipelines.engine.pass_data import (SUMMARY_COLUMNS, SUMMARY_KINDS, InputKind, Metric, OutputKind, output_batches,
                                 output_schema, row_column)
from pipelines.engine.routing import select_views, subscriptions
from pipelines.spark.session import archive_shared, files_shared, mark_used, ship_code, shuffle_partitions
from pipelines.store.layout import LIVE, Layout
from pipelines.store.database import Home, Store, us_from_utc
from pipelines.view import Table, View

INPUTS_FILE = "inputs.parquet"  # the touched state and buffers, in the pass's scratch folder
# the columns a message row is read by (an input's STATE columns are read only for STATE rows)
_MESSAGE_INPUT = ["stream_id", "rec_type", "view", "views", *Message._fields]
_FLUSH_EVERY = 20_000
FATAL_METRIC = "fatal"  # how many "fatal" records a partition wrote (read with the summary, not the data)
WALKED_METRIC = "walked"  # how many streams of a view a partition walked (one watermark record each)


@dataclass
class PassPlan:
    """The entries of one pass, and which of them each view still has to project."""

    entries: list[dict]  # ingest_log rows, in order
    by_view: dict[str, list[PassEntry]] = field(default_factory=dict)
    # (entry_idx, stream_type) -> messages archived for it, filled by `load_inputs` (for the ledger's
    # unrouted count, after the store was let go during the Spark work)
    message_counts: dict[tuple[int, str], int] = field(default_factory=dict)
    pairs: int = 0  # the (view, stream) pairs its entries bring, as planned (pipelines/engine/planning.py)
    over_bounds: bool = False  # one entry that alone exceeds the pass bounds

    @property
    def view_entries(self) -> list[tuple[str, int]]:
        return [(v, e.entry_idx) for v, es in self.by_view.items() for e in es]


def plan_passes(store: Store, views: Iterable[View], bounds: PassBounds | None = None,
                layout: Layout = LIVE) -> list[PassPlan]:
    """Uncommitted entries per view, in ingest order, cut into passes within `bounds` (default: from
    the environment, `PassBounds.from_env`) by their records and the (view, stream) pairs they bring
    (pipelines/engine/planning.py). Not counted: the buffered streams a pass walks only because a gap timer is
    due or a buffer is over max_pending."""
    views = list(views)
    names = [v.name for v in views]
    rows = store.con.execute(
        f"""SELECT l.entry_idx, l.batch_id, l.kind, l.received_at, l.normalised, l.target_view, l.target_stream,
                  list(v.view ORDER BY v.view) AS todo
           FROM inorder.ingest_log l CROSS JOIN unnest(?::VARCHAR[]) AS v(view)
           WHERE l.status = 'archived'
             AND (l.kind NOT IN ('retry', 'skip') OR l.target_view = v.view)
             AND NOT EXISTS (SELECT 1 FROM {layout.state}.batches b WHERE b.batch_id = l.batch_id AND b.view = v.view)
           GROUP BY ALL ORDER BY l.entry_idx""", [names]).fetchall()
    sketches: dict[int, dict[str, StreamSketch]] = {}
    # a store made before ingest_streams, opened read-only (the tick schedule's plan) has no such table
    recorded = store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'inorder' "
                                 "AND table_name = 'ingest_streams'").fetchone()[0]
    batch_streams = store.con.execute(
        "SELECT entry_idx, stream_type, streams, sketch FROM inorder.ingest_streams WHERE list_contains(?, entry_idx)",
        [[r[0] for r in rows if r[2] == "batch"]]).fetchall() if recorded else []
    for entry_idx, stream_type, streams, sketch in batch_streams:
        sketches.setdefault(entry_idx, {})[stream_type] = StreamSketch.recorded(sketch, streams)
    subscribes = {v.name: v.subscribes for v in views}
    planned = [PlannedEntry(entry_idx, normalised or 0, _entry_streams(
        kind, normalised or 0, sketches.get(entry_idx), {view: subscribes[view] for view in todo}))
        for entry_idx, _, kind, _, normalised, _, _, todo in rows]
    by_idx = {r[0]: r for r in rows}
    bounds = bounds or PassBounds.from_env()
    passes = []
    for cut in cut_passes(planned, bounds):
        plan = PassPlan([], pairs=cut.pairs, over_bounds=cut.over(bounds))
        for planned_entry in cut.entries:
            entry_idx, batch_id, kind, received_at, _, target_view, target_stream, todo = by_idx[planned_entry.entry_idx]
            plan.entries.append({"entry_idx": entry_idx, "batch_id": batch_id, "kind": kind,
                                 "target_view": target_view, "target_stream": target_stream})
            entry = PassEntry(entry_idx, batch_id, kind, us_from_utc(received_at), target_stream)
            for view in todo:
                plan.by_view.setdefault(view, []).append(entry)
        passes.append(plan)
    return passes


def _entry_streams(kind: str, records: int, by_type: dict[str, StreamSketch] | None,
                   subscribes: dict[str, tuple[str, ...]]) -> dict[str, StreamSketch]:
    """The streams an entry brings to each view that has it to do: a batch's streams of the types the
    view subscribes to (a batch of a store made before sketches were recorded: at most one per record),
    the target stream of an operator's action, none for a tick."""
    if kind in ("retry", "skip"):
        return {view: StreamSketch(unsketched=1) for view in subscribes}
    if kind != "batch" or not records:
        return {}
    if by_type is None:
        return {view: StreamSketch(unsketched=records) for view in subscribes}
    out = {}
    for view, types in subscribes.items():
        for sketch in (by_type[t] for t in types if t in by_type):
            out[view] = out[view].union(sketch) if view in out else sketch
    return out


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
                ) -> tuple[Path | None, list[str]]:
    """The STATE and PENDING rows of every (view, stream) the pass touches, as a Parquet file in the pass's
    scratch folder (None: there are none), and the archive files to read."""
    con = store.con
    batch_entries = [e["entry_idx"] for e in plan.entries if e["kind"] == "batch"]
    files = [str(archive_path(home, i)) for i in batch_entries]
    con.execute("CREATE OR REPLACE TEMP TABLE pass_todo (view VARCHAR, entry_idx BIGINT)")
    con.executemany("INSERT INTO pass_todo (view, entry_idx) VALUES (?, ?)", plan.view_entries)
    con.execute("CREATE OR REPLACE TEMP TABLE pass_subs (view VARCHAR, stream_type VARCHAR)")
    con.executemany("INSERT INTO pass_subs (stream_type, view) VALUES (?, ?)", subscriptions(views))
    # one scan of the archive: which streams the pass touches, and (for the ledger) their stream types
    con.execute("CREATE OR REPLACE TEMP TABLE pass_messages "
                "(entry_idx BIGINT, stream_type VARCHAR, stream_id VARCHAR, n BIGINT)")
    if files:
        con.execute("INSERT INTO pass_messages (entry_idx, stream_type, stream_id, n) "
                    "SELECT a.entry_idx, a.stream_type, a.stream_id, count(*) FROM read_parquet(?) a "
                    "GROUP BY a.entry_idx, a.stream_type, a.stream_id", [files])
    plan.message_counts = {(entry_idx, stream_type): int(n) for entry_idx, stream_type, n in con.execute(
        "SELECT m.entry_idx, m.stream_type, sum(m.n) FROM pass_messages m GROUP BY m.entry_idx, m.stream_type"
    ).fetchall()}
    # A buffered stream that gets no message and no operator action changes only when a gap timer
    # fires or its buffer is over `max_pending`; the others would walk to the same state, so they
    # stay out of the pass (CONCEPTS §7: per-run work follows the batch and the buffers it touches).
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

    # The touched streams' watermarks and skipped ranges, found with one scan of each table for all views:
    # the scan grows with the store, so each table is scanned once, on its key columns alone, and the
    # found rows fetched by rowid (a join on the key would read every column of every row).
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_watermarks AS
        SELECT w.view, w.stream_id, w.stream_type, w.last_seq, w.blocked_at, w.blocked_since, w.parked, w.attempts
        FROM {layout.state}.watermarks w WHERE w.rowid IN (
            SELECT k.rowid FROM {layout.state}.watermarks k
            JOIN pass_streams s ON s.view = k.view AND s.stream_id = k.stream_id)""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_skipped AS
        SELECT g.view, g.stream_id, list(struct_pack(first_missing := g.first_missing, last_missing := g.last_missing)
                                         ORDER BY g.first_missing, g.last_missing) AS skipped
        FROM {layout.state}.gaps g JOIN pass_streams s ON s.view = g.view AND s.stream_id = g.stream_id
        GROUP BY g.view, g.stream_id""")

    # the touched state, typed, written by DuckDB itself where the executors read it (docs/STORE.md, "The pass")
    scratch = pass_folder(home, layout)
    shutil.rmtree(scratch, ignore_errors=True)  # what a crashed pass left
    scratch.mkdir(parents=True)
    parts = [_state_sql(view, layout) for view in views if view.name in plan.by_view]
    parts.append(f"""
        SELECT p.view, p.stream_id, {int(InputKind.PENDING)}::INTEGER AS rec_type, p.entry_idx, p.line, p.seq,
               p.batch_id, p.event_type, p.payload, p.occurred_at, p.event_id, p.stream_type,
               NULL::VARCHAR AS views  -- a NEW message's; here so that the file has every input column
        FROM {layout.state}.pending p JOIN pass_streams s ON s.view = p.view AND s.stream_id = p.stream_id""")
    inputs = scratch / INPUTS_FILE
    target = str(inputs).replace("'", "''")
    (written,) = con.execute(f"COPY ({' UNION ALL BY NAME '.join(parts)}) TO '{target}' (FORMAT parquet)").fetchone()
    return (inputs if written else None), files


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
        source = (f"FROM {stored} r WHERE r.rowid IN (SELECT k.rowid FROM {stored} k JOIN pass_streams s "
                  f"ON s.view = '{view.name}' AND s.stream_id = k.\"{table.stream_key}\")")  # as pass_watermarks
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
               0::BIGINT AS line, w.stream_type, w.last_seq, w.blocked_at, w.blocked_since, w.parked, w.attempts,
               g.skipped{''.join(columns)}
        FROM pass_streams s
        LEFT JOIN pass_watermarks w ON w.view = s.view AND w.stream_id = s.stream_id
        LEFT JOIN pass_skipped g ON g.view = s.view AND g.stream_id = s.stream_id
        {' '.join(joins)}
        WHERE s.view = '{view.name}' AND (w.stream_id IS NOT NULL{''.join(present)})"""


def _decode_state(view: View, row: dict, first_seq: int) -> StreamState:
    """A STATE input row (its blocked_since in microseconds) as the walk starts from it."""
    state = StreamState.watermarked(  # a stream with rows but no watermark has every watermark field NULL
        row["stream_type"], row["last_seq"], row["blocked_at"], row["blocked_since"], row["parked"], row["attempts"],
        [(r["first_missing"], r["last_missing"]) for r in row["skipped"] or ()], first_seq)
    for table in view.tables:
        stored = row.get(row_column(view.name, table.name))
        if stored is None:
            continue
        utc = table.utc_columns
        if utc:
            for r in stored if table.kind == "keyed" else (stored,):
                for column in utc:
                    if r[column] is not None:
                        r[column] = r[column].astimezone(timezone.utc)
        if table.kind == "keyed":
            state.keyed_rows[table.name] = stored
        else:
            state.newest_rows[table.name] = stored
    return state


def _state_rows(batch: pa.RecordBatch) -> dict[int, dict]:
    """The batch's STATE rows by position, as dicts (blocked_since in microseconds)."""
    positions = pc.indices_nonzero(pc.equal(batch.column("rec_type"), int(InputKind.STATE)))
    if not len(positions):
        return {}
    rows = batch.take(positions)
    since = rows.schema.get_field_index("blocked_since")
    rows = rows.set_column(since, "blocked_since", pc.cast(rows.column(since), pa.int64()))
    return dict(zip(positions.to_pylist(), rows.to_pylist()))


def order_and_apply_partition(batches: Iterator[pa.RecordBatch], views: dict[str, View],
                              entries: dict[str, list[PassEntry]], first_seq: int,
                              schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """mapInArrow body (see `_order_and_apply`), with Python's cyclic garbage collector paused.

    The walk allocates a few objects per message (messages, events, rows) and makes no reference
    cycles of its own, so the collector's generation scans, triggered by allocation counts, would
    only re-scan live messages; a young-generation collection at each output flush still frees any
    cycle a handler makes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _order_and_apply(batches, views, entries, first_seq, schema)
    finally:
        if enabled:
            gc.enable()


def _order_and_apply(batches: Iterator[pa.RecordBatch], views: dict[str, View],
                     entries: dict[str, list[PassEntry]], first_seq: int,
                     schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Rows arrive sorted by (stream_id, rec_type, view, entry_idx, line), so a stream's state and
    pending rows (one set per view) come first, then its new messages, each once."""
    out = PassOutput()
    aggregates: dict[str, dict[str, dict]] = {}
    stream_id: str | None = None
    states: dict[str, dict] = {}
    pending: dict[str, list[Message]] = {}
    new: list[Message] = []
    new_views: list[str] = []
    walked: Counter[str] = Counter()  # view -> streams walked (watermark records written)
    walk_seconds = walk_cpu_seconds = 0.0

    def flush_stream() -> None:
        nonlocal walk_seconds, walk_cpu_seconds
        started, started_cpu = time.perf_counter(), time.thread_time()
        by_view: dict[str, list[Message]] = {}
        if new:
            if new_views.count(new_views[0]) == len(new_views):
                by_view = dict.fromkeys(new_views[0].split(","), new)  # the usual case: one route
            else:
                for msg, route in zip(new, new_views):
                    for view_name in route.split(","):
                        by_view.setdefault(view_name, []).append(msg)
        for view_name in sorted(states.keys() | pending.keys() | by_view.keys()):
            view = views[view_name]
            stored = states.get(view_name)
            state = _decode_state(view, stored, first_seq) if stored else StreamState(last_seq=first_seq - 1)
            walk_stream(view, stream_id, state, pending.get(view_name, []), by_view.get(view_name, []),
                        entries[view_name], out, aggregates.setdefault(view_name, {}))
        walk_seconds += time.perf_counter() - started
        walk_cpu_seconds += time.thread_time() - started_cpu

    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        cols = batch.select(_MESSAGE_INPUT).to_pydict()
        state_rows = _state_rows(batch)
        stream_col, rec_col, view_col, views_col = cols["stream_id"], cols["rec_type"], cols["view"], cols["views"]
        message_rows = list(map(Message._make, zip(*(cols[name] for name in Message._fields))))
        ids = batch.column("stream_id")
        changes = pc.indices_nonzero(pc.not_equal(ids.slice(1), ids.slice(0, n - 1))).to_pylist()
        starts = [0, *(i + 1 for i in changes), n]  # where each stream's rows begin in this batch
        for start, end in zip(starts, starts[1:]):
            if stream_col[start] != stream_id:
                if stream_id is not None:
                    flush_stream()
                    if len(out) >= _FLUSH_EVERY:
                        walked.update(w.view for w in out.watermarks)
                        yield from output_batches(out, schema)
                        out.clear_records()
                        gc.collect(1)
                stream_id, states, pending, new, new_views = stream_col[start], {}, {}, [], []
            i = start
            while i < end and rec_col[i] != InputKind.NEW:  # a stream's state and pending rows sort first
                if rec_col[i] == InputKind.STATE:
                    states[view_col[i]] = state_rows[i]
                else:
                    pending.setdefault(view_col[i], []).append(message_rows[i])
                i += 1
            new.extend(message_rows[i:end])
            new_views.extend(views_col[i:end])
    if stream_id is not None:
        flush_stream()
    # CPU time too: on a busy machine the JVM takes cores from the walk, which inflates its wall time
    walked.update(w.view for w in out.watermarks)
    metrics = [Metric("walk_us", int(walk_seconds * 1e6)), Metric("walk_cpu_us", int(walk_cpu_seconds * 1e6)),
               Metric(FATAL_METRIC, len(out.fatal)), *(Metric(WALKED_METRIC, n, view) for view, n in walked.items())]
    sums = {view_name: {table_name: _aggregate_partials(views[view_name].table(table_name), table_sums)
                        for table_name, table_sums in tables.items()} for view_name, tables in aggregates.items()}
    yield from output_batches(out, schema, sums, metrics, with_counts=True)


def _aggregate_partials(table: Table, sums: dict) -> list[dict]:
    """A partition's partial sums of an aggregate table as rows: the key's columns and the summed ones."""
    key_cols = table.primary_key
    return [{**dict(zip(key_cols, k if len(key_cols) > 1 else (k,))), **v} for k, v in sums.items()]


def _no_null_lists(frame: DataFrame) -> DataFrame:
    """The frame with every NULL list (a row's skipped ranges or keyed rows: none, another view's, or a
    message's) as an empty list, which the walk reads the same. Spark's Arrow writer takes microseconds
    per NULL list value (about 10 µs, against well under 1 µs for an empty one): with a NULL in every row
    but one view's, that was most of the JVM's work in a wide pass."""
    return frame.select([F.coalesce(F.col(f"`{f.name}`"), F.array().cast(f.dataType)).alias(f.name)
                         if isinstance(f.dataType, ArrayType) else F.col(f"`{f.name}`") for f in frame.schema.fields])


def archived_messages(spark: SparkSession, files: list[str]) -> DataFrame:
    """The pass's archived messages. Executors read the Parquet files themselves where they can
    reach them (a local session, or INORDER_ARCHIVE_SHARED=1); otherwise the driver reads them and
    ships them with the query, so a remote cluster or Spark Connect server needs no access to the archive."""
    if archive_shared(spark):
        return spark.read.parquet(*files)
    table = pa.concat_tables([pq.read_table(f, columns=MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA) for f in files])
    return spark.createDataFrame(table)


def summary_of(output: pa.Table) -> pa.Table:
    """The records of a pass output that a run's figures are counted from (counts and metrics), without data."""
    return output.filter(pc.is_in(output["kind"], pa.array([k.value for k in SUMMARY_KINDS]))).select(SUMMARY_COLUMNS)


def write_partition_output(batches: Iterable[pa.RecordBatch], folder: Path, schema: pa.Schema, partition: int,
                           attempt: int) -> Iterator[pa.RecordBatch]:
    """Write one Spark partition's output to its own Parquet file in `folder` (where the commit reads it),
    and yield only its summary records: the output itself never crosses the JVM or the driver.

    Each task attempt writes a file of its own and renames it into place once complete, so a failed or
    retried attempt never leaves a partial file where the commit reads (the walk is deterministic: two
    attempts write the same rows)."""
    final = folder / f"part-{partition:05d}.parquet"
    partial = folder / f"part-{partition:05d}.attempt-{attempt}.partial"
    try:
        with pq.ParquetWriter(partial, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)  # one kind per batch: row groups the commit's filters skip by kind
                summary = summary_of(pa.Table.from_batches([batch]))
                if summary.num_rows:
                    yield from summary.to_batches()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, final)


@dataclass
class PassResult:
    """A pass's output: written as Parquet files by the executors where the driver reads them too (a local
    session, or a shared location: nothing as large as the output passes through the JVM or the driver),
    or collected through the driver (a remote cluster without one). `summary` is its counts and metrics."""

    summary: pa.Table
    table: pa.Table | None = None
    folder: Path | None = None  # holds at least one Parquet file when set

    @classmethod
    def collected(cls, table: pa.Table) -> "PassResult":
        return cls(summary=summary_of(table), table=table)

    def fatal(self) -> list[HandlerBug]:
        """Handler bugs of views with on_bug="fail" (the pass must not be committed); the pass's data is
        read only when its summary counts some."""
        metrics = self.summary.filter(pc.and_(pc.equal(self.summary["kind"], OutputKind.METRIC.value),
                                              pc.equal(self.summary["name"], FATAL_METRIC)))
        if not pc.sum(metrics["n"]).as_py():
            return []
        columns = ["view", "stream_id", "seq", "entry_idx", "reason"]
        if self.folder is None:
            table = self.table.filter(pc.equal(self.table["kind"], OutputKind.FATAL.value)).select(columns)
        else:
            table = pq.read_table(self.folder, columns=columns, filters=[("kind", "=", OutputKind.FATAL.value)])
        return [HandlerBug(**row) for row in table.to_pylist()]


class TooMuchToShip(RuntimeError):
    """A pass would ship more through the driver than its bound (no location the executors share)."""


DEFAULT_SHIP_LIMIT_MB = 256


def ship_limit_bytes() -> int:
    """INORDER_SHIP_LIMIT_MB (default 256): what a pass may ship through the driver, as Parquet on disk."""
    text = os.environ.get("INORDER_SHIP_LIMIT_MB", "").strip()
    if not text:
        return DEFAULT_SHIP_LIMIT_MB << 20
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"INORDER_SHIP_LIMIT_MB must be a positive whole number of MiB, not {text!r}")
    return int(text) << 20


def shipped_bytes(inputs: Path | None, files: list[str]) -> int:
    """What a pass ships through the driver to executors that cannot read its files: its state and its
    archived messages, as their Parquet files weigh (its output, collected back, is of the same order)."""
    return (inputs.stat().st_size if inputs is not None else 0) + sum(Path(f).stat().st_size for f in files)


def check_shipped(size: int, limit: int) -> None:
    """Refuse, in one line and before Spark starts the pass, a pass too large to ship through the driver:
    on a cluster the state, the messages and the output would all cross the driver's memory."""
    if size > limit:
        raise TooMuchToShip(
            f"this pass would ship {size / 2**20:,.0f} MiB of state and messages through the driver "
            f"(INORDER_SHIP_LIMIT_MB={limit >> 20}): put the archive and the scratch folder on storage the "
            "executors mount at the same paths and set INORDER_ARCHIVE_SHARED=1 and INORDER_SCRATCH, or make "
            "passes smaller (INORDER_PASS_STREAMS, INORDER_PASS_RECORDS)")


def pass_folder(home: Home, layout: Layout = LIVE) -> Path:
    """Scratch space of the pass in progress (inputs and output); removed after its commit. A rebuild's
    passes have their own, since runs go on beside it."""
    return home.scratch / layout.scratch


def run_pass(spark: Callable[[], SparkSession], store: Store, home: Home, views: list[View], plan: PassPlan,
             first_seq: int, layout: Layout = LIVE, let_writers_in: bool = False) -> PassResult:
    """Order and apply one pass in Spark (`spark()` gives the session); returns the pass output for
    `commit_pass`. The DuckDB file is held only while the pass's inputs are loaded: readers can open it
    during the Spark work. A pass with no message and no buffer to walk (a tick with no timer due)
    needs no Spark at all. With `let_writers_in` (a rebuild's replay, which reads and writes only its
    shadow), the writer lock is let go too, so runs ingest and project meanwhile."""
    inputs, files = load_inputs(store, home, views, plan, layout)
    if inputs is None and not files:
        return PassResult.collected(output_schema(v for v in views if v.name in plan.by_view).empty_table())
    with store.released(writer=let_writers_in):
        session = spark()
        try:
            return _order_and_apply_in_spark(session, home, views, plan, first_seq, inputs, files,
                                             pass_folder(home, layout))
        finally:
            mark_used(session)


def _order_and_apply_in_spark(spark: SparkSession, home: Home, views: list[View], plan: PassPlan, first_seq: int,
                              inputs: Path | None, files: list[str], scratch: Path) -> PassResult:
    in_pass = [v for v in views if v.name in plan.by_view]
    schema = output_schema(in_pass)
    ship_code(spark)  # remote executors run this process's handlers (no-op for local sessions)
    # executors that reach the driver's files (local, or INORDER_ARCHIVE_SHARED with INORDER_SCRATCH on the
    # same storage) read the state where DuckDB wrote it and write the output where the commit reads it;
    # others get both shipped through the driver, as Arrow, within the bound of `check_shipped`
    shared = files_shared(spark, home.scratch_dir is not None)
    if not shared:
        check_shipped(shipped_bytes(inputs, files), ship_limit_bytes())
    frames = []
    if inputs is not None:
        frames.append(spark.read.parquet(str(inputs)) if shared else spark.createDataFrame(pq.read_table(inputs)))
    if files:
        messages = archived_messages(spark, files)
        selected = select_views(spark, messages, plan.view_entries, in_pass)
        frames.append(selected.selectExpr(f"CAST({int(InputKind.NEW)} AS INT) AS rec_type", "CAST(NULL AS STRING) AS view",
                                          "stream_id", "views", *Message._fields))
    if not frames:
        return PassResult.collected(schema.empty_table())
    combined = _no_null_lists(functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames))
    walk = functools.partial(order_and_apply_partition, views={v.name: v for v in in_pass},
                             entries=plan.by_view, first_seq=first_seq, schema=schema)
    walked = (combined.repartition(shuffle_partitions(spark), "stream_id")
              .sortWithinPartitions("stream_id", "rec_type", "view", "entry_idx", "line"))
    if not shared:
        return PassResult.collected(walked.mapInArrow(walk, from_arrow_schema(schema)).toArrow())
    output = scratch / "output"
    output.mkdir(parents=True, exist_ok=True)

    def walk_and_write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = TaskContext.get()
        return write_partition_output(walk(batches), output, schema, task.partitionId(), task.attemptNumber())

    summary_schema = pa.schema([schema.field(name) for name in SUMMARY_COLUMNS])
    summary = walked.mapInArrow(walk_and_write, from_arrow_schema(summary_schema)).toArrow()
    if not any(output.glob("*.parquet")):
        return PassResult.collected(schema.empty_table())
    return PassResult(summary=summary.cast(summary_schema), folder=output)
