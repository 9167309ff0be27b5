"""Soak: many small batches in a row through one long-lived engine process (one Spark session),
with disorder, duplicates, conflicts, gaps, poison, malformed lines and ticks at random logical
times. Conservation must hold after every batch, the store must equal the reference model's at
the end, and memory must not grow with the number of batches.

    python -m tests.soak [--batches 500] [--events-per-batch 60] [--seed 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple
from pathlib import Path

from scripts.process_tree import rss_bytes, tree_rss
from tests.harness import assert_conserved, assert_same_store, read_store, run_entries
from tests.reference_model import Entry, run_model
from tests.domains import BANK_VIEWS
from demos.bank import GeneratorConfig, generate

T0 = 1_790_000_000.0
TICK_STEPS = (1, 30, 120, 599, 600, 601, 900, 3600)  # seconds; the bank views time gaps out at 600 s


def soak_entries(batches: int, events_per_batch: int, seed: int, staging: Path) -> list[Entry]:
    """Bank batches from the demo generator, with ticks at random logical times between them."""
    rng = random.Random(seed)
    generate(staging, GeneratorConfig(events=batches * events_per_batch, streams=max(1, batches * events_per_batch // 40),
                                      batches=batches, disorder=0.3, duplicates=0.05, gaps=0.01, poison=0.01,
                                      seed=seed))
    entries, t = [], T0
    for path in sorted(staging.glob("batch-*.jsonl")):
        entries.append(Entry("batch", path.stem, t, lines=path.read_text().splitlines()))
        t += rng.choice(TICK_STEPS)
        if rng.random() < 0.2:
            entries.append(Entry("tick", f"tick-{len(entries) + 1}", t))
            t += rng.choice(TICK_STEPS)
    return entries


class MemorySample(NamedTuple):
    """Memory after `entries` entries, in MB: the driver's resident set; the Spark JVM's heap in use right
    after a full collection (what it retains, not what it has reserved); and the resident sets of the
    driver, the JVM and its Python workers together (workers come and go with tasks, and the JVM's
    reserved heap grows towards its limit between collections: ±200 MB of noise over a 500-batch soak)."""

    entries: int
    driver: float
    jvm_retained: float
    total: float

    @property
    def retained(self) -> float:
        """What the engine holds on to: the driver, and the objects alive in the JVM."""
        return self.driver + self.jvm_retained


@dataclass
class SoakReport:
    batches: int = 0
    ticks: int = 0
    events: int = 0
    seconds: float = 0.0
    memory: list[MemorySample] = field(default_factory=list)
    model_equal: bool = False

    def trend(self, measure: str = "retained") -> tuple[float, float]:
        """Growth of one measure of MemorySample in MB per 100 entries over the second half (after warm-up),
        by least squares, and its peak."""
        values = [(s.entries, getattr(s, measure)) for s in self.memory]
        half = values[len(values) // 2:]
        if len(half) < 2:
            return 0.0, max((v for _, v in values), default=0.0)
        mean_x, mean_y = sum(x for x, _ in half) / len(half), sum(y for _, y in half) / len(half)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in half) / sum((x - mean_x) ** 2 for x, _ in half))
        return slope * 100, max(v for _, v in values)


def jvm_retained_mb(spark) -> float:
    """The JVM's heap in use after a full collection, in MB (0 for a Spark Connect session: no JVM here)."""
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None)
    if jvm is None:
        return 0.0
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) / 2**20


def memory_sample(spark, entries: int) -> MemorySample:
    gc.collect()  # what is retained, not what a collection would free
    driver = rss_bytes(os.getpid())
    total = tree_rss(os.getpid())
    return MemorySample(entries, round(driver / 2**20, 1), round(jvm_retained_mb(spark), 1), round(total / 2**20, 1))


# The memory bound of the 500-batch soak, on what the engine retains (driver RSS + the JVM's live heap):
# a leak of a few KB per message would pass it unseen, but not one that keeps what each batch touched
# (about 60 messages and their rows).
MAX_TREND_MB_PER_100 = 10.0


def soak(spark, home_root: Path, batches: int, events_per_batch: int, seed: int,
         progress=lambda message: None, sample_every: int = 10) -> SoakReport:
    from pipelines.store.database import Home

    shutil.rmtree(home_root, ignore_errors=True)
    entries = soak_entries(batches, events_per_batch, seed, home_root / "staging")
    home = Home(home_root / "home").ensure()
    report = SoakReport(batches=sum(e.kind == "batch" for e in entries), ticks=sum(e.kind == "tick" for e in entries),
                        events=sum(len(e.lines or ()) for e in entries))
    started = time.perf_counter()
    for i, entry in enumerate(entries, start=1):
        run_entries(spark, home, BANK_VIEWS, [entry], check_conservation=False)
        assert_conserved(home, BANK_VIEWS)  # after every batch and tick
        if i % sample_every == 0 or i == len(entries):
            sample = memory_sample(spark, i)
            report.memory.append(sample)
            progress(f"{i}/{len(entries)} entries, {time.perf_counter() - started:.0f}s, RSS driver {sample.driver:.0f} "
                     f"MB, JVM heap retained {sample.jvm_retained:.0f} MB, RSS with Spark {sample.total:.0f} MB")
    report.seconds = time.perf_counter() - started
    assert_same_store(read_store(home, BANK_VIEWS), run_model(entries, BANK_VIEWS))
    report.model_equal = True
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=500)
    p.add_argument("--events-per-batch", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=".inorder/soak")
    p.add_argument("--max-trend", type=float, default=MAX_TREND_MB_PER_100,
                   help="fail when RSS grows faster than this over the second half (MB per 100 entries)")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pipelines.spark.session import spark_session

    spark = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    out = Path(args.out).resolve()
    report = soak(spark, out, args.batches, args.events_per_batch, args.seed,
                  progress=lambda message: print(message, flush=True))
    slope, peak = report.trend()
    total_slope, total_peak = report.trend("total")
    first, last = report.memory[0], report.memory[-1]
    print(f"soak: {report.batches} batches + {report.ticks} ticks, {report.events} records, {report.seconds:.0f}s; "
          f"conservation held after every entry; store equals the reference model: {report.model_equal}")
    print(f"memory retained (driver RSS + JVM heap alive after a full GC): {first.retained:.0f} MB after "
          f"{first.entries} entries, {last.retained:.0f} MB after {last.entries}, peak {peak:.0f} MB; "
          f"second-half trend {slope:+.1f} MB per 100 entries (driver alone {report.trend('driver')[0]:+.1f})")
    print(f"RSS of driver + JVM + Python workers: {first.total:.0f} MB after {first.entries} entries, {last.total:.0f} MB "
          f"after {last.entries}, peak {total_peak:.0f} MB; second-half trend {total_slope:+.1f} MB per 100 entries")
    (out / "results.json").write_text(json.dumps({**asdict(report), "memory": [s._asdict() for s in report.memory],
                                                  "trend_mb_per_100": slope, "peak_mb": peak,
                                                  "total_trend_mb_per_100": total_slope, "total_peak_mb": total_peak}))
    spark.stop()
    if slope > args.max_trend:
        print(f"soak: FAILED: retained memory grows {slope:+.1f} MB per 100 entries over the second half, "
              f"over the limit of {args.max_trend:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
