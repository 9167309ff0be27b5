"""Two `inorder run`s on one home at once, and a Dagster run during a CLI run: one waits or fails
with one clear line, nothing is applied twice, and the store equals a single run's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.command import INORDER, inorder
from tests.crash_sweep import Step, first_difference, land, run_env, stage, store_snapshot

STEP = Step("2026-11-02T00:00:00Z", ("batch-00001.jsonl", "batch-00002.jsonl", "batch-00003.jsonl", "notes.txt"))
DAGSTER = str(Path(sys.executable).with_name("dagster"))


def _start_run(home: Path) -> subprocess.Popen:
    return subprocess.Popen([INORDER, "run", "--now", STEP.now], env=run_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, dict]:
    """The batches, and the store of one uninterrupted, unaccompanied run over them."""
    root = tmp_path_factory.mktemp("concurrency")
    stage(root / "staging", seed=5)
    home = root / "single"
    land(root / "staging", home, STEP)
    inorder(run_env(home), "run", "--now", STEP.now)
    return root / "staging", store_snapshot(home)


def test_two_cli_runs_at_once_one_fails_with_one_line(single, tmp_path):
    staging, want = single
    home = tmp_path / "home"
    land(staging, home, STEP)
    first = _start_run(home)
    for line in first.stderr:  # the first holds the run lock: it is ingesting
        if "ingest 1/" in line:
            break
    second = _start_run(home)
    results = [(p.wait(timeout=600), *p.communicate()) for p in (first, second)]
    assert second.returncode == 1  # started while the first was running (proved above), and refused
    assert sorted(code for code, _, _ in results) == [0, 1], results
    (_, out, err), = [r for r in results if r[0] == 1]
    assert out == "" and err.splitlines() == [
        f"inorder: error: another `inorder run` is in progress on {home}; try again when it ends"]
    assert first_difference(store_snapshot(home), want) == ""


def test_a_dagster_run_during_a_cli_run_waits_for_it(single, tmp_path):
    """The CLI ingests three batches; meanwhile Dagster ingests the third itself and projects."""
    staging, want = single
    home = tmp_path / "home"
    land(staging, home, STEP)
    cli = _start_run(home)
    for line in cli.stderr:  # in flight: its partitions exist, its first batch is archived
        if "ingest 1/" in line:
            break
    else:
        pytest.fail(f"the CLI run ended before ingesting: {cli.wait()}")
    cli_ended: list[float] = []
    watcher = threading.Thread(target=lambda: (cli.wait(), cli_ended.append(time.time())))
    watcher.start()
    tags = {"dagster/partition": "batch-00003", "inorder/now": STEP.now}
    assert cli.poll() is None  # the CLI run is still going when the Dagster run starts
    dagster = subprocess.run(
        [DAGSTER, "job", "execute", "-m", "inorder.definitions", "-j", "ingest_batch", "--tags", json.dumps(tags)],
        env={**run_env(home), "DAGSTER_HOME": str(home / "dagster")}, capture_output=True, text=True, timeout=600)
    rest = cli.stderr.read()
    assert cli.wait(timeout=600) == 0, rest
    watcher.join(timeout=60)
    # they overlapped: the Dagster run started before the CLI run ended
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        (record,) = [r for r in instance.get_run_records() if r.dagster_run.job_name == "ingest_batch"]
    assert record.start_time is not None and cli_ended and record.start_time < cli_ended[0], \
        (record.start_time, cli_ended)
    assert dagster.returncode == 0, dagster.stdout[-3000:] + dagster.stderr[-3000:]
    assert "RUN_SUCCESS" in dagster.stdout + dagster.stderr
    assert first_difference(store_snapshot(home), want) == ""
