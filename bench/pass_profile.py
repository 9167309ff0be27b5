"""Where a wide pass's Spark phase goes: each Spark stage's duration and executor time (from Spark's REST
API) beside the walk's own clocks, for this checkout's engine.

    python bench/pass_profile.py .inorder/bench/inputs/wide-600000 /tmp/profile-home

INPUTS is a folder of bench/data.py's wide batches (`wide-1-store.jsonl`, `wide-2-pass.jsonl`; the
side-by-side bench caches them); HOME must not exist yet: the profile makes it and leaves it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from pipelines.registry import load_views
from pipelines.facade import run
from pipelines.spark.session import spark_session
from pipelines.store.database import Home

UI_PORT = 4077


def stages(app_id: str) -> dict[int, dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{UI_PORT}/api/v1/applications/{app_id}/stages") as answer:
        return {s["stageId"]: s for s in json.load(answer)}


def seconds(stage: dict) -> float | None:
    def moment(text: str) -> datetime:
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")

    if not stage.get("submissionTime") or not stage.get("completionTime"):
        return None
    return (moment(stage["completionTime"]) - moment(stage["submissionTime"])).total_seconds()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", type=Path)
    p.add_argument("home", type=Path)
    args = p.parse_args()
    if args.home.exists():
        raise SystemExit(f"{args.home} exists: give a new folder (the profile makes it)")
    home = Home.from_env(args.home).ensure()
    views = load_views("views")
    spark = spark_session(None, {"spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT)})
    try:
        shutil.copy(args.inputs / "wide-1-store.jsonl", home.landing)
        run(spark, home, views, now=datetime(2026, 11, 2, tzinfo=timezone.utc))
        app_id = spark.sparkContext.applicationId
        before = set(stages(app_id))
        shutil.copy(args.inputs / "wide-2-pass.jsonl", home.landing)
        started = time.perf_counter()
        projection = run(spark, home, views, now=datetime(2026, 11, 2, 0, 1, tzinfo=timezone.utc)).projection
        print(f"wide pass {time.perf_counter() - started:.1f} s: Spark {projection.spark_seconds:.1f} s, commit "
              f"{projection.commit_seconds:.1f} s; walk {projection.walk_seconds:.1f} s (CPU "
              f"{projection.walk_cpu_seconds:.1f} s), {projection.handler_calls:,} handler calls")
        for stage_id, stage in sorted(stages(app_id).items()):
            if stage_id in before:
                continue
            print(f"stage {stage_id}: {stage['numTasks']} tasks, {seconds(stage)} s, executor run "
                  f"{stage['executorRunTime'] / 1000:.1f} s (JVM CPU {stage['executorCpuTime'] / 1e9:.1f} s, GC {stage['jvmGcTime'] / 1000:.1f} s), "
                  f"shuffle write {stage['shuffleWriteBytes'] / 2**20:.0f} MiB, read "
                  f"{stage['shuffleReadBytes'] / 2**20:.0f} MiB, output {stage['outputBytes'] / 2**20:.0f} MiB")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
