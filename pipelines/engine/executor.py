"""The executor's side of a pass (the body of Spark's mapInArrow): a partition's rows, sorted by
(stream_id, rec_type, view, entry_idx, line), decoded and walked stream by stream
(pipelines/engine/order.py), the output written as Arrow batches (pipelines/engine/pass_data.py)."""

from __future__ import annotations

import gc
import time
from collections import Counter
from datetime import timezone
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines import faults
from pipelines.columns import codec_of
from pipelines.engine.order import PassEntry, PassOutput, StreamState, walk_stream
from pipelines.engine.output import FATAL_METRIC, INPUT_ROWS_METRIC, WALKED_METRIC
from pipelines.engine.pass_data import InputKind, Metric, output_batches, row_column
from pipelines.message import Message
from pipelines.view import Table, View

# the columns a message row is read by (an input's STATE columns are read only for STATE rows)
_MESSAGE_INPUT = ["stream_id", "rec_type", "view", "views", *Message._fields]
_FLUSH_EVERY = 20_000


def _decode_state(view: View, row: dict, first_seq: int) -> StreamState:
    """A STATE input row (its blocked_since in microseconds) as the walk starts from it."""
    state = StreamState.watermarked(  # a stream with rows but no watermark has every watermark field NULL
        row["stream_type"], row["last_seq"], row["blocked_at"], row["blocked_since"], row["parked"], row["attempts"],
        [(r["first_missing"], r["last_missing"]) for r in row["skipped"] or ()], first_seq)
    for table in view.tables:
        stored = row.get(row_column(view.name, table.name))
        if stored is None:
            continue
        utc = codec_of(table).utc_columns
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
    """mapInArrow body (see `PartitionWalk`), with Python's cyclic garbage collector paused.

    The walk allocates a few objects per message (messages, events, rows) and makes no reference
    cycles of its own, so the collector's generation scans, triggered by allocation counts, would
    only re-scan live messages; a young-generation collection at each output flush still frees any
    cycle a handler makes."""
    faults.arm()  # the crash sweep's points, read in each worker process (pipelines/faults.py)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from PartitionWalk(views, entries, first_seq).walk(batches, schema)
    finally:
        if enabled:
            gc.enable()


