"""Case 6: a tick over a store with S blocked streams, half of which time out at that tick.

Every stream has seq 1 and 3 (2 never arrives), so each is blocked at seq 2 in every view. The
first half arrives at T0, the second half at T0 + gap_timeout / 2; the tick at T0 + gap_timeout
skips the first half's gaps (waited = gap_timeout) and leaves the second half waiting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from bench.bulk import T0, fresh_home
from bench.data import blocked_batches, land
from bench.measure import RssSampler
from pipelines.facade import run
from bench.data import BANK_VIEWS


def tick_case(spark: SparkSession, work: Path, cache: Path, streams: int, sampler: RssSampler) -> dict:
    timeout = max(v.gap_timeout for v in BANK_VIEWS)
    assert all(v.gap_timeout == timeout for v in BANK_VIEWS), "the tick case assumes one gap_timeout"
    home = fresh_home(work)
    a, b = blocked_batches(cache, streams)
    land([a], home.landing)
    run(spark, home, BANK_VIEWS, now=T0)
    land([b], home.landing)
    run(spark, home, BANK_VIEWS, now=T0 + timedelta(seconds=timeout / 2))
    with sampler.phase("tick"):
        report = run(spark, home, BANK_VIEWS, now=T0 + timedelta(seconds=timeout))
    assert report.plan.tick, "the last run should have been a tick"
    stats = report.projection
    skipped = {v: c.get("gaps_skipped", 0) for v, c in stats.by_view.items()}
    pairs = streams * len(BANK_VIEWS)
    return {"blocked_streams": streams, "blocked_pairs": pairs, "latency_s": report.seconds,
            "spark_s": stats.spark_seconds, "commit_s": stats.commit_seconds,
            "gaps_skipped": skipped, "timed_out_as_expected": all(n == streams // 2 for n in skipped.values())
            and len(skipped) == len(BANK_VIEWS),
            "blocked_pairs_per_s": pairs / report.seconds}
