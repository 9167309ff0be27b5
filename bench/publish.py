"""What publishing each commit to PostgreSQL costs (issue 11), beside the same runs without it:

    python -m bench.publish [--events 1000000] [--increment 10000] [--rounds 3] [--work DIR] [--profile]

In ONE process and ONE warm Spark session, against a throwaway PostgreSQL server
(bench/postgres.py, durable: fsync and synchronous commit on):

1. **bulk**: `inorder run` (pipelines.facade.run, the CLI's call) on the N-event bank input into two
   fresh homes, one with INORDER_SERVE_POSTGRES set (its first publication of each view is full:
   every row) and one without. Reports the rows published, the publish seconds and rows/s (from
   `ProjectionStats.publications` and `publish_seconds`), both runs' wall times and their ratio, and
   the in-run ratio (see below).
2. **incremental**: `--rounds` rounds, each landing its own fresh batch of `--increment` events
   (bench/data.py's `inc<round>-…` streams) on both homes, the runs with and without publishing
   interleaved (the order alternates from round to round, so machine noise and any order effect hit
   both). Reports the wall time of `run(...)` with and without, their ratio per round and the median
   ratio (target: <= 1.15), and where each round's publish time went (rows, seconds and mode per view;
   what is left of `publish_seconds` is the connection and the catch-up check before the passes).
   Two runs of a ~2 s batch differ by a few tenths on a busy 2-core machine, more than publishing
   costs, so each round also gives its in-run ratio: the run with publishing over itself less its
   own `publish_seconds` (blind to any slowdown publishing causes outside its own calls).

`--profile` adds one more batch on the publishing home, not counted in the figures, with the
publication cut into its steps (DuckDB reads, COPY, the PostgreSQL statements, commit) and a
cProfile of `Publishing.publish`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Iterator

from bench import data
from bench.bulk import T0, fresh_home
from bench.data import BANK_VIEWS
from bench.measure import timer

ROOT = Path(__file__).resolve().parents[1]
T_INCREMENT = T0 + timedelta(seconds=60)  # as bench/incremental.py: before any gap of the bulk run times out
TARGET = 1.15
SERVE_VARS = ("INORDER_SERVE_POSTGRES", "INORDER_SERVE_SCHEMA")


def say(message: str) -> None:
    print(f"[publish {time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextmanager
def serving(dsn: str | None, schema: str = "public") -> Iterator[None]:
    """INORDER_SERVE_POSTGRES (and _SCHEMA) set to `dsn` in os.environ for the block; unset when None."""
    saved = {k: os.environ.get(k) for k in SERVE_VARS}
    for k in SERVE_VARS:
        os.environ.pop(k, None)
    if dsn is not None:
        os.environ["INORDER_SERVE_POSTGRES"], os.environ["INORDER_SERVE_SCHEMA"] = dsn, schema
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def one_run(spark, home, now, dsn: str | None, schema: str = "public") -> dict:
    """pipelines.facade.run on whatever is in the landing folder, publishing to `dsn` (None: not at all);
    its wall time and publication figures."""
    from pipelines.facade import run

    with serving(dsn, schema):
        report = run(spark, home, BANK_VIEWS, now=now)
    stats = report.projection
    if dsn is not None and stats.publish_error:
        raise RuntimeError(f"publishing failed: {stats.publish_error}")
    if dsn is None and stats.publications:
        raise RuntimeError("published with INORDER_SERVE_POSTGRES unset")
    pubs = [{"view": p.view, "mode": p.mode, "rows": p.rows, "seconds": p.seconds, "entry_idx": p.entry_idx}
            for p in stats.publications]
    return {"wall_s": report.seconds, "events": sum(r.records for r in report.ingested),
            "ingest_s": report.ingest_seconds, "spark_s": stats.spark_seconds, "commit_s": stats.commit_seconds,
            "passes": stats.passes, "publish_s": stats.publish_seconds, "published_rows": sum(p["rows"] for p in pubs),
            "publish_views_s": sum(p["seconds"] for p in pubs), "publications": pubs}


def warm_up(spark, work: Path, dsn: str) -> float:
    """Tiny runs first, with and without publishing (its own schema), so the measured runs pay for
    neither the JIT, the Python workers' start nor psycopg's first connection."""
    from demos.bank import GeneratorConfig, generate

    with timer() as t:
        for name, target in (("warm-plain", None), ("warm-served", dsn)):
            home = fresh_home(work / name)
            generate(home.landing, GeneratorConfig(400, 20, 2, **data.MIX))
            one_run(spark, home, T0, target, "bench_warm_up")  # a schema of its own: one home per schema
            shutil.rmtree(home.root, ignore_errors=True)
    return t["s"]


def bulk_case(spark, inputs: Path, served, plain, dsn: str) -> dict:
    """The same bulk input into each fresh home: without publishing first, then with."""
    result = {}
    for name, home, target in (("plain", plain, None), ("served", served, dsn)):
        data.land(data.jsonl_files(inputs), home.landing)
        result[name] = r = one_run(spark, home, T0, target)
        say(f"  bulk {'with' if target else 'without'} publishing: {r['wall_s']:.1f} s"
            + (f" (publish {r['publish_s']:.1f} s, {r['published_rows']:,} rows)" if target else ""))
    served_r = result["served"]
    result["ratio"] = served_r["wall_s"] / result["plain"]["wall_s"]
    result["in_run_ratio"] = served_r["wall_s"] / (served_r["wall_s"] - served_r["publish_s"])
    result["rows_per_s"] = served_r["published_rows"] / served_r["publish_s"] if served_r["publish_s"] else None
    return result


def incremental_case(spark, batches: list[Path], served, plain, dsn: str) -> dict:
    rounds = []
    for i, batch in enumerate(batches, 1):
        order = (("served", served, dsn), ("plain", plain, None))
        order = order if i % 2 else order[::-1]  # alternate who goes first
        sample = {"round": i, "first": order[0][0]}
        for name, home, target in order:
            data.land([batch], home.landing)
            sample[name] = one_run(spark, home, T_INCREMENT, target)
        sample["ratio"] = sample["served"]["wall_s"] / sample["plain"]["wall_s"]
        s = sample["served"]
        # the same run less its own publish time: what publishing added, free of the noise between two runs
        sample["in_run_ratio"] = s["wall_s"] / (s["wall_s"] - s["publish_s"])
        say(f"  round {i} ({sample['first']} first): with {s['wall_s']:.2f} s, without "
            f"{sample['plain']['wall_s']:.2f} s, ratio {sample['ratio']:.3f}; publish {s['publish_s']:.3f} s, "
            f"{s['published_rows']:,} rows")
        rounds.append(sample)
    ratios = [r["ratio"] for r in rounds]
    return {"rounds": rounds, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
            "max_ratio": max(ratios),
            "median_served_s": statistics.median(r["served"]["wall_s"] for r in rounds),
            "median_plain_s": statistics.median(r["plain"]["wall_s"] for r in rounds),
            "median_publish_s": statistics.median(r["served"]["publish_s"] for r in rounds),
            "median_in_run_ratio": statistics.median(r["in_run_ratio"] for r in rounds)}


# -- the --profile round: the publication cut into its steps ---------------------------------------------

class Steps:
    """Seconds and counts per step, filled by the wrappers `instrumented` installs."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, step: str, seconds: float, n: int = 1) -> None:
        self.seconds[step] += seconds
        self.counts[step] += n


