"""Cases 1, 2 and 7: the whole engine on N bank events (ingest → order → apply → commit, all three
views) and, in the same Spark session, the bare Spark floor on the same files."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from bench import data
from bench.data import jsonl_files, land
from bench.measure import RssSampler, timer
from pipelines.facade import run
from pipelines.spark.session import shuffle_partitions
from pipelines.observe.status import read_status
from pipelines.store.database import Home, Store
from bench.data import BANK_VIEWS

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
JSON_SCHEMA = "stream_id string, seq long, type string, payload string, occurred_at string, event_id string"


def fresh_home(root: Path) -> Home:
    shutil.rmtree(root, ignore_errors=True)
    return data.home(root).ensure()


def engine_run(spark: SparkSession, home_root: Path, inputs: Path, spark_start_s: float,
               sampler: RssSampler) -> dict:
    """`inorder run` (pipelines.facade.run, the CLI's call) on the batches in `inputs`, at logical time T0."""
    home = fresh_home(home_root)
    land(jsonl_files(inputs), home.landing)
    with sampler.phase("bulk"):
        report = run(spark, home, BANK_VIEWS, now=T0)
    stats = report.projection
    cores = spark.sparkContext.defaultParallelism
    events = sum(r.records for r in report.ingested)
    with Store.open_read_only(home) as store:
        status = read_status(store.con, BANK_VIEWS)
    return {
        "events": events, "wall_s": report.seconds, "spark_start_s": spark_start_s,
        "wall_with_start_s": report.seconds + spark_start_s,
        "ingest_s": report.ingest_seconds, "spark_s": stats.spark_seconds, "commit_s": stats.commit_seconds,
        "passes": stats.passes, "events_per_s": events / report.seconds,
        "events_per_s_with_start": events / (report.seconds + spark_start_s),
        "pairs_selected": stats.selected, "handler_calls": stats.handler_calls, "walk_core_s": stats.walk_seconds,
        "walk_cpu_s": stats.walk_cpu_seconds, "cores": cores,
        # walk times are summed over executor cores: calls per core-second, times the cores. The
        # headline uses the walks' CPU time (what the walk costs); the wall-time figure also counts
        # the moments the JVM's shuffle and sort took the core away from it.
        "handler_calls_per_s": _per_s(cores * stats.handler_calls, stats.walk_cpu_seconds),
        "handler_calls_per_s_walk_wall": _per_s(cores * stats.handler_calls, stats.walk_seconds),
        "handler_calls_per_core_s": _per_s(stats.handler_calls, stats.walk_cpu_seconds),
        "handler_calls_per_wall_s": stats.handler_calls / report.seconds,
        "peak_rss_bytes": sampler.peaks.get("bulk", 0),
        "views": {s.view: {"selected": s.selected, **s.outcomes, "pending": s.pending,
                           "gaps_skipped": s.gaps_skipped, "conserved": s.conserved} for s in status.views},
    }


def _per_s(count: float, seconds: float) -> float | None:
    return count / seconds if seconds else None


def spark_floor(spark: SparkSession, inputs: Path, out: Path) -> dict:
    """Bare Spark on the same files: read → dedupe (stream, seq) → repartition by stream →
    sort within partitions → write Parquet."""
    shutil.rmtree(out, ignore_errors=True)
    with timer() as t:
        (spark.read.schema(JSON_SCHEMA).json([str(f) for f in jsonl_files(inputs)])
         .dropDuplicates(["stream_id", "seq"])
         .repartition(shuffle_partitions(spark), "stream_id")
         .sortWithinPartitions("stream_id", "seq")
         .write.mode("overwrite").parquet(str(out)))
    rows = spark.read.parquet(str(out)).count()
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": t["s"], "rows_written": rows}
