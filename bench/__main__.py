"""The benchmark runner.

    python -m bench            # the full suite: 1M, 2M, 5M, 10M events (~40 min on 2 cores)
    python -m bench --quick    # every case at a few thousand events (about a minute or two)
    python -m bench --sizes 1000000,10000000

Generates the inputs first (cached under --work), then runs the cases in worker processes
(`bench/worker.py`; one per bulk size, so each size's peak RSS is its own, unless --quick), prints
the table and writes bench/results/<timestamp>.json, latest.json and <timestamp>.png (+ latest.png).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import data, report

ROOT = Path(__file__).resolve().parents[1]
FULL = {"sizes": [1_000_000, 2_000_000, 5_000_000, 10_000_000], "incremental": 10_000, "tick": 100_000,
        "prior": 50_000, "freshness": {"store_events": 1_000_000, "batch_events": 10_000, "rounds": 5}}
QUICK = {"sizes": [1_000, 2_000, 4_000], "incremental": 200, "tick": 500, "prior": 500,
         "freshness": {"store_events": 2_000, "batch_events": 200, "rounds": 2}}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, one worker process (CI runs this)")
    p.add_argument("--sizes", help="comma-separated event counts for the bulk/scaling cases")
    p.add_argument("--incremental-events", type=int, help="events in the incremental batch")
    p.add_argument("--tick-streams", type=int, help="blocked streams in the tick case")
    p.add_argument("--prior-events", type=int, help="events in the prior-art sample")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="one worker process per bulk size (default: yes, unless --quick)")
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"), help="inputs cache and scratch stores")
    p.add_argument("--results", default=str(ROOT / "bench" / "results"))
    return p.parse_args(argv)


def plan(args: argparse.Namespace) -> list[list[dict]]:
    """The tasks of each worker process."""
    defaults = QUICK if args.quick else FULL
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",")}) if args.sizes else defaults["sizes"]
    inc = args.incremental_events or defaults["incremental"]
    ends = {sizes[0], sizes[-1]}  # bulk, the DuckDB peer and incremental run at the smallest and largest
    # the Spark peer takes about 12 min per million events on 2 cores (2 h at 10M): the suite runs it at the
    # smallest size; `python -m bench.state_peer --events N` runs it alone at any size
    size_tasks = [{"kind": "size", "events": n, "peer": n in ends, "state_peer": n == sizes[0],
                   "incremental": inc if n in ends else 0}
                  for n in sizes]
    other = [{"kind": "tick", "streams": args.tick_streams or defaults["tick"]},
             {"kind": "prior_art", "events": args.prior_events or defaults["prior"]}]
    fresh = [{"kind": "freshness", **defaults["freshness"]}]  # its own worker: the runs it times share no JVM
    isolate = (not args.quick) if args.isolate is None else args.isolate
    return [[t] for t in size_tasks] + [other, fresh] if isolate else [size_tasks + other + fresh]


def prepare(workers: list[list[dict]], cache: Path) -> None:
    for task in (t for w in workers for t in w):
        if task["kind"] in ("size", "prior_art"):
            data.bank_batches(cache, task["events"])
        for round_no in range(1, data.INCREMENTAL_ROUNDS + 1) if task.get("incremental") else ():
            data.incremental_batch(cache, task["incremental"], round_no)
        if task["kind"] == "tick":
            data.blocked_batches(cache, task["streams"])
        if task["kind"] == "freshness":
            data.bank_batches(cache, task["store_events"])
            for round_no in range(1, task["rounds"] + 2):  # one more warms the Dagster path up
                data.incremental_batch(cache, task["batch_events"], round_no)


def machine() -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cores": os.cpu_count(), "memory_bytes": mem, "load_average_at_start": load,
            "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work = Path(args.work)
    cache, scratch = work / "inputs", work / "scratch"
    workers = plan(args)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    results: dict = {"started": stamp, "mode": "quick" if args.quick else "full", "machine": machine(),
                     "plan": workers, "workers": []}
    started = time.perf_counter()
    print(f"[bench] generating inputs under {cache} (cached between runs)", flush=True)
    prepare(workers, cache)
    results["generate_s"] = time.perf_counter() - started
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for i, tasks in enumerate(workers, 1):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        plan_path, result_path = scratch.parent / f"plan-{i}.json", scratch.parent / f"result-{i}.json"
        plan_path.write_text(json.dumps({"work": str(scratch), "cache": str(cache), "tasks": tasks}))
        result_path.unlink(missing_ok=True)
        print(f"[bench] worker {i}/{len(workers)}: {', '.join(t['kind'] for t in tasks)}", flush=True)
        subprocess.run([sys.executable, "-m", "bench.worker", str(plan_path), str(result_path)], check=True,
                       cwd=ROOT, env=env)
        results["workers"].append(json.loads(result_path.read_text()))
    shutil.rmtree(scratch, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["cases"] = report.summarise(results)
    rows = report.table_rows(results["cases"])
    results["table"] = rows
    folder = Path(args.results)
    path, latest = report.write(results, folder, stamp)
    png = folder / f"{stamp}.png"
    report.chart(results["cases"], rows, png)
    shutil.copyfile(png, folder / "latest.png")
    print()
    print(report.format_table(rows))
    if args.quick:
        print("\n(quick run: sizes far too small for the targets to mean anything; it checks that the suite runs)")
    print(f"\n[bench] {results['seconds']:.0f} s; results {path} (and {latest.name}), chart {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
