"""Side-by-side cases: the same inputs through two checkouts of the engine, in one run (issue 22).

    python -m bench.studies.side_by_side --quick                       # small sizes, local[*] (a minute or two)
    python -m bench.studies.side_by_side                               # 100k, 300k and 1M streams on local[*]
    python -m bench.studies.side_by_side --modes local,cluster         # the same on the loopback cluster too
    python -m bench.studies.side_by_side --new /work/wt-pass           # the "new" side from another checkout
    python -m bench.studies.side_by_side --old c8cd829 --new HEAD      # either side: a folder or a commit

Cases, on `wide-<i>` bank accounts (data.wide_batches):
- `wide_pass`: a store of S streams with seq 1–2 each, then one pass with seq 3 for every stream,
  touching S streams that all have state in the three bank views. Per phase (state load, Spark,
  commit) seconds; the peak RSS of the driver, its JVM, its Python workers (and the executors on
  a cluster). Then the two sides' stores, compared table by table.
- `store_growth` (local only): after it, seq 4 for the first --growth-streams streams: the same
  small pass onto stores of different sizes; the ratio of its driver seconds (the pass outside the
  Spark jobs) at the largest store to the smallest.

Each side runs bench/studies/side.py in a process of its own (PYTHONPATH = that checkout, the same Python),
old side first, then new, size by size. A side given as a commit gets a worktree in this run's
scratch folder, removed at the end, as is the rest of the scratch folder; nothing else is deleted.
Results: the table on stdout, and bench/results/sides-<timestamp>.json (+ sides-latest.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from bench import data, report
from bench.__main__ import machine
from bench.measure import RoleRssSampler
from scripts.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
SIDE_SCRIPT = Path(__file__).with_name("side.py")
OLD = "c8cd829"  # main before issue 22
FULL = {"sizes": [100_000, 300_000, 1_000_000], "growth_streams": 10_000}
QUICK = {"sizes": [1_000, 3_000], "growth_streams": 200}
GIB = 1024 ** 3
WIDE_PHASES = (("wall_s", "whole pass"), ("state_load_s", "state load"), ("spark_s", "Spark"),
               ("commit_s", "commit"))
ROLES = (("driver", "driver"), ("jvm", "driver JVM"), ("workers", "Python workers"),
         ("executors", "executor JVMs"), ("executor_workers", "executor Python workers"))
# written at commit time, not from the inputs: they differ between any two runs
VOLATILE_COLUMNS = {"committed_at", "recorded_at", "logged_at"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.studies.side_by_side", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (what CI's long test runs)")
    p.add_argument("--sizes", help="comma-separated stream counts of the wide pass (and the stores of store_growth)")
    p.add_argument("--growth-streams", type=int, help="streams the store_growth pass touches")
    p.add_argument("--modes", default="local", help="local (local[*]) and/or cluster (the loopback cluster of "
                   "scripts/cluster.py, started and stopped by the run), comma-separated (default %(default)s)")
    p.add_argument("--cluster-sizes", help="stream counts on the cluster (default: --sizes)")
    p.add_argument("--old", default=OLD, help="the old side: a checkout folder or a commit (default %(default)s)")
    p.add_argument("--new", default=str(ROOT), help="the new side: a checkout folder or a commit (default: this one)")
    p.add_argument("--python", default=sys.executable, help="the interpreter (and venv) of both sides")
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"), help="inputs cache; this run's scratch folder")
    p.add_argument("--results", default=str(ROOT / "bench" / "results"))
    return p.parse_args(argv)


def sizes_of(text: str | None, default: list[int]) -> list[int]:
    return sorted({int(s.replace("_", "")) for s in text.split(",")}) if text else default


@contextmanager
def checkout(spec: str, scratch: Path, label: str) -> Iterator[Path]:
    """A checkout folder as given, or a detached worktree of a commit in `scratch` (removed afterwards)."""
    folder = Path(spec)
    if folder.is_dir():
        if not (folder / "pipelines").is_dir():
            raise SystemExit(f"{spec}: not a checkout of inorder (no pipelines/ in it)")
        yield folder.resolve()
        return
    made = scratch / f"code-{label}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(made), spec], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        yield made
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(made)], check=True)


@contextmanager
def loopback_cluster(folder: Path, python: str) -> Iterator[Cluster]:
    """scripts/cluster.py's cluster in `folder`, started without this process's PYTHONPATH (its executors
    must run the code each side ships, not the bench's), stopped afterwards."""
    cluster = Cluster(folder, python=python)
    saved = os.environ.pop("PYTHONPATH", None)
    try:
        cluster.start()
    finally:
        if saved is not None:
            os.environ["PYTHONPATH"] = saved
    try:
        yield cluster
    finally:
        cluster.stop()


def say(message: str) -> None:
    print(f"[sides {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_side(code: Path, python: str, plan: dict, folder: Path, master: str, executor_roots: tuple[int, ...]) -> dict:
    """bench/studies/side.py on `code`, its memory sampled role by role; its result, or what it did before failing."""
    folder.mkdir(parents=True)
    plan_path, result_path = folder / "plan.json", folder / "result.json"
    plan_path.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(code), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
           "SPARK_LOCAL_IP": "127.0.0.1", "INORDER_SPARK_MASTER": master, "INORDER_VIEWS": "views",
           "INORDER_HOME": str(folder / "home")}
    process = subprocess.Popen([python, str(SIDE_SCRIPT), str(plan_path), str(result_path)], cwd=folder, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True)
    reader.start()
    with RoleRssSampler(process.pid, executor_roots) as sampler:
        for line in process.stdout:
            if not sampler.mark(line):
                print(f"    {line.rstrip()}", flush=True)
        process.wait()
    reader.join()
    result = json.loads(result_path.read_text()) if result_path.exists() else {"runs": []}
    result["returncode"] = process.returncode
    if process.returncode:
        result["error"] = "".join(errors[-30:])
    result["peaks"] = sampler.peaks
    for run in result["runs"]:
        run["peak_rss_bytes"] = sampler.run_peaks(run["name"])
    return result


def compare_stores(old: Path, new: Path) -> dict[str, dict]:
    """Every table of the old store: equal when the new store has it with every column of it, and the
    same multiset of rows over those columns (less the VOLATILE_COLUMNS). Tables and columns only the
    new store has (its own bookkeeping) are listed, not held against it."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{old}' AS old_store (READ_ONLY)")
        con.execute(f"ATTACH '{new}' AS new_store (READ_ONLY)")

        def columns(catalog: str) -> dict[str, list[str]]:
            found: dict[str, list[str]] = {}
            for schema, table, column in con.execute(
                    "SELECT schema_name, table_name, column_name FROM duckdb_columns() WHERE database_name = ? "
                    "ORDER BY schema_name, table_name, column_index", [catalog]).fetchall():
                found.setdefault(f"{schema}.{table}", []).append(column)
            return found

        old_tables, new_tables = columns("old_store"), columns("new_store")
        tables: dict[str, dict] = {}
        for name in sorted(old_tables.keys() | new_tables.keys()):
            if name not in old_tables or name not in new_tables:
                tables[name] = {"equal": name not in old_tables, "only_in": "old" if name in old_tables else "new"}
                continue
            shared = [c for c in old_tables[name] if c in new_tables[name] and c not in VOLATILE_COLUMNS]
            schema, table = name.split(".")
            cols = ", ".join(f'"{c}"' for c in shared)

            def rows_missing(a: str, b: str) -> int:
                return con.execute(f'SELECT count(*) FROM (SELECT {cols} FROM {a}."{schema}"."{table}" EXCEPT ALL '
                                   f'SELECT {cols} FROM {b}."{schema}"."{table}")').fetchone()[0]

            counts = [con.execute(f'SELECT count(*) FROM {s}."{schema}"."{table}"').fetchone()[0]
                      for s in ("old_store", "new_store")]
            only_old, only_new = rows_missing("old_store", "new_store"), rows_missing("new_store", "old_store")
            missing_columns = [c for c in old_tables[name] if c not in new_tables[name]]
            tables[name] = {"equal": only_old == only_new == 0 and not missing_columns, "rows": counts, "rows_only_old": only_old,
                            "rows_only_new": only_new, "columns_compared": len(shared),
                            "columns_only_old": missing_columns,
                            "columns_only_new": [c for c in new_tables[name] if c not in old_tables[name]]}
        return tables
    finally:
        con.close()


def wide_plan(home: Path, inputs: tuple[Path, Path, Path], growth: bool) -> dict:
    store, wide, grow = inputs
    runs = [{"name": "store", "file": str(store), "at_s": 0}, {"name": "wide_pass", "file": str(wide), "at_s": 60}]
    if growth:
        runs.append({"name": "store_growth", "file": str(grow), "at_s": 120})
    return {"home": str(home), "runs": runs}


def run_size(sides: dict[str, Path], python: str, streams: int, inputs: tuple[Path, Path, Path], scratch: Path,
             mode: str, master: str, executor_roots: tuple[int, ...]) -> dict:
    """Both sides on one size and mode, then their stores compared; the homes are removed."""
    results: dict = {"streams": streams, "mode": mode, "sides": {}}
    for label, code in sides.items():
        folder = scratch / f"{mode}-{streams}-{label}"
        say(f"{mode} {streams:,} streams: {label} side ({code})")
        side = run_side(code, python, wide_plan(folder / "home", inputs, growth=mode == "local"), folder, master,
                        executor_roots)
        results["sides"][label] = side
        for run in side["runs"]:
            say(f"  {run['name']}: {run['wall_s']:.1f} s (state load {_seconds(run['state_load_s'])}, Spark "
                f"{run['spark_s']:.1f} s, commit {run['commit_s']:.1f} s); driver peak "
                f"{run['peak_rss_bytes'].get('driver', 0) / GIB:.2f} GiB")
        if side["returncode"]:
            say(f"  FAILED (exit {side['returncode']}): {side['error'].strip().splitlines()[-1:]}")
    if all(s["returncode"] == 0 for s in results["sides"].values()):
        stores = [Path(results["sides"][label]["database"]) for label in ("old", "new")]
        results["stores"] = compare_stores(*stores)
        differing = [name for name, t in results["stores"].items() if not t["equal"]]
        say(f"  stores equal table by table: {not differing}{'' if not differing else f' (differ: {differing})'}")
    for label in sides:
        shutil.rmtree(scratch / f"{mode}-{streams}-{label}")
    return results


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def _run(side: dict, name: str) -> dict | None:
    return next((r for r in side["runs"] if r["name"] == name), None)


def _driver_seconds(run: dict) -> float:
    """The pass outside the Spark jobs: what the driver itself does (ingest, state load, commit, planning)."""
    return run["wall_s"] - run["spark_s"]


def table_rows(cases: list[dict]) -> list[dict]:
    """report.format_table's rows: each figure old and new, and the ratio new / old."""
    rows: list[dict] = []

    def row(case: str, figure: str, ratio: float | None = None, key: str | None = None) -> None:
        rows.append({"case": case, "figure": figure, "ratio": ratio, "target": report.target_text(key) if key else "",
                     "met": report.met(key, ratio) if key else None, "target_key": key})

    for case in cases:
        name = f"wide_pass {case['streams']:,} {case['mode']}"
        old, new = (_run(case["sides"][label], "wide_pass") for label in ("old", "new"))
        for label, side in case["sides"].items():
            if side["returncode"]:
                row(name, f"{label} side FAILED after {[r['name'] for r in side['runs']]}: "
                          f"{(side['error'].strip().splitlines() or [''])[-1][:160]}")
        if not (old and new):
            continue
        for key, label in WIDE_PHASES:
            if old[key] is None or new[key] is None:
                row(name, f"{label}: old {_seconds(old[key])}, new {_seconds(new[key])}")
                continue
            target = {1_000_000: "wide_pass_1m_ratio", 600_000: "wide_pass_600k_ratio"}.get(case["streams"])
            row(name, f"{label}: old {old[key]:.1f} s, new {new[key]:.1f} s", new[key] / old[key] if old[key] else None,
                target if key == "wall_s" and case["mode"] == "local" else None)
        for role, label in ROLES:
            o, n = old["peak_rss_bytes"].get(role, 0), new["peak_rss_bytes"].get(role, 0)
            if o or n:
                row(name, f"peak RSS, {label}: old {o / GIB:.2f} GiB, new {n / GIB:.2f} GiB", n / o if o else None)
        if case["streams"] >= 600_000:
            row(name, "new side's driver peak RSS, GiB", new["peak_rss_bytes"].get("driver", 0) / GIB,
                "wide_pass_driver_rss_gib")
        if "stores" in case:
            differing = [t for t, c in case["stores"].items() if not c["equal"]]
            extra = [t for t, c in case["stores"].items() if c.get("only_in") == "new"]
            row(name, f"stores equal table by table ({len(case['stores']) - len(extra)} tables of the old store): "
                      f"{'yes' if not differing else 'NO, ' + ', '.join(differing)}"
                      f"{'; only in the new store: ' + ', '.join(extra) if extra else ''}")
    local = [c for c in cases if c["mode"] == "local"]
    if len(local) >= 2:
        small, large = local[0], local[-1]
        ratios = {}
        for label in ("old", "new"):
            a, b = _run(small["sides"][label], "store_growth"), _run(large["sides"][label], "store_growth")
            if a and b:
                ratios[label] = _driver_seconds(b) / _driver_seconds(a)
                row(f"store_growth {label}", f"{max(b['streams_touched'].values())}-stream pass: driver {_driver_seconds(b):.2f} s onto "
                    f"{large['streams']:,} / {_driver_seconds(a):.2f} s onto {small['streams']:,} (whole pass "
                    f"{b['wall_s']:.2f} / {a['wall_s']:.2f} s)", ratios[label],
                    "store_growth_ratio" if label == "new" else None)
        if len(ratios) == 2:
            row("store_growth", "new / old", ratios["new"] / ratios["old"])
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    defaults = QUICK if args.quick else FULL
    modes = set(args.modes.split(","))
    if not modes <= {"local", "cluster"}:
        raise SystemExit(f"--modes: local and/or cluster, not {args.modes}")
    sizes = sizes_of(args.sizes, defaults["sizes"])
    cluster_sizes = sizes_of(args.cluster_sizes, sizes) if "cluster" in modes else []
    sizes = sizes if "local" in modes else []
    growth = args.growth_streams or defaults["growth_streams"]
    work = Path(args.work)
    cache = work / "inputs"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    scratch = work / f"sides-{stamp}"
    scratch.mkdir(parents=True)  # this run's own: removed at the end
    started = time.perf_counter()
    results: dict = {"started": stamp, "mode": "quick" if args.quick else "full", "machine": machine(),
                     "old": args.old, "new": args.new, "python": args.python, "growth_streams": growth, "cases": []}
    try:
        say(f"generating inputs under {cache} (cached between runs)")
        inputs = {n: (*data.wide_batches(cache, n), data.growth_batch(cache, n, growth))
                  for n in sorted({*sizes, *cluster_sizes})}
        with ExitStack() as stack:
            sides = {"old": stack.enter_context(checkout(args.old, scratch, "old")),
                     "new": stack.enter_context(checkout(args.new, scratch, "new"))}
            results["code"] = {label: str(path) for label, path in sides.items()}
            for n in sizes:
                results["cases"].append(run_size(sides, args.python, n, inputs[n], scratch, "local", "local[*]", ()))
            if cluster_sizes:
                say("starting the loopback cluster (scripts/cluster.py)")
                cluster = stack.enter_context(loopback_cluster(scratch / "cluster", args.python))
                roots = tuple(pid for name, pid in cluster.state["pids"].items() if name.startswith("worker"))
                for n in cluster_sizes:
                    results["cases"].append(run_size(sides, args.python, n, inputs[n], scratch, "cluster",
                                                     cluster.master_url, roots))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["table"] = rows = table_rows(results["cases"])
    folder = Path(args.results)
    path, latest = report.write(results, folder, f"sides-{stamp}", latest="sides-latest.json")
    print()
    print(report.format_table(rows))
    print(f"\n[sides] {results['seconds']:.0f} s; results {path} (and {latest.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
