"""One projection pass: archived entries not yet committed for some views → ordered, applied, committed.

The driver loads the state of the streams the pass touches from the read store, Spark brings
each (view, stream)'s state, buffer and new messages together in one sorted partition, and
`walk_stream` orders and applies them there (Arrow batches in, Arrow batches out). The driver
then commits everything in one read-store transaction (pipelines/commit.py).
"""

from __future__ import annotations

import functools
import gc
import json
import shutil
import time
import typing
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from pipelines.ingest import archive_path
from pipelines.inspect import MESSAGE_SCHEMA
from pipelines.message import Message
from pipelines.order import HandlerBug, PassEntry, PassOutput, StreamState, walk_stream
from pipelines.planning import PassBounds, PlannedEntry, StreamSketch, cut_passes
from pipelines.select import select_views, subscriptions
from pipelines.spark import archive_shared, is_local, mark_used, ship_code, shuffle_partitions
from pipelines.layout import LIVE, Layout
from pipelines.store import Home, Store, us_from_utc
from pipelines.view import View

STATE, PENDING, NEW = 0, 1, 2
INPUT_SCHEMA = pa.schema([
    ("view", pa.string()), ("stream_id", pa.string()), ("rec_type", pa.int32()), ("entry_idx", pa.int64()),
    ("line", pa.int64()), ("seq", pa.int64()), ("batch_id", pa.string()), ("event_type", pa.string()),
    ("payload", pa.string()), ("occurred_at", pa.string()), ("event_id", pa.string()),
    ("stream_type", pa.string()), ("state", pa.string()), ("views", pa.string()),
])  # state and pending rows belong to `view`; a new message goes to each of `views` (pipelines/select.py)
# Pending messages and error rows carry their message in typed columns (no JSON round trip), named
# after the fields of `Message` (its entry_idx as msg_entry_idx: the row's own entry_idx is the output's).
_MESSAGE_COLUMNS = [("msg_entry_idx" if name == "entry_idx" else name, pa.int64() if hint is int else pa.string())
                    for name, hint in typing.get_type_hints(Message).items()]
OUTPUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("view", pa.string()), ("stream_id", pa.string()), ("entry_idx", pa.int64()),
    ("name", pa.string()), ("n", pa.int64()), ("data", pa.string()), *_MESSAGE_COLUMNS,
])
_SPARK_TYPES = {pa.string(): "string", pa.int64(): "long"}
_OUTPUT_SPARK_SCHEMA = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in OUTPUT_SCHEMA)
_FLUSH_EVERY = 20_000
FATAL_METRIC = "fatal"  # how many "fatal" records a partition wrote (read with the summary, not the data)


def json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, date):  # datetimes too: TIMESTAMPTZ values are aware, in UTC
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__} in a view table")


# one encoder for every record (json.dumps with options would build a new one per call)
_ENCODER = json.JSONEncoder(default=json_default, separators=(",", ":"), ensure_ascii=False)
dumps = _ENCODER.encode


@dataclass
class PassPlan:
    """The entries of one pass, and which of them each view still has to project."""

    entries: list[dict]  # ingest_log rows, in order
    by_view: dict[str, list[PassEntry]] = field(default_factory=dict)
    # (entry_idx, stream_type) -> messages archived for it, filled by `load_inputs` (for the ledger's
    # unrouted count, after the store was let go during the Spark work)
    message_counts: dict[tuple[int, str], int] = field(default_factory=dict)
    pairs: int = 0  # the (view, stream) pairs its entries bring, as planned (pipelines/planning.py)
    over_bounds: bool = False  # one entry that alone exceeds the pass bounds

    @property
    def view_entries(self) -> list[tuple[str, int]]:
        return [(v, e.entry_idx) for v, es in self.by_view.items() for e in es]


