"""Timers and the peak resident memory of this process with all its descendants (Spark's JVM and
its Python workers), sampled on a thread; and of another process, role by role (RoleRssSampler)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from pipelines.spark.server import descendants
from scripts.process_tree import rss_bytes, tree_rss


class _SamplingThread:
    """Calls `_sample` every `interval` s on a thread, while the `with` block runs."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


class RssSampler(_SamplingThread):
    """Samples the process tree's RSS every `interval` s; `phase(name)` records each phase's peak."""

    def __init__(self, interval: float = 0.25) -> None:
        super().__init__(interval)
        self.peaks: dict[str, int] = {}
        self.overall = 0
        self._phase: str | None = None

    def _sample(self) -> None:
        rss = tree_rss()
        self.overall = max(self.overall, rss)
        if self._phase is not None:
            self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), rss)

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


def _is_jvm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "java"
    except FileNotFoundError:
        return False


def rss_by_role(driver_pid: int, executor_roots: tuple[int, ...] = ()) -> dict[str, int]:
    """The driver process, its JVM, its Python workers (the JVM's children) and, below each of
    `executor_roots` (a cluster's worker daemons, not counted), the executors' JVMs and Python workers."""
    roles = {"driver": rss_bytes(driver_pid), "jvm": 0, "workers": 0, "executors": 0, "executor_workers": 0}
    for pid in descendants(driver_pid):
        roles["jvm" if _is_jvm(pid) else "workers"] += rss_bytes(pid)
    for root in executor_roots:
        for pid in descendants(root):
            roles["executors" if _is_jvm(pid) else "executor_workers"] += rss_bytes(pid)
    return roles


class RoleRssSampler(_SamplingThread):
    """Samples `rss_by_role` of a process that says `run <name>` and `phase <name>` on its stdout
    (bench/studies/side.py): `mark(line)` with each line; `peaks["<run>/<phase>"][role]` and `overall[role]`."""

    def __init__(self, driver_pid: int, executor_roots: tuple[int, ...] = (), interval: float = 0.25) -> None:
        super().__init__(interval)
        self.driver_pid, self.executor_roots = driver_pid, executor_roots
        self.peaks: dict[str, dict[str, int]] = {}
        self.overall: dict[str, int] = {}
        self._where = "start"
        self._run = ""
        self._lock = threading.Lock()

    def mark(self, line: str) -> bool:
        """Take a marker line; False when the line is not one."""
        word, _, name = line.strip().partition(" ")
        if word not in ("run", "phase") or not name:
            return False
        self._sample()  # the end of the phase before
        with self._lock:
            if word == "run":
                self._run = name
            else:
                self._where = f"{self._run}/{name}" if self._run else name
        self._sample()
        return True

    def run_peaks(self, run: str) -> dict[str, int]:
        """Each role's peak over every phase of `run`."""
        found: dict[str, int] = {}
        for where, roles in self.peaks.items():
            if where.startswith(f"{run}/"):
                for role, rss in roles.items():
                    found[role] = max(found.get(role, 0), rss)
        return found

    def _sample(self) -> None:
        roles = rss_by_role(self.driver_pid, self.executor_roots)
        with self._lock:
            peaks = self.peaks.setdefault(self._where, {})
            for role, rss in roles.items():
                peaks[role] = max(peaks.get(role, 0), rss)
                self.overall[role] = max(self.overall.get(role, 0), rss)
