"""Timers and the peak resident memory of this process with all its descendants (Spark's JVM and
its Python workers), sampled on a thread. The /proc readers are the soak's (tests/soak.py)."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from tests.soak import descendants, rss_bytes


def tree_rss(pid: int | None = None) -> int:
    pid = pid or os.getpid()
    return rss_bytes(pid) + sum(rss_bytes(p) for p in descendants(pid))


class RssSampler:
    """Samples the process tree's RSS every `interval` s; `phase(name)` records each phase's peak."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.overall = 0
        self._phase: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        rss = tree_rss()
        self.overall = max(self.overall, rss)
        if self._phase is not None:
            self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak of this phase (a phase run again starts from zero)."""
        self.peaks[name] = 0
        self._phase = name
        self._sample()
        try:
            yield
        finally:
            self._sample()
            self._phase = None


@contextmanager
def timer() -> Iterator[dict]:
    """`with timer() as t: ...` then `t["s"]` holds the wall seconds."""
    box: dict = {}
    started = time.perf_counter()
    try:
        yield box
    finally:
        box["s"] = time.perf_counter() - started