def plan_passes(store: Store, views: Iterable[View], bounds: PassBounds | None = None,
                layout: Layout = LIVE) -> list[PassPlan]:
    """Uncommitted entries per view, in ingest order, cut into passes within `bounds` (default: from
    the environment, `PassBounds.from_env`) by their records and the (view, stream) pairs they bring
    (pipelines/planning.py). Not counted: the buffered streams a pass walks only because a gap timer is
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


# A buffered stream (pending p, watermark w) the entry at l.t_us must walk even without new messages: its
# gap timer is due, or its buffer is over max_pending (l: the view's limits); the others would walk
# to the state they have.
WALK_BUFFER = ("(w.stream_id IS NULL OR (NOT w.parked AND (w.blocked_since IS NULL "
               "OR epoch_us(w.blocked_since) + l.gap_timeout_us <= l.t_us OR w.pending_count > l.max_pending)))")


def views_with_due_buffers(con, views: Iterable[View], t_us: int) -> list[str]:
    """The views that have a buffered stream a tick at `t_us` would walk (the tick schedule asks)."""
    limits = [(v.name, t_us, v.gap_timeout_us, v.max_pending) for v in views]
    if not limits:
        return []
    values = ", ".join("(?, ?, ?, ?)" for _ in limits)
    return [r[0] for r in con.execute(
        f"""SELECT DISTINCT p.view FROM inorder.pending p
            JOIN (VALUES {values}) l(view, t_us, gap_timeout_us, max_pending) USING (view)
            LEFT JOIN inorder.watermarks w USING (view, stream_id) WHERE {WALK_BUFFER} ORDER BY 1""",
        [x for row in limits for x in row]).fetchall()]


def _table_rows(store: Store, sql: str, params: list) -> tuple[list[str], list[tuple]]:
    cursor = store.con.execute(sql, params)
    return [d[0] for d in cursor.description], cursor.fetchall()


def load_inputs(store: Store, home: Home, views: list[View], plan: PassPlan, layout: Layout = LIVE
                ) -> tuple[pa.Table, list[str]]:
    """State and pending rows of every (view, stream) the pass touches, and the archive files to read."""
    con = store.con
    batch_entries = [e["entry_idx"] for e in plan.entries if e["kind"] == "batch"]
    files = [str(archive_path(home, i)) for i in batch_entries]
    con.execute("CREATE OR REPLACE TEMP TABLE pass_todo (view VARCHAR, entry_idx BIGINT)")
    con.executemany("INSERT INTO pass_todo VALUES (?, ?)", plan.view_entries)
    con.execute("CREATE OR REPLACE TEMP TABLE pass_subs (view VARCHAR, stream_type VARCHAR)")
    con.executemany("INSERT INTO pass_subs (stream_type, view) VALUES (?, ?)", subscriptions(views))
    # one scan of the archive: which streams the pass touches, and (for the ledger) their stream types
    con.execute("CREATE OR REPLACE TEMP TABLE pass_messages "
                "(entry_idx BIGINT, stream_type VARCHAR, stream_id VARCHAR, n BIGINT)")
    if files:
        con.execute("INSERT INTO pass_messages SELECT entry_idx, stream_type, stream_id, count(*) "
                    "FROM read_parquet(?) GROUP BY ALL", [files])
    plan.message_counts = {(entry_idx, stream_type): int(n) for entry_idx, stream_type, n in con.execute(
        "SELECT entry_idx, stream_type, sum(n) FROM pass_messages GROUP BY ALL").fetchall()}
    # A buffered stream that gets no message and no operator action changes only when a gap timer
    # fires or its buffer is over `max_pending`; the others would walk to the same state, so they
    # stay out of the pass (DESIGN §7: per-run work follows the batch and the buffers it touches).
    con.execute("CREATE OR REPLACE TEMP TABLE pass_limits "
                "(view VARCHAR, t_us BIGINT, gap_timeout_us BIGINT, max_pending BIGINT)")
    con.executemany("INSERT INTO pass_limits VALUES (?, ?, ?, ?)", [
        (v.name, max(e.t_us for e in plan.by_view[v.name]), v.gap_timeout_us, v.max_pending)
        for v in views if v.name in plan.by_view])
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pass_streams AS
        SELECT DISTINCT p.view, p.stream_id FROM {layout.state}.pending p JOIN pass_limits l USING (view)
              LEFT JOIN {layout.state}.watermarks w USING (view, stream_id)
              WHERE {WALK_BUFFER}
        UNION SELECT l.target_view, l.target_stream FROM inorder.ingest_log l
              JOIN pass_todo t ON t.entry_idx = l.entry_idx AND t.view = l.target_view
        UNION SELECT t.view, m.stream_id FROM pass_messages m
              JOIN pass_todo t USING (entry_idx) JOIN pass_subs s ON s.view = t.view AND s.stream_type = m.stream_type""")

    states: dict[tuple[str, str], dict] = {}
    for view_name, stream_id, stream_type, last_seq, blocked_at, blocked_since, parked, attempts in con.execute(
            f"""SELECT w.view, w.stream_id, w.stream_type, w.last_seq, w.blocked_at, w.blocked_since, w.parked,
                      w.attempts FROM {layout.state}.watermarks w JOIN pass_streams USING (view, stream_id)""").fetchall():
        states[(view_name, stream_id)] = {
            "stream_type": stream_type, "last_seq": last_seq, "blocked_at": blocked_at,
            "blocked_since_us": us_from_utc(blocked_since), "parked": parked, "attempts": attempts, "skipped": [],
            "keyed_rows": {}, "newest_rows": {}}
    for view_name, stream_id, first, last in con.execute(
            f"""SELECT g.view, g.stream_id, g.first_missing, g.last_missing FROM {layout.state}.gaps g
               JOIN pass_streams USING (view, stream_id) ORDER BY 1, 2, 3""").fetchall():
        states[(view_name, stream_id)]["skipped"].append((first, last))
    for view in views:
        if view.name not in plan.by_view:
            continue
        for table in view.tables:
            if table.kind == "aggregate":
                continue
            key = f'"{table.stream_key}"'
            newest = ""
            if table.kind == "append":
                order = ", ".join(f'"{c}" DESC' for c in table.primary_key)
                newest = f"QUALIFY row_number() OVER (PARTITION BY t.{key} ORDER BY {order}) = 1"
            columns, rows = _table_rows(store, f"""
                SELECT t.* FROM {layout.table(table.name)} t JOIN pass_streams p ON p.view = ? AND p.stream_id = t.{key}
                {newest}""", [view.name])
            k = columns.index(table.stream_key)
            for row in rows:
                state = states.get((view.name, row[k]))
                if state is None:  # rows of a stream the view has no watermark for (written outside
                    # inorder): carry them through, since a keyed table is rewritten per stream
                    state = states[(view.name, row[k])] = {"skipped": [], "keyed_rows": {}, "newest_rows": {}}
                record = dict(zip(columns, row))
                if table.kind == "keyed":
                    state["keyed_rows"].setdefault(table.name, []).append(record)
                else:
                    state["newest_rows"][table.name] = record

    columns: dict[str, list] = {f.name: [] for f in INPUT_SCHEMA}

    def add(**values: Any) -> None:
        for name, column in columns.items():
            column.append(values.get(name))

    for (view_name, stream_id), state in states.items():
        add(view=view_name, stream_id=stream_id, rec_type=STATE, entry_idx=0, line=0, state=dumps(state))
    for row in con.execute(
            f"""SELECT view, stream_id, seq, stream_type, event_type, payload, occurred_at, event_id, batch_id,
                      line, entry_idx FROM {layout.state}.pending JOIN pass_streams USING (view, stream_id)""").fetchall():
        add(view=row[0], stream_id=row[1], rec_type=PENDING, seq=row[2], stream_type=row[3], event_type=row[4],
            payload=row[5], occurred_at=row[6], event_id=row[7], batch_id=row[8], line=row[9], entry_idx=row[10])
    return pa.table(columns, schema=INPUT_SCHEMA), files