class PartitionWalk:
    """One partition's walk. Rows arrive sorted by (stream_id, rec_type, view, entry_idx, line), so a
    stream's state, walked copies and pending rows (one set per view) come first, then its new messages, each once:
    `read` gathers a stream's rows from the batches, `walk_stream` walks each of its views
    (pipelines/engine/order.py), `summary` gives the partition's metrics and aggregate partial sums."""

    def __init__(self, views: dict[str, View], entries: dict[str, list[PassEntry]], first_seq: int) -> None:
        self.views, self.entries, self.first_seq = views, entries, first_seq
        self.out = PassOutput()
        self.aggregates: dict[str, dict[str, dict]] = {}
        self.walked: Counter[str] = Counter()  # view -> streams walked (watermark records written)
        self.walk_seconds = self.walk_cpu_seconds = 0.0
        self.input_rows = 0  # state and buffer rows read, which the driver holds to what the planner wrote
        self.stream_id: str | None = None  # the stream being gathered, and its rows so far
        self.states: dict[str, dict] = {}
        self.pending: dict[str, list[Message]] = {}
        self.walked_copies: dict[str, list[Message]] = {}
        self.new: list[Message] = []
        self.new_views: list[str] = []

    def walk(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The partition's output batches: flushed every so many records, then the rest with the summary."""
        for batch in batches:
            if batch.num_rows:
                yield from self.read(batch, schema)
        if self.stream_id is not None:
            self.flush_stream()
        self.walked.update(w.view for w in self.out.watermarks)
        yield from output_batches(self.out, schema, self.aggregate_sums(), self.metrics(), with_counts=True)

    def read(self, batch: pa.RecordBatch, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Gather the batch's rows stream by stream, walking each stream once its rows are all read."""
        n = batch.num_rows
        self.input_rows += pc.sum(pc.not_equal(batch.column("rec_type"), int(InputKind.NEW))).as_py() or 0
        cols = batch.select(_MESSAGE_INPUT).to_pydict()
        state_rows = _state_rows(batch)
        stream_col, rec_col, view_col, views_col = cols["stream_id"], cols["rec_type"], cols["view"], cols["views"]
        message_rows = list(map(Message._make, zip(*(cols[name] for name in Message._fields))))
        ids = batch.column("stream_id")
        changes = pc.indices_nonzero(pc.not_equal(ids.slice(1), ids.slice(0, n - 1))).to_pylist()
        starts = [0, *(i + 1 for i in changes), n]  # where each stream's rows begin in this batch
        for start, end in zip(starts, starts[1:]):
            if stream_col[start] != self.stream_id:
                if self.stream_id is not None:
                    self.flush_stream()
                    if len(self.out) >= _FLUSH_EVERY:
                        yield from self.flush_output(schema)
                self.stream_id, self.states, self.pending, self.walked_copies = stream_col[start], {}, {}, {}
                self.new, self.new_views = [], []
            i = start
            while i < end and rec_col[i] != InputKind.NEW:  # a stream's state, walked and pending rows sort first
                if rec_col[i] == InputKind.STATE:
                    self.states[view_col[i]] = state_rows[i]
                else:
                    held = self.walked_copies if rec_col[i] == InputKind.WALKED else self.pending
                    held.setdefault(view_col[i], []).append(message_rows[i])
                i += 1
            self.new.extend(message_rows[i:end])
            self.new_views.extend(views_col[i:end])

    def flush_output(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The records so far as output batches (counts stay: they are summed to the end)."""
        self.walked.update(w.view for w in self.out.watermarks)
        yield from output_batches(self.out, schema)
        self.out.clear_records()
        gc.collect(1)

    def flush_stream(self) -> None:
        """Walk the gathered stream for each view it has state, a buffer or new messages for."""
        started, started_cpu = time.perf_counter(), time.thread_time()
        by_view = self._new_by_view()
        states, pending, views, first_seq = self.states, self.pending, self.views, self.first_seq
        for view_name in sorted(states.keys() | pending.keys() | by_view.keys()):
            view = views[view_name]
            stored = states.get(view_name)
            state = _decode_state(view, stored, first_seq) if stored else StreamState(last_seq=first_seq - 1)
            if view_name in self.walked_copies:
                state.walked = {m.seq: m for m in self.walked_copies[view_name]}
            walk_stream(view, self.stream_id, state, pending.get(view_name, []), by_view.get(view_name, []),
                        self.entries[view_name], self.out, self.aggregates.setdefault(view_name, {}))
        self.walk_seconds += time.perf_counter() - started
        self.walk_cpu_seconds += time.thread_time() - started_cpu

    def _new_by_view(self) -> dict[str, list[Message]]:
        """The stream's new messages by the views they are routed to."""
        new, new_views = self.new, self.new_views
        if not new:
            return {}
        if new_views.count(new_views[0]) == len(new_views):
            return dict.fromkeys(new_views[0].split(","), new)  # the usual case: one route
        by_view: dict[str, list[Message]] = {}
        for msg, route in zip(new, new_views):
            for view_name in route.split(","):
                by_view.setdefault(view_name, []).append(msg)
        return by_view

    def metrics(self) -> list[Metric]:
        # CPU time too: on a busy machine the JVM takes cores from the walk, which inflates its wall time
        return [Metric("walk_us", int(self.walk_seconds * 1e6)), Metric("walk_cpu_us", int(self.walk_cpu_seconds * 1e6)),
                Metric(FATAL_METRIC, len(self.out.fatal)), Metric(INPUT_ROWS_METRIC, self.input_rows),
                *(Metric(WALKED_METRIC, n, view) for view, n in self.walked.items())]

    def aggregate_sums(self) -> dict[str, dict[str, list[dict]]]:
        return {view_name: {table_name: _aggregate_partials(self.views[view_name].table(table_name), table_sums)
                            for table_name, table_sums in tables.items()}
                for view_name, tables in self.aggregates.items()}


def _aggregate_partials(table: Table, sums: dict) -> list[dict]:
    """A partition's partial sums of an aggregate table as rows: the key's columns and the summed ones."""
    key_cols = table.primary_key
    return [{**dict(zip(key_cols, k if len(key_cols) > 1 else (k,))), **v} for k, v in sums.items()]
