"""Runs a plan of cases in ONE process and ONE Spark session, so each comparison is side by side:

    python -m bench.worker PLAN.json RESULT.json

The runner (`python -m bench`) writes the plan and starts one worker per bulk size (so each size's
peak RSS is its own) or, with --quick, one worker for everything.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from bench import bulk, data, freshness, incremental, peer, prior_art, state_peer, tick
from bench.measure import RssSampler, timer
from pipelines.facade import run
from bench.data import BANK_VIEWS
from demos.bank import GeneratorConfig, generate


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def warm_up(spark, work: Path) -> float:
    """A tiny engine run and floor first, so the measured runs do not pay for JIT and worker start."""
    home = bulk.fresh_home(work / "warm")
    generate(home.landing, GeneratorConfig(400, 20, 2, **data.MIX))
    with timer() as t:
        run(spark, home, BANK_VIEWS, now=bulk.T0)
        bulk.spark_floor(spark, home.landing, work / "warm-floor")
    shutil.rmtree(home.root, ignore_errors=True)
    return t["s"]


def bank_run(spark, cache: Path, n: int, root: Path, spark_start_s: float, sampler: RssSampler) -> tuple[Path, dict]:
    """`inorder run` on the n-event bank input, in `root/home`: (the input folder, the engine's figures)."""
    inputs = data.bank_batches(cache, n)
    return inputs, bulk.engine_run(spark, root / "home", inputs, spark_start_s, sampler)


def size_task(spark, task: dict, work: Path, cache: Path, spark_start_s: float, sampler: RssSampler) -> dict:
    n = task["events"]
    root = work / f"size-{n}"
    say(f"bulk {n:,} events: inorder run (3 views)")
    inputs, engine = bank_run(spark, cache, n, root, spark_start_s, sampler)
    say(f"  {engine['wall_s']:.1f} s, {engine['events_per_s']:,.0f} events/s; Spark floor on the same files")
    floor = bulk.spark_floor(spark, inputs, root / "floor")
    say(f"  floor {floor['wall_s']:.1f} s: bulk / floor = {engine['wall_s'] / floor['wall_s']:.2f}")
    result = {"events": n, "bulk": engine, "floor": {**floor, "ratio": engine["wall_s"] / floor["wall_s"]}}
    home = data.home(root / "home")
    if task.get("incremental"):
        batches = [data.incremental_batch(cache, task["incremental"], r) for r in range(1, data.INCREMENTAL_ROUNDS + 1)]
        say(f"incremental: {task['incremental']:,} events onto an empty store, then onto {n:,} "
            f"({len(batches)} rounds)")
        result["incremental"] = inc = incremental.rounds(spark, root, home, batches, n, sampler)
        say(f"  median empty {inc['empty']['latency_s']:.2f} s, onto {n:,} {inc['full']['latency_s']:.2f} s "
            f"(samples {inc['empty']['samples_s']}, {inc['full']['samples_s']})")
    if task.get("peer"):
        say("ordering core: inorder (handler-less view) vs DuckDB SQL, same archive")
        result["peer"] = peer.compare(home, root / "peer", spark, sampler)
        p = result["peer"]
        say(f"  inorder {p['inorder']['wall_s']:.1f} s, DuckDB {p['duckdb']['wall_s']:.1f} s, "
            f"counts match: {p['counts_match']}")
    if task.get("state_peer") and task.get("peer"):
        say("ordering core: the Spark peer (transformWithStateInPandas, RocksDB state), same archive")
        # inorder's side is the projection case 3 just measured: the view is committed on this home now
        result["state_peer"] = spark_peer = state_peer.run(spark, home, root / "state-peer", sampler,
                                                           inorder=result["peer"]["inorder"])
        say(f"  inorder {spark_peer['inorder']['wall_s']:.1f} s, Spark peer {spark_peer['peer']['wall_s']:.1f} s "
            f"({spark_peer['peer']['micro_batches']} micro-batches), equal: {spark_peer['equal']}")
    shutil.rmtree(root, ignore_errors=True)
    return result


def prior_art_task(spark, task: dict, work: Path, cache: Path, spark_start_s: float, sampler: RssSampler) -> dict:
    n = task["events"]
    root = work / f"prior-{n}"
    say(f"prior art: inorder run on the {n:,}-event sample, then the per-message method")
    _, engine = bank_run(spark, cache, n, root, spark_start_s, sampler)
    result = prior_art.per_message(data.home(root / "home"), root / "prior.duckdb", BANK_VIEWS)
    check = prior_art.check_against(engine["views"], result["views"])
    say(f"  inorder {engine['events_per_s']:,.0f} events/s, per-message {result['events_per_s']:,.0f} events/s, "
        f"counts match: {all(c['match'] for c in check.values())}")
    shutil.rmtree(root, ignore_errors=True)
    return {"sample_events": n, "inorder_on_sample": {k: engine[k] for k in ("events", "wall_s", "events_per_s")},
            "prior_art": result, "check": check, "ratio_on_sample": engine["events_per_s"] / result["events_per_s"]}


def tick_task(spark, task: dict, work: Path, cache: Path, spark_start_s: float, sampler: RssSampler) -> dict:
    say(f"tick over {task['streams']:,} blocked streams (half time out)")
    result = tick.tick_case(spark, work / "tick", cache, task["streams"], sampler)
    say(f"  {result['latency_s']:.2f} s; timed out as expected: {result['timed_out_as_expected']}")
    shutil.rmtree(work / "tick", ignore_errors=True)
    return result


def freshness_task(spark, task: dict, work: Path, cache: Path, spark_start_s: float, sampler: RssSampler) -> dict:
    result = freshness.freshness_case(spark, work, cache, task["store_events"], task["batch_events"], task["rounds"],
                                      say=say)
    for key, label, _, median in freshness.PATHS:
        if key in result:
            say(f"  {label}: median {result[key][median]:.2f} s {result[key]['parts_median']}")
    return result


TASKS = {"size": size_task, "prior_art": prior_art_task, "tick": tick_task, "freshness": freshness_task}


def main(plan_path: str, result_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    work, cache = Path(plan["work"]), Path(plan["cache"])
    out: dict = {"tasks": []}
    with RssSampler() as sampler:
        with timer() as t:
            spark = data.session()
        out["spark_start_s"] = t["s"]
        say(f"Spark session started in {t['s']:.1f} s")
        out["warm_up_s"] = warm_up(spark, work)
        for task in plan["tasks"]:
            result = TASKS[task["kind"]](spark, task, work, cache, out["spark_start_s"], sampler)
            out["tasks"].append({"kind": task["kind"], **result})
        spark.stop()
    out["peak_rss_bytes"] = sampler.overall
    out["peaks"] = sampler.peaks
    Path(result_path).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:3])
