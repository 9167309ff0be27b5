"""Crash anywhere, the CI part: a few crash points of tests/crash_sweep.py (the full sweep runs from
`./scripts/reliability.sh`). Each kills `inorder run` with SIGKILL, re-runs it, and needs the whole
store to equal the uninterrupted run's, and what it published to a real PostgreSQL to equal what the
uninterrupted run published (a crash between the DuckDB commit and the publication among them).
One kills `inorder rebuild` inside the swap's COMMIT: the live view is the old or the new, whole."""

from __future__ import annotations

import pytest

from tests.crash_sweep import QUICK, Crash, Sweep


# kept to the worker's end: a module-scoped one was built again whenever a worker ran the cases apart (xdist
# tears a module's fixtures down when the worker's next test is not known yet)
@pytest.fixture(scope="session")
def sweep(tmp_path_factory, postgres) -> Sweep:
    sweep = Sweep(tmp_path_factory.mktemp("crash"), seed=3, postgres=postgres)
    sweep.prepare(runs=3)  # QUICK kills runs 1, 2 and 3 and goes on from run 1 to run 2
    return sweep


# one worker takes every case, on one set of reference runs: a second worker's set cost as much again (a sixth
# of the sweep's 860 worker-seconds in a CI run), for a sweep that still ends well before the run does
@pytest.mark.xdist_group("crash")
@pytest.mark.parametrize("crash", [pytest.param(c, id=c.label) for c in QUICK])
def test_killed_run_then_rerun_equals_uninterrupted(sweep: Sweep, crash: Crash):
    outcome = sweep.try_rebuild_crash(crash) if crash.rebuild else sweep.try_crash(crash, go_on=crash is QUICK[0])
    assert outcome.killed, "the run was not killed"
    assert outcome.identical, outcome.detail
    assert outcome.conserved
    assert outcome.continued is not False, outcome.detail
