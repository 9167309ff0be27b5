"""Issue 22 item 3: the same commit onto a store with its PRIMARY KEYs and onto a copy without them.

    python -m bench.commit_keys                     # a store of 1M streams (about 15 min on 2 cores)
    python -m bench.commit_keys --streams 100000

A store of S `wide-<i>` accounts with seq 1–2 each (data.wide_batches) is built once, then copied
twice: one copy as the engine makes it (no PRIMARY KEY on `inorder.watermarks`, `inorder.pending` and
keyed and append view tables; aggregate tables keep theirs: their commit is an upsert on it), and one
where those tables are given the PRIMARY KEY they carried before issue 22. On each copy, the same pass (seq 3 for every stream) runs in the same
Spark session, and the commit is timed: the engine's commit seconds (ProjectionStats), and of
them the COMMIT statement alone; then the two stores are compared table by table. This checkout's
engine runs; the scratch folder is removed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pipelines.facade
from bench import data
from bench.bulk import T0
from bench.data import BANK_VIEWS, land
from bench.side_by_side import compare_stores
from pipelines.facade import run
from pipelines.spark.session import spark_session
from pipelines.store.database import Home, Store

ROOT = Path(__file__).resolve().parents[1]
# the keys the store carried before issue 22 (docs/STORE.md says why it carries them no more)
ENGINE_KEYS = {"watermarks": ("view", "stream_id"), "pending": ("view", "stream_id", "seq")}


def keyed_tables() -> dict[str, tuple[str, ...]]:
    """The qualified tables the keyed copy gives a PRIMARY KEY, and its columns."""
    views = {f'main."{t.name}"': t.primary_key for v in BANK_VIEWS for t in v.tables if t.kind in ("keyed", "append")}
    return {**{f"inorder.{t}": key for t, key in ENGINE_KEYS.items()}, **views}


def add_primary_keys(home: Home) -> None:
    """Give each of `keyed_tables` its PRIMARY KEY (the store's engine creates them without)."""
    import duckdb

    con = duckdb.connect(str(home.database))
    try:
        for qualified, key in keyed_tables().items():
            columns = ", ".join(f'"{c}"' for c in key)
            con.execute(f"ALTER TABLE {qualified} ADD PRIMARY KEY ({columns})")
        con.execute("CHECKPOINT")
    finally:
        con.close()


@contextmanager
def commit_timed(figures: dict) -> Iterator[None]:
    """For the block: `figures["commit_statement_s"]`, the pass commit's COMMIT statement alone."""
    original_commit_pass, original_transaction = pipelines.facade.commit_pass, Store.transaction
    in_commit = {"now": False}

    def commit_pass(*args, **kwargs):
        in_commit["now"] = True
        try:
            return original_commit_pass(*args, **kwargs)
        finally:
            in_commit["now"] = False

    @contextmanager
    def transaction(store):
        with original_transaction(store) as con:
            yield con
            body_done = time.perf_counter()  # leaving the block runs COMMIT
        if in_commit["now"]:
            figures["commit_statement_s"] = figures.get("commit_statement_s", 0.0) + time.perf_counter() - body_done

    pipelines.facade.commit_pass, Store.transaction = commit_pass, transaction
    try:
        yield
    finally:
        pipelines.facade.commit_pass, Store.transaction = original_commit_pass, original_transaction


def say(message: str) -> None:
    print(f"[commit_keys {time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.commit_keys", description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=1_000_000, help="streams in the store (and in the pass)")
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"), help="inputs cache; this run's scratch folder")
    args = p.parse_args(argv)
    work = Path(args.work)
    store_file, pass_file = data.wide_batches(work / "inputs", args.streams)
    scratch = work / f"commit-keys-{time.strftime('%Y%m%dT%H%M%S')}"
    scratch.mkdir(parents=True)  # this run's own: removed at the end
    try:
        spark = spark_session()
        base = Home(scratch / "store").ensure()
        say(f"building the store: {args.streams:,} streams, seq 1-2")
        land([store_file], base.landing)
        run(spark, base, BANK_VIEWS, now=T0)
        results = {}
        for variant in ("with keys", "without keys"):
            home = Home(scratch / variant.replace(" ", "-"))
            shutil.copytree(base.root, home.root)
            if variant == "with keys":
                add_primary_keys(home)
            land([pass_file], home.landing)
            figures: dict = {}
            with commit_timed(figures):
                report = run(spark, home, BANK_VIEWS, now=T0 + timedelta(seconds=60))
            results[variant] = {"commit_s": report.projection.commit_seconds, **figures, "pass_s": report.seconds}
            results[variant]["database"] = home.database
            say(f"{variant}: commit {results[variant]['commit_s']:.1f} s (COMMIT statement "
                f"{figures['commit_statement_s']:.1f} s), whole pass {report.seconds:.1f} s")
        spark.stop()
        stores = compare_stores(*(results[variant]["database"] for variant in results))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    keyed, keyless = results["with keys"], results["without keys"]
    print(f"\nthe same commit, {args.streams:,} streams touched on a store of {args.streams:,} (keys added on "
          f"{', '.join(keyed_tables())}):")
    for figure in ("commit_s", "commit_statement_s", "pass_s"):
        print(f"  {figure:<19} with keys {keyed[figure]:8.2f} s   without {keyless[figure]:8.2f} s   "
              f"ratio {keyed[figure] / keyless[figure]:.1f}")
    differing = [name for name, table in stores.items() if not table["equal"]]
    print(f"  the two stores after it, table by table: {'equal' if not differing else 'DIFFER: ' + ', '.join(differing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
