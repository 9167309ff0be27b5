"""Throughput benchmark: `inorder run` on generated bank batches vs a bare Spark dedupe+sort+write.

    python scripts/bench.py --events 1000000

Both run side by side in one Spark session (warmed up first), so the ratio is what to read;
absolute times on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.run import run  # noqa: E402
from pipelines.spark import spark_session  # noqa: E402
from pipelines.status import open_read_only, read_status  # noqa: E402
from pipelines.store import Home  # noqa: E402
from views import ALL_VIEWS  # noqa: E402
from views.bank_generator import GeneratorConfig, generate  # noqa: E402

JSON_SCHEMA = "stream_id string, seq long, type string, payload string, occurred_at string, event_id string"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--home", default="/tmp/inorder-bench")
    args = p.parse_args()

    root = Path(args.home)
    shutil.rmtree(root, ignore_errors=True)
    home = Home(root).ensure()
    started = time.perf_counter()
    generate(home.landing, GeneratorConfig(args.events, args.streams, args.batches, 0.1, 0.02, 0.005, 0.005, 7))
    print(f"generate {args.events:,} events: {time.perf_counter() - started:.1f}s")

    started = time.perf_counter()
    spark = spark_session()
    print(f"spark session start: {time.perf_counter() - started:.1f}s")
    warm = Home(root / "warm").ensure()
    generate(warm.landing, GeneratorConfig(2_000, 20, 2))
    run(spark, warm, ALL_VIEWS, now=datetime(2026, 11, 2, tzinfo=timezone.utc))

    report = run(spark, home, ALL_VIEWS, now=datetime(2026, 11, 2, tzinfo=timezone.utc))
    records = sum(r.records for r in report.ingested)
    stats = report.projection
    cores = spark.sparkContext.defaultParallelism
    print(f"inorder run: {records:,} records in {report.seconds:.1f}s = {records / report.seconds:,.0f} records/s")
    print(f"  ingest (inspect + archive) {report.ingest_seconds:.1f}s, Spark passes {stats.spark_seconds:.1f}s, "
          f"commit {stats.commit_seconds:.1f}s; {stats.passes} passes")
    print(f"  {stats.selected:,} (message, view) pairs, {stats.handler_calls:,} handler calls")
    print(f"  walk+handlers: {stats.walk_seconds:.1f} core-seconds = "
          f"{stats.selected / stats.walk_seconds:,.0f} messages/s and "
          f"{stats.handler_calls / stats.walk_seconds:,.0f} handler calls/s per core; "
          f"x{cores} cores = {cores * stats.handler_calls / stats.walk_seconds:,.0f} handler calls/s")

    bare_out = root / "bare"
    started = time.perf_counter()
    (spark.read.schema(JSON_SCHEMA).json(str(home.landing))
     .dropDuplicates(["stream_id", "seq"]).sort("stream_id", "seq")
     .write.mode("overwrite").parquet(str(bare_out)))
    bare = time.perf_counter() - started
    print(f"bare Spark read+dedupe+sort+write: {bare:.1f}s = {records / bare:,.0f} records/s")
    print(f"ratio inorder run / bare Spark: {report.seconds / bare:.2f}")

    con = open_read_only(home)
    status = read_status(con, ALL_VIEWS)
    con.close()
    for s in status.views:
        print(f"  {s.view}: selected {s.selected:,} = outcomes {sum(s.outcomes.values()):,} + pending {s.pending:,} "
              f"-> conserved: {s.conserved}")


if __name__ == "__main__":
    main()
