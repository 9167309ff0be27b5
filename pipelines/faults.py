"""Named crash points, for the fault-injection sweep (scripts/crash_sweep.py, tests/test_crash.py).

`INORDER_CRASH_AT=<point>[:<n>]` kills the `inorder` process with SIGKILL the n-th time (default:
the first) this process passes `crash_point("<point>")`. With `INORDER_CRASH_DELAY_US=<us>` the
kill comes that many microseconds after the point instead, from a timer thread, so it can land
inside whatever the code does next (a DuckDB COMMIT, a checkpoint). Unset, a crash point is one
attribute test: production code pays nothing for it.

Spark's Python workers are separate processes: a crash point reached there kills the driver
(`INORDER_CRASH_PID`, set on arming and inherited by the JVM and its workers), which is what a
crash of `inorder run` in the middle of ordering or applying looks like.
"""

from __future__ import annotations

import os
import signal
import threading

ARMED: str | None = os.environ.get("INORDER_CRASH_AT") or None
_point, _, _nth = (ARMED or "").partition(":")
_NTH = int(_nth or 1)
_DELAY_US = int(os.environ.get("INORDER_CRASH_DELAY_US") or 0)
_hits = 0
if ARMED:
    os.environ.setdefault("INORDER_CRASH_PID", str(os.getpid()))


def _kill() -> None:
    os.kill(int(os.environ.get("INORDER_CRASH_PID") or os.getpid()), signal.SIGKILL)


def crash_point(name: str) -> None:
    """Die here (or `INORDER_CRASH_DELAY_US` from here) when the sweep armed this point."""
    global _hits
    if ARMED is None or name != _point:
        return
    _hits += 1
    if _hits != _NTH:
        return
    if _DELAY_US:
        timer = threading.Timer(_DELAY_US / 1e6, _kill)
        timer.daemon = True
        timer.start()
    else:
        _kill()
