"""One projection pass in Spark: the driver loads the state of the streams the pass touches
(pipelines/engine/inputs.py), Spark brings each (view, stream)'s state, buffer and new messages together
in one sorted partition, and the executors walk them there (pipelines/engine/executor.py), writing their
output where the commit reads it (pipelines/engine/output.py) or shipping it back through the driver
within a bound. The driver then commits everything in one read-store transaction (pipelines/engine/commit.py).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.engine.executor import order_and_apply_partition
from pipelines.engine.inputs import PassInputs, load_inputs, pass_folder
from pipelines.engine.normalise import MESSAGE_SCHEMA
from pipelines.engine.output import INPUT_ROWS_METRIC, PassResult, write_partition_output
from pipelines.engine.pass_data import SUMMARY_COLUMNS, InputKind, output_schema
from pipelines.engine.planning import PassPlan
from pipelines.engine.routing import select_views
from pipelines.message import Message
from pipelines.spark.session import (archive_shared, files_shared, mark_used, pandas_notice_quiet, read_parquet,
                                    ship_code, shuffle_partitions)
from pipelines.store.database import Home, Store
from pipelines.store.layout import LIVE, Layout
from pipelines.view import View

def _mapped(frame: DataFrame, function: Callable, schema: pa.Schema) -> pa.Table:
    """`function` over `frame`'s partitions as Arrow batches, collected; without pyspark's pandas notice,
    which every `mapInArrow` raises (inorder exchanges Arrow, not pandas)."""
    with pandas_notice_quiet():
        return frame.mapInArrow(function, from_arrow_schema(schema)).toArrow()


def _no_null_lists(frame: DataFrame) -> DataFrame:
    """The frame with every NULL list (a row's skipped ranges or keyed rows: none, another view's, or a
    message's) as an empty list, which the walk reads the same. Spark's Arrow writer takes microseconds
    per NULL list value (about 10 µs, against well under 1 µs for an empty one): with a NULL in every row
    but one view's, that was most of the JVM's work in a wide pass."""
    return frame.select([F.coalesce(F.col(f"`{f.name}`"), F.array().cast(f.dataType)).alias(f.name)
                         if isinstance(f.dataType, ArrayType) else F.col(f"`{f.name}`") for f in frame.schema.fields])


def archived_messages(spark: SparkSession, files: list[str], home: Home) -> DataFrame:
    """The pass's archived messages. Executors read the Parquet files themselves where they can
    reach them (a local session, or INORDER_ARCHIVE_SHARED=1); otherwise the driver reads them and
    ships them with the query, so a remote cluster or Spark Connect server needs no access to the archive."""
    if archive_shared(spark, home.settings):
        return read_parquet(spark, files)
    table = pa.concat_tables([pq.read_table(f, columns=MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA) for f in files])
    return spark.createDataFrame(table)


class InputsMismatch(RuntimeError):
    """What a pass's walk read of its state is not what the planner wrote: the pass is not committed."""


def check_inputs_columns(read: list[str], inputs: PassInputs) -> None:
    """Refuse a pass whose state frame, as the Spark session resolved it, has other columns than the file
    the planner wrote (a stale schema would make the walk see no stored rows for a view)."""
    if list(read) != list(inputs.columns):
        missing = [c for c in inputs.columns if c not in read]
        raise InputsMismatch(
            f"the Spark session read the pass's state ({inputs.path.name}) with other columns than the planner "
            f"wrote ({', '.join(missing) or 'same names, other order'} differ): nothing was committed; "
            "run again, and report this with the session's master (a cache of the Spark session)")


def check_inputs_rows(result: PassResult, inputs: PassInputs | None) -> None:
    """Refuse a pass whose walk read another number of state and buffer rows than the planner wrote."""
    read, wrote = result.metric_total(INPUT_ROWS_METRIC), inputs.rows if inputs is not None else 0
    if read != wrote:
        raise InputsMismatch(
            f"the pass's walk read {read:,} state and buffer rows where the planner wrote {wrote:,}: nothing was "
            "committed; run again, and report this with the session's master")


class TooMuchToShip(RuntimeError):
    """A pass would ship more through the driver than its bound (no location the executors share)."""


def shipped_bytes(inputs: PassInputs | None, files: list[str]) -> int:
    """What a pass ships through the driver to executors that cannot read its files: its state and its
    archived messages, as their Parquet files weigh (its output, collected back, is of the same order)."""
    return (inputs.path.stat().st_size if inputs is not None else 0) + sum(Path(f).stat().st_size for f in files)


def check_shipped(size: int, limit: int) -> None:
    """Refuse, in one line and before Spark starts the pass, a pass too large to ship through the driver:
    on a cluster the state, the messages and the output would all cross the driver's memory."""
    if size > limit:
        raise TooMuchToShip(
            f"this pass would ship {size / 2**20:,.0f} MiB of state and messages through the driver "
            f"(INORDER_SHIP_LIMIT_MB={limit >> 20}): put the archive and the scratch folder on storage the "
            "executors mount at the same paths and set INORDER_ARCHIVE_SHARED=1 and INORDER_SCRATCH, or make "
            "passes smaller (INORDER_PASS_STREAMS, INORDER_PASS_RECORDS)")


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
            result = _order_and_apply_in_spark(session, home, views, plan, first_seq, inputs, files,
                                               pass_folder(home, layout))
            check_inputs_rows(result, inputs)
            return result
        finally:
            mark_used(session)


def _order_and_apply_in_spark(spark: SparkSession, home: Home, views: list[View], plan: PassPlan, first_seq: int,
                              inputs: PassInputs | None, files: list[str], scratch: Path) -> PassResult:
    in_pass = [v for v in views if v.name in plan.by_view]
    schema = output_schema(in_pass)
    ship_code(spark, home, views)  # remote executors run this process's handlers (no-op for local sessions)
    # executors that reach the driver's files (local, or INORDER_ARCHIVE_SHARED with INORDER_SCRATCH on the
    # same storage) read the state where DuckDB wrote it and write the output where the commit reads it;
    # others get both shipped through the driver, as Arrow, within the bound of `check_shipped`
    shared = files_shared(spark, home)
    if not shared:
        check_shipped(shipped_bytes(inputs, files), home.settings.ship_limit_mb << 20)
    frames = []
    if inputs is not None:
        state = read_parquet(spark, [str(inputs.path)]) if shared else spark.createDataFrame(pq.read_table(inputs.path))
        check_inputs_columns(state.columns, inputs)
        frames.append(state)
    if files:
        messages = archived_messages(spark, files, home)
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
        return PassResult.collected(_mapped(walked, walk, schema))
    output = scratch / "output"
    output.mkdir(parents=True, exist_ok=True)

    def walk_and_write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = TaskContext.get()
        return write_partition_output(walk(batches), output, schema, task.partitionId(), task.attemptNumber())

    summary_schema = pa.schema([schema.field(name) for name in SUMMARY_COLUMNS])
    summary = _mapped(walked, walk_and_write, summary_schema)
    if not any(output.glob("*.parquet")):
        return PassResult.collected(schema.empty_table())
    return PassResult(summary=summary.cast(summary_schema), folder=output)