def _decode_state(view: View, text: str, first_seq: int) -> StreamState:
    data = json.loads(text)
    state = StreamState.loaded(data, [tuple(r) for r in data["skipped"]], first_seq)
    for table in view.tables:
        restorers = table.text_restorers

        def typed(row: dict) -> dict:
            for column, restore in restorers:
                if row.get(column) is not None:
                    row[column] = restore(row[column])
            return row

        if table.name in data["keyed_rows"]:
            state.keyed_rows[table.name] = [typed(r) for r in data["keyed_rows"][table.name]]
        if data["newest_rows"].get(table.name) is not None:
            state.newest_rows[table.name] = typed(data["newest_rows"][table.name])
    return state


_NO_MESSAGE = (None,) * len(_MESSAGE_COLUMNS)


def _output_batch(records: list[tuple]) -> pa.RecordBatch:
    kinds, views, streams, entries, names, ns, datas = [], [], [], [], [], [], []
    messages = []
    for kind, view, stream_id, entry_idx, name, data, msg in records:
        kinds.append(kind)
        views.append(view)
        streams.append(stream_id)
        entries.append(entry_idx)
        names.append(name)
        if kind in ("count", "metric"):
            ns.append(data)
            datas.append(None)
        else:
            ns.append(None)
            datas.append(None if data is None else dumps(data))
        messages.append(_NO_MESSAGE if msg is None else msg)
    message_columns = list(zip(*messages)) if messages else [[] for _ in _MESSAGE_COLUMNS]
    arrays = [pa.array(kinds, pa.string()), pa.array(views, pa.string()), pa.array(streams, pa.string()),
              pa.array(entries, pa.int64()), pa.array(names, pa.string()), pa.array(ns, pa.int64()),
              pa.array(datas, pa.string())]
    arrays += [pa.array(column, dtype) for column, (_, dtype) in zip(message_columns, _MESSAGE_COLUMNS)]
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_SCHEMA)