def _statement_kind(query) -> str:
    text = " ".join(str(query).split())
    for prefix in ("SELECT entry_idx FROM", "SELECT to_regclass", "SELECT attname", "SELECT a.attname",
                   "CREATE TEMP TABLE", "DROP TABLE", "INSERT INTO", "DELETE FROM", "CREATE SCHEMA",
                   "CREATE TABLE", "SELECT view, entry_idx"):
        if text.startswith(prefix):
            if prefix in ("INSERT INTO", "DELETE FROM"):
                return f"pg {prefix} " + ("inorder_published" if "inorder_published" in text[:60] else
                                          "(merge)" if prefix == "INSERT INTO" and "inorder_stage_" in text else
                                          "(stream scope)" if "inorder_scope" in text else "table")
            return f"pg {prefix}"
    return "pg other"


_ABSENT = object()


@contextmanager
def instrumented(steps: Steps) -> Iterator[None]:
    """Time the steps of Publisher: DuckDB's side (the row query and each fetchmany), the COPY (encoding
    and sending, net of DuckDB's fetches), each PostgreSQL statement by kind, the transaction's commit,
    the connection; per table, the whole `_publish_table`. Patches are undone on exit."""
    import psycopg

    from pipelines.serve import publish as pub

    # the originals, looked up by name: a step whose function was renamed is just not timed
    originals = {key: getattr(owner, name, None) for key, (owner, name) in {
        "execute": (psycopg.Connection, "execute"), "transaction": (psycopg.Connection, "transaction"),
        "connect": (psycopg, "connect"), "chunks": (pub, "_chunks"), "copy": (pub.Publisher, "_copy"),
        "table": (pub.Publisher, "_publish_table"), "prepare": (pub.Publisher, "_prepare_view"),
        "before": (pub, "_entry_before"), "positions": (pub, "committed_positions")}.items()}
    fetch = {"s": 0.0}

    def execute(self, query, *args, **kwargs):
        started = time.perf_counter()
        try:
            return originals["execute"](self, query, *args, **kwargs)
        finally:
            steps.add(_statement_kind(query), time.perf_counter() - started)

    @contextmanager
    def transaction(self, *args, **kwargs):
        with originals["transaction"](self, *args, **kwargs) as tx:
            yield tx
            exiting = time.perf_counter()
        steps.add("pg COMMIT (transaction exit)", time.perf_counter() - exiting)

    def chunks(cursor):
        while True:
            started = time.perf_counter()
            chunk = cursor.fetchmany(pub._FETCH)
            took = time.perf_counter() - started
            fetch["s"] += took
            steps.add("duckdb fetchmany", took)
            if not chunk:
                return
            yield chunk

    def copy(self, relation, columns, cursor):
        before = fetch["s"]
        started = time.perf_counter()
        try:
            return originals["copy"](self, relation, columns, cursor)
        finally:
            steps.add(f"COPY {relation} (encode+send, net of fetch)",
                      time.perf_counter() - started - (fetch["s"] - before))

    def publish_table(self, con, view, table, mode, done):
        started = time.perf_counter()
        try:
            return originals["table"](self, con, view, table, mode, done)
        finally:
            steps.add(f"table {table.name} ({table.kind}, {mode}) total", time.perf_counter() - started)


    def timed(key: str, label: str):
        """The original behind `key`, its time added to `label`."""
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return originals[key](*args, **kwargs)
            finally:
                steps.add(label, time.perf_counter() - started)
        return wrapper

    connect = timed("connect", "pg connect")
    prepare = timed("prepare", "_prepare_view (catalog checks)")
    before = timed("before", "duckdb _entry_before")
    positions = timed("positions", "duckdb committed_positions")

    patches = [(psycopg.Connection, "execute", execute), (psycopg.Connection, "transaction", transaction),
               (psycopg, "connect", connect), (pub, "_chunks", chunks),
               (pub.Publisher, "_copy", copy), (pub.Publisher, "_publish_table", publish_table),
               (pub.Publisher, "_prepare_view", prepare), (pub, "_entry_before", before),
               (pub, "committed_positions", positions)]
    patches = [(owner, name, new) for owner, name, new in patches if getattr(owner, name, None) is not None]
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name, _ in patches]
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, old in saved:
            if old is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


