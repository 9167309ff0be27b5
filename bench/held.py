"""How much of a run's wall time the DuckDB file is held (issue 11), seen by a reader:

    python -m bench.held [--events 1000000] [--increment 10000] [--work DIR]

A probe asks the kernel every 20 ms whether another process holds a lock on the store's file
(fcntl F_GETLK: it takes no lock, so it never gets in the run's way, as a real reader would) while
`inorder run` (a subprocess, the user's path: Dagster runs included) first projects the bulk input,
then one incremental batch on top of it. Runs the code on PYTHONPATH, so two checkouts compare
side by side.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import data

ROOT = Path(__file__).resolve().parents[1]


_FLOCK = "hhxxxxqqixxxx"  # struct flock on Linux x86-64: type, whence, start, len, pid


def locked(path: Path) -> bool:
    """Does another process hold the file for writing (DuckDB's exclusive lock)? Readers' shared locks
    do not count: read-only openers can share the file with them."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        query = struct.pack(_FLOCK, fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0)
        return struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def held_share(command: list[str], env: dict[str, str], database: Path, every: float = 0.02) -> dict:
    """Run `command`; meanwhile probe `database` every `every` s. Each probe that finds it locked
    counts the time since the previous probe as held."""
    stop = threading.Event()
    held = total = 0.0
    probes = locked_probes = 0

    def probe() -> None:
        nonlocal held, total, probes, locked_probes
        last = time.monotonic()
        while not stop.is_set():
            busy = locked(database)
            now = time.monotonic()
            probes, locked_probes = probes + 1, locked_probes + busy
            total += now - last
            held += now - last if busy else 0.0
            last = now
            stop.wait(every)

    thread = threading.Thread(target=probe)
    started = time.perf_counter()
    thread.start()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    finally:
        stop.set()
        thread.join()
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return {"wall_s": wall, "held_share": held / total if total else None, "probes": probes,
            "locked": locked_probes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.held", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--increment", type=int, default=10_000)
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"))
    args = p.parse_args(argv)
    cache, home = Path(args.work) / "inputs", Path(args.work) / "scratch" / f"held-{os.getpid()}"
    bulk_inputs = data.bank_batches(cache, args.events)
    increment = data.incremental_batch(cache, args.increment)
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(bulk_inputs, home / "landing", ignore=shutil.ignore_patterns(".done"))
    env = {**os.environ, "INORDER_HOME": str(home)}
    command = [sys.executable, "-m", "inorder.cli", "run", "--now"]
    results = {"events": args.events, "increment": args.increment}
    try:
        results["bulk"] = held_share([*command, "2026-11-02T00:00:00Z"], env, home / "store.duckdb")
        shutil.copy(increment, home / "landing")
        results["incremental"] = held_share([*command, "2026-11-02T00:01:00Z"], env, home / "store.duckdb")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(results))
    for case in ("bulk", "incremental"):
        r = results[case]
        print(f"{case}: run {r['wall_s']:.1f} s, DuckDB file held {100 * r['held_share']:.0f} % of it "
              f"({r['locked']} of {r['probes']} probes found it locked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
