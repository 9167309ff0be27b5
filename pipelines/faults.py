"""Named crash points, for the fault-injection sweep (scripts/crash_sweep.py, tests/e2e/test_crash.py).

`INORDER_CRASH_AT=<point>[:<n>]` kills the `inorder` process with SIGKILL the n-th time (default:
the first) this process passes `crash_point("<point>")`. With `INORDER_CRASH_DELAY_US=<us>` the
kill comes that many microseconds after the point instead, from a timer thread, so it can land
inside whatever the code does next (a DuckDB COMMIT, a checkpoint). Unset, a crash point is one
attribute test: production code pays nothing for it.

Spark's Python workers are separate processes: a crash point reached there kills the driver
(`INORDER_CRASH_PID`, which the driver's session gives its executors as `spark.executorEnv`), which
is what a crash of `inorder run` in the middle of ordering or applying looks like.

Nothing is read at import: the entry points call `arm()` (the CLI as it starts, each partition of a
pass on the executors), which reads the environment once per process.
"""

from __future__ import annotations

import os
import signal
import threading

ARMED: str | None = None  # the armed point and count ("<point>[:<n>]"), set by `arm`
_point, _nth, _delay_us, _pid, _hits = "", 1, 0, 0, 0
_read = False


def arm() -> None:
    """Read INORDER_CRASH_AT, INORDER_CRASH_DELAY_US and INORDER_CRASH_PID, once per process (a
    worker's count of hits runs on across the partitions it serves)."""
    global ARMED, _point, _nth, _delay_us, _pid, _read
    if _read:
        return
    _read = True
    ARMED = os.environ.get("INORDER_CRASH_AT") or None
    point, _, nth = (ARMED or "").partition(":")
    _point, _nth = point, int(nth or 1)
    _delay_us = int(os.environ.get("INORDER_CRASH_DELAY_US") or 0)
    _pid = int(os.environ.get("INORDER_CRASH_PID") or os.getpid())


def crash_pid() -> int | None:
    """The process an armed crash point kills (this one, or the driver a worker serves); None unarmed."""
    return _pid if ARMED else None


def _kill() -> None:
    os.kill(_pid, signal.SIGKILL)


def crash_point(name: str) -> None:
    """Die here (or `INORDER_CRASH_DELAY_US` from here) when the sweep armed this point."""
    global _hits
    if ARMED is None or name != _point:
        return
    _hits += 1
    if _hits != _nth:
        return
    if _delay_us:
        timer = threading.Timer(_delay_us / 1e6, _kill)
        timer.daemon = True
        timer.start()
    else:
        _kill()