def profile_round(spark, batch: Path, served, dsn: str) -> dict:
    """One more batch on the publishing home: the publication's steps and a cProfile of Publishing.publish."""
    from pipelines.serve import publish as pub

    steps, profiler = Steps(), cProfile.Profile()
    original = pub.Publishing.publish

    def profiled(self, *args, **kwargs):
        profiler.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            profiler.disable()

    data.land([batch], served.landing)
    pub.Publishing.publish = profiled
    try:
        with instrumented(steps):
            result = one_run(spark, served, T_INCREMENT, dsn)
    finally:
        pub.Publishing.publish = original
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    return {"run": result, "steps": {k: {"seconds": steps.seconds[k], "count": steps.counts[k]}
                                     for k in sorted(steps.seconds, key=steps.seconds.get, reverse=True)},
            "cprofile": text.getvalue()}


# -- checks and reporting --------------------------------------------------------------------------------

def matches(served, dsn: str) -> dict:
    """Row counts of each view table in DuckDB and in PostgreSQL (the publishing home), and the entries."""
    import psycopg

    from pipelines.observe.status import open_read_only

    con = open_read_only(served)
    try:
        duck = {t.name: con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0]
                for v in BANK_VIEWS for t in v.tables}
        entries = dict(con.execute("SELECT view, max(entry_idx) FROM inorder.batches GROUP BY view").fetchall())
    finally:
        con.close()
    with psycopg.connect(dsn) as pg:
        pgc = {name: pg.execute(f'SELECT count(*) FROM public."{name}"').fetchone()[0] for name in duck}
        published = dict(pg.execute("SELECT view, entry_idx FROM public.inorder_published").fetchall())
    return {"duckdb_rows": duck, "postgres_rows": pgc, "rows_match": duck == pgc,
            "entries_match": published == entries}


