"""Does the class-data archive (pipelines/spark/class_archive.py) still halve a Spark JVM's start?

    python -m bench.studies.jvm_start [--rounds 3]

Alternates, round by round on the same batch: a cold `inorder run` (INORDER_SPARK_WARM=0: a local JVM of its
own) and `inorder spark start`, each with the set-up's archive and without one (an empty XDG_CACHE_HOME). Prints
each case's median wall seconds and CPU seconds, the CPU read from /proc/stat: the whole machine's, so run it on a
quiet one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.spark import class_archive

INORDER = [sys.executable, "-m", "inorder.cli"]


def _machine_cpu_seconds() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")  # user nice system irq softirq


def _timed(commands: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    cpu, wall = _machine_cpu_seconds(), time.monotonic()
    for command in commands:
        subprocess.run([*INORDER, *command], env=env, check=True, capture_output=True, timeout=600)
    time.sleep(1)  # the JVM's exit, after its command's
    return time.monotonic() - wall - 1, _machine_cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    if class_archive.make() is None:
        sys.exit("no Java: nothing to measure")
    figures: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="inorder-jvm-start-") as folder:
        batch = Path(folder, "batches")
        base = {k: v for k, v in os.environ.items() if not k.startswith("INORDER_")}
        subprocess.run([*INORDER, "generate", "--out", str(batch), "--events", "500", "--batches", "1"], env=base,
                       check=True, capture_output=True)
        for n in range(rounds):
            for archive in ("with the archive", "without"):
                cache = {} if archive == "with the archive" else {"XDG_CACHE_HOME": str(Path(folder, "no-cache"))}
                home = Path(folder, f"home-{n}-{archive}")
                env = {**base, **cache, "INORDER_HOME": str(home), "INORDER_SPARK_WARM": "0"}
                subprocess.run([*INORDER, "init"], env=env, check=True, capture_output=True)
                (home / "landing" / "batch.jsonl").write_bytes(next(batch.iterdir()).read_bytes())
                figures.setdefault(f"cold `inorder run`, {archive}", []).append(_timed([["run"]], env))
                figures.setdefault(f"`inorder spark start`, {archive}", []).append(
                    _timed([["spark", "start"]], env))
                subprocess.run([*INORDER, "spark", "stop"], env=env, check=True, capture_output=True)
    print(f"median of {rounds} rounds | wall s | CPU s (machine)")
    for case, samples in sorted(figures.items()):
        print(f"{case} | {statistics.median(w for w, _ in samples):.1f} | {statistics.median(c for _, c in samples):.1f}")


if __name__ == "__main__":
    main()
