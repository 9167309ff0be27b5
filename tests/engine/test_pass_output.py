"""The pass output as the executors write it: one Parquet file per Spark partition, written by the
partition's own Python worker, with only the counts and metrics handed back to Spark (docs/STORE.md,
"The pass"). Nothing of it may be lost, doubled, or left half-written by a failed task attempt."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engine import output, spark_pass
from pipelines.message import Message
from pipelines.records import WatermarkRecord
from pipelines.engine.pass_data import (SUMMARY_COLUMNS, Metric, PassOutput, PendingRecord, output_batches,
                                 output_schema)
from pipelines.registry import load_views
from pipelines.facade import run
from tests.harness import assert_same_store, fresh_home, read_store
from demos.bank import GeneratorConfig, generate

VIEWS = load_views("views")
SCHEMA = output_schema(VIEWS)


def partition_batches(streams: int) -> list[pa.RecordBatch]:
    """What a partition's walk yields: watermark and pending records, then its counts and metrics."""
    out = PassOutput()
    message = Message(2, 1, 1, "b1", "Deposited", '{"amount": 1}', None, None, "account")
    for i in range(streams):
        out.watermarks.append(WatermarkRecord("accounts", f"s-{i}", 1, "account", 1, 2, 10, False, 1, 0))
        out.count("accounts", 1, "selected", 2)
    out.pending.append(PendingRecord("accounts", "s-0", message))
    return list(output_batches(out, SCHEMA, metrics=[Metric("walk_us", 5), Metric("walked", streams, "accounts")],
                               with_counts=True))


def test_a_partition_writes_every_record_to_its_file_and_hands_back_only_its_summary(tmp_path):
    summary = pa.Table.from_batches(list(output.write_partition_output(
        iter(partition_batches(3)), tmp_path, SCHEMA, partition=7, attempt=0)))
    assert [p.name for p in tmp_path.iterdir()] == ["part-00007.parquet"]
    written = pq.read_table(tmp_path / "part-00007.parquet")
    assert written.schema == SCHEMA
    assert sorted(written["kind"].to_pylist()) == sorted(
        ["watermark"] * 3 + ["pending", "count", "metric", "metric"])
    assert summary.column_names == SUMMARY_COLUMNS
    assert sorted(summary.to_pylist(), key=repr) == sorted([
        {"kind": "count", "view": "accounts", "name": "selected", "n": 6},
        {"kind": "metric", "view": None, "name": "walk_us", "n": 5},
        {"kind": "metric", "view": "accounts", "name": "walked", "n": 3}], key=repr)


def test_a_failed_attempt_leaves_no_file_and_the_next_attempt_writes_it_whole(tmp_path):
    def failing():
        yield from partition_batches(3)[:1]
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        list(output.write_partition_output(failing(), tmp_path, SCHEMA, partition=2, attempt=0))
    assert list(tmp_path.iterdir()) == []
    list(output.write_partition_output(iter(partition_batches(4)), tmp_path, SCHEMA, partition=2, attempt=1))
    assert [p.name for p in tmp_path.iterdir()] == ["part-00002.parquet"]
    assert pq.read_table(tmp_path / "part-00002.parquet")["kind"].to_pylist().count("watermark") == 4


def test_output_written_by_the_workers_and_output_collected_by_the_driver_make_the_same_store(
        spark, tmp_path, monkeypatch):
    """The local (and shared-location) path against the path of a cluster without a shared location, on the
    bank demo's disorder, duplicates, gaps and poison, batch by batch: every table equal, row for row."""
    landing = tmp_path / "batches"
    paths = generate(landing, GeneratorConfig(events=1500, streams=40, batches=4, seed=11))
    stores = {}
    for shared in (True, False):
        monkeypatch.setattr(spark_pass, "files_shared", lambda spark, scratch_set, shared=shared: shared)
        home = fresh_home(tmp_path, f"shared-{shared}")
        for i, path in enumerate(paths):
            (home.landing / path.name).write_bytes(path.read_bytes())
            report = run(spark, home, VIEWS, now=datetime(2026, 11, 2, tzinfo=timezone.utc) + timedelta(hours=i))
            assert report.projection.streams_touched, "every batch walks streams"
        stores[shared] = read_store(home, VIEWS)
    assert sum(len(rows) for rows in stores[True].values()) > 1000
    assert_same_store(stores[True], stores[False])


def test_the_walk_gets_empty_lists_where_its_input_has_none(spark):
    """NULL lists are slow to cross into Python (Spark's Arrow writer): the walk's input has empty ones
    instead, and every other value as it was."""
    frame = spark.createDataFrame(
        [("a", None, [1, 2], None), ("b", [{"x": 1}], None, "t")],
        "stream_id string, skipped array<struct<x:bigint>>, seqs array<bigint>, name string")
    rows = spark_pass._no_null_lists(frame).orderBy("stream_id").collect()
    assert [r.asDict(recursive=True) for r in rows] == [
        {"stream_id": "a", "skipped": [], "seqs": [1, 2], "name": None},
        {"stream_id": "b", "skipped": [{"x": 1}], "seqs": [], "name": "t"}]
    assert [(f.name, f.dataType) for f in spark_pass._no_null_lists(frame).schema] == [
        (f.name, f.dataType) for f in frame.schema]


def test_a_pass_read_takes_the_schema_spark_inferred_for_the_same_footer_and_infers_again_for_another(
        spark, tmp_path):
    """read_parquet: Spark's schema inference is a job of its own; a file whose footer the session read
    before is read with the schema Spark gave it then (no job), and another footer is inferred afresh."""
    def write(name: str, times: pa.Array) -> str:
        path = tmp_path / name
        pq.write_table(pa.table({"stream_id": ["a"], "at": times, "n": [1]}), path)
        return str(path)

    moment = datetime(2026, 11, 29, tzinfo=timezone.utc)
    utc = [write(f"utc-{i}.parquet", pa.array([moment], pa.timestamp("us", tz="UTC"))) for i in range(2)]
    naive = write("naive.parquet", pa.array([moment.replace(tzinfo=None)], pa.timestamp("us")))
    tracker = spark.sparkContext.statusTracker()

    def jobs_of(path: str, group: str):
        spark.sparkContext.setJobGroup(group, group)
        try:
            frame = spark_pass.read_parquet(spark, [path])
            frame.schema  # noqa: B018 - a schema Spark must infer is inferred here
        finally:
            spark.sparkContext.setJobGroup("", "")
        return frame, len(tracker.getJobIdsForGroup(group))

    first, first_jobs = jobs_of(utc[0], "first")
    again, again_jobs = jobs_of(utc[1], "again")
    other, other_jobs = jobs_of(naive, "other")
    assert first_jobs >= 1 and again_jobs == 0 and other_jobs >= 1
    assert again.schema == first.schema == spark.read.parquet(utc[1]).schema
    assert other.schema == spark.read.parquet(naive).schema != first.schema
    assert again.collect()[0]["at"] == first.collect()[0]["at"]
