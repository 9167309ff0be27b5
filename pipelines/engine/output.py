"""A pass's output as the executors write it and the driver reads it: each Spark partition's Parquet
file (`write_partition_output`), its summary records (`summary_of`), and `PassResult`, what the commit
reads (docs/STORE.md, "The pass")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.engine.pass_data import SUMMARY_COLUMNS, SUMMARY_KINDS, HandlerBug, OutputKind

FATAL_METRIC = "fatal"  # how many "fatal" records a partition wrote (read with the summary, not the data)
WALKED_METRIC = "walked"  # how many streams of a view a partition walked (one watermark record each)
INPUT_ROWS_METRIC = "input_rows"  # how many state and buffer rows (not new messages) a partition read


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

    def metric_total(self, name: str) -> int:
        """A metric summed over the pass's partitions (0 when none reported it)."""
        rows = self.summary.filter(pc.and_(pc.equal(self.summary["kind"], OutputKind.METRIC.value),
                                           pc.equal(self.summary["name"], name)))
        return pc.sum(rows["n"]).as_py() or 0

    def fatal(self) -> list[HandlerBug]:
        """Handler bugs of views with on_bug="fail" (the pass must not be committed); the pass's data is
        read only when its summary counts some."""
        if not self.metric_total(FATAL_METRIC):
            return []
        columns = ["view", "stream_id", "seq", "entry_idx", "reason"]
        if self.folder is None:
            table = self.table.filter(pc.equal(self.table["kind"], OutputKind.FATAL.value)).select(columns)
        else:
            table = pq.read_table(self.folder, columns=columns, filters=[("kind", "=", OutputKind.FATAL.value)])
        return [HandlerBug(**row) for row in table.to_pylist()]
