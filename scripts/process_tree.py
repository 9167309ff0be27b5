"""The resident memory of a process and of its descendants (Spark's JVM and its Python workers), read
from /proc: the benchmark suite's samplers (bench/measure.py) and the soak (tests/soak.py) read it here."""

from __future__ import annotations

import os

from pipelines.spark.server import descendants


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except (FileNotFoundError, StopIteration):
        return 0


def tree_rss(pid: int | None = None) -> int:
    pid = pid or os.getpid()
    return rss_bytes(pid) + sum(rss_bytes(p) for p in descendants(pid))