def where_it_went(sample: dict) -> list[str]:
    s = sample["served"]
    lines = [f"    {p['view']:<18} {p['mode']:<8} {p['rows']:>9,} rows  {p['seconds']:.3f} s" for p in s["publications"]]
    lines.append(f"    {'(connect, catch-up check)':<27} {s['publish_s'] - s['publish_views_s']:>15.3f} s")
    return lines


def git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return f"{head}{' (with uncommitted changes)' if dirty else ''}"
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--increment", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"))
    p.add_argument("--profile", action="store_true", help="one more, uncounted batch with the publication's steps")
    args = p.parse_args(argv)

    import psycopg

    from pipelines.spark.session import spark_session
    from bench.postgres import PostgresServer

    cache = Path(args.work) / "inputs"
    scratch = Path(args.work) / "scratch" / f"publish-{os.getpid()}"
    say(f"inputs under {cache} (generated once, then cached)")
    inputs = data.bank_batches(cache, args.events)
    batches = [data.incremental_batch(cache, args.increment, r) for r in range(1, args.rounds + 1 + args.profile)]
    results: dict = {"events": args.events, "increment": args.increment, "rounds": args.rounds,
                     "cores": os.cpu_count(), "code": git_state(), "load_average_at_start": os.getloadavg()}
    started = time.perf_counter()
    server = PostgresServer(durable=True).start()
    try:
        dsn = server.dsn
        with psycopg.connect(dsn) as pg:
            version = pg.execute("SHOW server_version").fetchone()[0]
        results["postgres"] = version
        say(f"PostgreSQL {version} (fsync on) at {dsn}")
        with timer() as t:
            spark = spark_session()
        results["cores"] = spark.sparkContext.defaultParallelism
        say(f"Spark session ({spark.sparkContext.master}, {results['cores']} cores) in {t['s']:.1f} s; warming up")
        results["warm_up_s"] = warm_up(spark, scratch, dsn)
        served, plain = fresh_home(scratch / "served"), fresh_home(scratch / "plain")

        say(f"bulk: {args.events:,} bank events, without then with publishing")
        results["bulk"] = b = bulk_case(spark, inputs, served, plain, dsn)
        say(f"  published {b['served']['published_rows']:,} rows in {b['served']['publish_s']:.1f} s "
            f"= {b['rows_per_s']:,.0f} rows/s; bulk with / without = {b['ratio']:.3f} (in-run {b['in_run_ratio']:.3f})")

        say(f"incremental: {args.increment:,} events onto each {args.events:,}-event store, {args.rounds} rounds")
        results["incremental"] = inc = incremental_case(spark, batches[:args.rounds], served, plain, dsn)
        if args.profile:
            say("profile: one more batch on the publishing store (not counted)")
            results["profile"] = profile_round(spark, batches[args.rounds], served, dsn)
        results["check"] = check = matches(served, dsn)
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_at_end"] = os.getloadavg()

    print(json.dumps({k: v for k, v in results.items() if k != "profile"}, default=str))
    if "profile" in results:
        print(json.dumps({"profile_steps": results["profile"]["steps"]}))
    b, inc = results["bulk"], results["incremental"]
    print()
    load = "/".join(f"{a:.1f}" for a in results["load_average_at_start"])
    print(f"machine: {results['cores']} cores, load average {load} at the start "
          f"({results['load_average_at_end'][0]:.1f} at the end); PostgreSQL {results['postgres']} (fsync on); "
          f"code {results['code']}")
    print(f"bulk {args.events:,} events: without publishing {b['plain']['wall_s']:.1f} s, with "
          f"{b['served']['wall_s']:.1f} s (ratio {b['ratio']:.3f}; in-run ratio {b['in_run_ratio']:.3f}); published "
          f"{b['served']['published_rows']:,} rows in {b['served']['publish_s']:.1f} s = {b['rows_per_s']:,.0f} rows/s")
    for pub in b["served"]["publications"]:
        print(f"    {pub['view']:<18} {pub['mode']:<8} {pub['rows']:>9,} rows  {pub['seconds']:.2f} s")
    verdict = "meets" if inc["median_ratio"] <= TARGET else "misses"
    print(f"incremental {args.increment:,} onto {args.events:,}: median with {inc['median_served_s']:.2f} s, without "
          f"{inc['median_plain_s']:.2f} s; ratio median {inc['median_ratio']:.3f} (range {inc['min_ratio']:.3f}"
          f"-{inc['max_ratio']:.3f}), {verdict} the <= {TARGET} target; median publish {inc['median_publish_s']:.3f} s, "
          f"so a run with publishing takes {inc['median_in_run_ratio']:.3f} x itself less its publish time")
    for sample in inc["rounds"]:
        print(f"  round {sample['round']} ({sample['first']} first): with {sample['served']['wall_s']:.2f} s "
              f"(Spark {sample['served']['spark_s']:.2f} s), without {sample['plain']['wall_s']:.2f} s "
              f"(Spark {sample['plain']['spark_s']:.2f} s), ratio {sample['ratio']:.3f}; publish "
              f"{sample['served']['publish_s']:.3f} s (in-run ratio {sample['in_run_ratio']:.3f})")
        print("\n".join(where_it_went(sample)))
    if "profile" in results:
        prof = results["profile"]
        print(f"profile batch: run {prof['run']['wall_s']:.2f} s, publish {prof['run']['publish_s']:.3f} s; steps "
              "(nested: a table's total holds its statements and COPYs):")
        for step, v in prof["steps"].items():
            print(f"    {step:<58} {v['seconds']:.4f} s  x{v['count']}")
        print(prof["cprofile"])
    c = results["check"]
    print(f"PostgreSQL matches DuckDB after the last run: rows {c['rows_match']}, entries {c['entries_match']} "
          f"({c['postgres_rows']})")
    print(f"[publish] {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