def order_and_apply_partition(batches: Iterator[pa.RecordBatch], views: dict[str, View],
                              entries: dict[str, list[PassEntry]], first_seq: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow body (see `_order_and_apply`), with Python's cyclic garbage collector paused.

    The walk allocates a few objects per message (messages, events, rows) and makes no reference
    cycles of its own, so the collector's generation scans, triggered by allocation counts, would
    only re-scan live messages; a young-generation collection at each output flush still frees any
    cycle a handler makes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _order_and_apply(batches, views, entries, first_seq)
    finally:
        if enabled:
            gc.enable()


def _order_and_apply(batches: Iterator[pa.RecordBatch], views: dict[str, View],
                     entries: dict[str, list[PassEntry]], first_seq: int) -> Iterator[pa.RecordBatch]:
    """Rows arrive sorted by (stream_id, rec_type, view, entry_idx, line), so a stream's state and
    pending rows (one set per view) come first, then its new messages, each once."""
    out = PassOutput()
    aggregates: dict[str, dict[str, dict]] = {}
    stream_id: str | None = None
    states: dict[str, str] = {}
    pending: dict[str, list[Message]] = {}
    new: list[Message] = []
    new_views: list[str] = []
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
            text = states.get(view_name)
            state = _decode_state(view, text, first_seq) if text else StreamState(last_seq=first_seq - 1)
            walk_stream(view, stream_id, state, pending.get(view_name, []), by_view.get(view_name, []),
                        entries[view_name], out, aggregates.setdefault(view_name, {}))
        walk_seconds += time.perf_counter() - started
        walk_cpu_seconds += time.thread_time() - started_cpu

    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        cols = batch.to_pydict()
        stream_col, rec_col, view_col, state_col, views_col = (
            cols["stream_id"], cols["rec_type"], cols["view"], cols["state"], cols["views"])
        message_rows = list(map(Message._make, zip(*(cols[name] for name in Message._fields))))
        ids = batch.column("stream_id")
        changes = pc.indices_nonzero(pc.not_equal(ids.slice(1), ids.slice(0, n - 1))).to_pylist()
        starts = [0, *(i + 1 for i in changes), n]  # where each stream's rows begin in this batch
        for start, end in zip(starts, starts[1:]):
            if stream_col[start] != stream_id:
                if stream_id is not None:
                    flush_stream()
                    if len(out.records) >= _FLUSH_EVERY:
                        yield _output_batch(out.records)
                        out.records.clear()
                        gc.collect(1)
                stream_id, states, pending, new, new_views = stream_col[start], {}, {}, [], []
            i = start
            while i < end and rec_col[i] != NEW:  # a stream's state and pending rows sort first
                if rec_col[i] == STATE:
                    states[view_col[i]] = state_col[i]
                else:
                    pending.setdefault(view_col[i], []).append(message_rows[i])
                i += 1
            new.extend(message_rows[i:end])
            new_views.extend(views_col[i:end])
    if stream_id is not None:
        flush_stream()
    for (view_name, entry_idx, name), n in out.counts.items():
        out.emit("count", view_name, "", entry_idx, name, n)
    out.emit("metric", "", "", 0, "walk_us", int(walk_seconds * 1e6))
    # CPU time too: on a busy machine the JVM takes cores from the walk, which inflates its wall time
    out.emit("metric", "", "", 0, "walk_cpu_us", int(walk_cpu_seconds * 1e6))
    out.emit("metric", "", "", 0, FATAL_METRIC, out.fatal)
    for view_name, tables in aggregates.items():
        for table_name, sums in tables.items():
            if sums:
                key_cols = views[view_name].table(table_name).primary_key
                rows = [{**dict(zip(key_cols, k if len(key_cols) > 1 else (k,))), **v} for k, v in sums.items()]
                out.emit("aggregate", view_name, "", 0, table_name, rows)
    if out.records:
        yield _output_batch(out.records)


def archived_messages(spark: SparkSession, files: list[str]) -> DataFrame:
    """The pass's archived messages. Executors read the Parquet files themselves where they can
    reach them (a local session, or INORDER_ARCHIVE_SHARED=1); otherwise the driver reads them and
    ships them with the query, so a remote cluster or Spark Connect server needs no access to the archive."""
    if archive_shared(spark):
        return spark.read.parquet(*files)
    table = pa.concat_tables([pq.read_table(f, columns=MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA) for f in files])
    return spark.createDataFrame(table)


@dataclass
class PassResult:
    """A pass's output: written as Parquet by the executors where the driver can read their files (a
    local session: nothing as large as the output passes through the JVM's heap or the driver), or
    collected through the driver (a remote cluster)."""

    table: pa.Table | None = None
    folder: Path | None = None  # holds at least one Parquet file when set

    def summary(self) -> pa.Table:
        """The rows ProjectionStats counts (counts, metrics, watermarks), without their data."""
        kinds = ["count", "metric", "watermark"]
        columns = ["kind", "view", "name", "n"]
        if self.folder is None:
            return self.table.filter(pc.is_in(self.table["kind"], pa.array(kinds))).select(columns)
        return pq.read_table(self.folder, columns=columns, filters=[("kind", "in", kinds)])

    def fatal(self, summary: pa.Table) -> list[HandlerBug]:
        """Handler bugs of views with on_bug="fail" (the pass must not be committed); the pass's data is
        read only when its `summary` counts some."""
        metrics = summary.filter(pc.and_(pc.equal(summary["kind"], "metric"), pc.equal(summary["name"], FATAL_METRIC)))
        if not pc.sum(metrics["n"]).as_py():
            return []
        columns = ["view", "stream_id", "seq", "entry_idx", "data"]
        if self.folder is None:
            table = self.table.filter(pc.equal(self.table["kind"], "fatal")).select(columns)
        else:
            table = pq.read_table(self.folder, columns=columns, filters=[("kind", "=", "fatal")])
        return [HandlerBug(row["view"], row["stream_id"], row["seq"], row["entry_idx"], json.loads(row["data"])["reason"])
                for row in table.to_pylist()]


def pass_folder(home: Home, layout: Layout = LIVE) -> Path:
    """Scratch space of the pass in progress (inputs and output); removed after its commit. A rebuild's
    passes have their own, since runs go on beside it."""
    return home.root / "scratch" / layout.scratch


def run_pass(spark: Callable[[], SparkSession], store: Store, home: Home, views: list[View], plan: PassPlan,
             first_seq: int, layout: Layout = LIVE, let_writers_in: bool = False) -> PassResult:
    """Order and apply one pass in Spark (`spark()` gives the session); returns the pass output for
    `commit_pass`. The DuckDB file is held only while the pass's inputs are loaded: readers can open it
    during the Spark work. A pass with no message and no buffer to walk (a tick with no timer due)
    needs no Spark at all. With `let_writers_in` (a rebuild's replay, which reads and writes only its
    shadow), the writer lock is let go too, so runs ingest and project meanwhile."""
    state_rows, files = load_inputs(store, home, views, plan, layout)
    if not state_rows.num_rows and not files:
        return PassResult(table=OUTPUT_SCHEMA.empty_table())
    with store.released(writer=let_writers_in):
        session = spark()
        try:
            return _order_and_apply_in_spark(session, home, views, plan, first_seq, state_rows, files,
                                             pass_folder(home, layout))
        finally:
            mark_used(session)


def _order_and_apply_in_spark(spark: SparkSession, home: Home, views: list[View], plan: PassPlan, first_seq: int,
                              state_rows: pa.Table, files: list[str], scratch: Path) -> PassResult:
    in_pass = [v for v in views if v.name in plan.by_view]
    ship_code(spark)  # remote executors run this process's handlers (no-op for local sessions)
    local = is_local(spark)
    shutil.rmtree(scratch, ignore_errors=True)  # what a crashed pass left
    frames = []
    if state_rows.num_rows and local:  # a file, so the state never sits in the JVM's heap as a local relation
        scratch.mkdir(parents=True)
        pq.write_table(state_rows, scratch / "state.parquet")
        frames.append(spark.read.parquet(str(scratch / "state.parquet")))
    elif state_rows.num_rows:
        frames.append(spark.createDataFrame(state_rows))
    if files:
        messages = archived_messages(spark, files)
        selected = select_views(spark, messages, plan.view_entries, in_pass)
        frames.append(selected.selectExpr(*[
            "CAST(2 AS INT) AS rec_type" if f.name == "rec_type" else
            f"CAST(NULL AS STRING) AS {f.name}" if f.name in ("view", "state") else f.name for f in INPUT_SCHEMA]))
    if not frames:
        return PassResult(table=OUTPUT_SCHEMA.empty_table())
    combined = functools.reduce(lambda a, b: a.unionByName(b), frames)
    partition = functools.partial(order_and_apply_partition, views={v.name: v for v in in_pass},
                                  entries=plan.by_view, first_seq=first_seq)
    result = (combined.repartition(shuffle_partitions(spark), "stream_id")
              .sortWithinPartitions("stream_id", "rec_type", "view", "entry_idx", "line")
              .mapInArrow(partition, _OUTPUT_SPARK_SCHEMA))
    if not local:
        return PassResult(table=result.toArrow())
    output = scratch / "output"
    result.write.mode("overwrite").parquet(str(output))
    if not any(output.glob("*.parquet")):
        return PassResult(table=OUTPUT_SCHEMA.empty_table())
    return PassResult(folder=output)
