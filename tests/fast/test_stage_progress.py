"""The pass's progress line (`stage_progress`) without a JVM: a classic session's status tracker stood in for."""

from __future__ import annotations

import threading
import time

from pipelines.spark import session


def test_a_pass_ends_though_its_progress_line_waits_on_a_lock_the_pass_holds(monkeypatch):
    """A Ctrl-C that lands while `inorder run`'s main thread is inside logging's lock leaves the lock held by that
    thread, and the poller, saying its line through Dagster's logger, waits on it: the run hung in the join,
    ignoring the Ctrl-C it had already taken. A lock of the test's own stands in for logging's."""
    monkeypatch.setattr(session, "_stage_line", lambda: "stage 1/1 (0/1 tasks)")
    lock, saying = threading.RLock(), threading.Event()

    def say(line: str) -> None:
        saying.set()
        with lock:
            pass

    def the_pass() -> None:
        with lock:
            with session.stage_progress("pass 1/1", say, every_seconds=0):
                assert saying.wait(10), "the poller said no line"
            ended.set()

    ended = threading.Event()
    started = time.monotonic()
    threading.Thread(target=the_pass, daemon=True).start()
    assert ended.wait(session.STAGE_POLLER_JOIN_SECONDS + 10), "the pass waited for its progress poller for good"
    assert time.monotonic() - started < session.STAGE_POLLER_JOIN_SECONDS + 5
