"""`inorder spark start|stop|status`: a real warm Spark Connect server, real `inorder run` processes
on homes of the shop's views. A run on the warm home uses the server and starts no JVM of its own,
and gives the store a `local[*]` run of the same batches gives; a stopped server leaves no process,
and runs fall back to `local[*]`; an idle server stops by itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from pipelines.spark.server import ServerFiles, process_alive, process_parents
from pipelines.store.database import Home
from tests.domains import SHOP_VIEWS
from tests.harness import assert_same_store, read_store

# a JVM server and five runs: about a minute on 2 cores, in `.ci/run`

INORDER = str(Path(sys.executable).with_name("inorder"))
NOW = "2026-11-02T00:00:00Z"


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("INORDER_", "DAGSTER_HOME")) or k == "INORDER_SPARK_CONF"}  # no master set
    return {**env, "INORDER_HOME": str(home), "INORDER_VIEWS": "shop.views"}


def inorder(home: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([INORDER, *args], env=environment(home), capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    return done


def status(home: Path, code: int) -> dict:
    return json.loads(inorder(home, "spark", "status", "--json", code=code).stdout)


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "java"
    except OSError:
        return False


def _daemons_serving(jvm_pid: int, client_pid: int) -> set[int]:
    """The warm server's Python daemons whose session folder names `client_pid` (pipelines/spark/server.py)."""
    found = set()
    for pid, parent in process_parents().items():
        if parent == jvm_pid:
            try:
                if f"inorder-client-{client_pid}" in os.listdir(f"/proc/{pid}/cwd"):
                    found.add(pid)
            except OSError:
                continue
    return found


def watched_run(home: Path, jvm_pid: int | None = None) -> tuple[bool, set[int]]:
    """`inorder run` on `home`, watched while it runs: (did it start a JVM of its own, the warm
    server's Python daemons that served it)."""
    process = subprocess.Popen([INORDER, "run", "--now", NOW, "--json"], env=environment(home),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    own_jvm, daemons = False, set()
    while process.poll() is None:
        parents = process_parents()
        own_jvm |= any(_is_java(pid) and _descends(pid, process.pid, parents) for pid in parents)
        if jvm_pid is not None:
            daemons |= _daemons_serving(jvm_pid, process.pid)
        time.sleep(0.2)
    out, err = process.communicate()
    assert process.returncode == 0, out + err
    assert json.loads(out)["ran"] == "batches"
    return own_jvm, daemons


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
    return False


def gone(*pids: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(process_alive(p) for p in pids)


@pytest.fixture(scope="module")
def homes(tmp_path_factory) -> Iterator[tuple[Path, Path]]:
    """Two homes with the same three shop batches: one for the warm server, one for a local[*] run.
    No server outlives the module, whatever fails."""
    root = tmp_path_factory.mktemp("spark-server")
    warm, local = root / "warm", root / "local"
    inorder(warm, "init", str(warm))
    inorder(warm, "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "900", "--streams",
            "25", "--batches", "3", "--gaps", "0.05", "--poison", "0.02", "--disorder", "0.2", "--seed", "5")
    inorder(local, "init", str(local))
    for batch in (warm / "landing").iterdir():
        shutil.copy(batch, local / "landing")
    yield warm, local
    inorder(warm, "spark", "stop")


def test_runs_use_the_warm_server_give_the_local_store_and_fall_back_once_it_stops(homes):
    warm, local = homes
    assert status(warm, code=3)["running"] is False
    local_run = ThreadPoolExecutor(1).submit(watched_run, local)  # while the server starts
    started = inorder(warm, "spark", "start")
    endpoint = started.stdout.strip()
    assert endpoint.startswith("sc://127.0.0.1:")
    assert inorder(warm, "spark", "start").stdout.startswith(f"already running: {endpoint}")
    server = status(warm, code=0)
    assert server["running"] and server["endpoint"] == endpoint and server["idle_timeout_seconds"] == 30 * 60

    own_jvm, daemons = watched_run(warm, server["jvm_pid"])
    assert not own_jvm, "a run with the warm server up started a JVM"
    assert daemons, "no Python daemon of the warm server served the run"
    assert local_run.result(timeout=300)[0], "the run with no server for its home started no JVM"
    assert_same_store(read_store(Home(warm), SHOP_VIEWS), read_store(Home(local), SHOP_VIEWS))
    # a second run of the same code reattaches to its code version's session: the same warm daemon serves it
    inorder(warm, "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "100", "--streams",
            "5", "--batches", "1", "--seed", "7", "--prefix", "more")
    _, again = watched_run(warm, server["jvm_pid"])
    assert again and again <= daemons, "the second run of the same code did not reuse the warm session"

    stopped = inorder(warm, "spark", "stop")
    assert stopped.stdout.startswith(f"stopped the warm Spark server {endpoint}")
    assert gone(server["pid"], server["jvm_pid"], *daemons, within=5)
    assert not (warm / "spark" / "server.json").exists()
    assert status(warm, code=3)["running"] is False
    assert inorder(warm, "spark", "stop").stdout.startswith("no warm Spark server is running")

    inorder(warm, "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "100", "--streams",
            "5", "--batches", "1", "--seed", "6")
    own_jvm, _ = watched_run(warm)
    assert own_jvm, "with the server stopped, the run did not start Spark local[*]"


def test_an_idle_server_stops_by_itself(tmp_path):
    home = tmp_path / "home"
    inorder(home, "init", str(home))
    inorder(home, "spark", "start", "--idle-timeout", "0.05")  # 3 s
    state = ServerFiles.of(home).read_state()
    try:
        assert state is not None and state.idle_timeout_seconds == pytest.approx(3)
        assert gone(state.pid, state.jvm_pid, within=45), "the idle server is still running"
    finally:
        inorder(home, "spark", "stop")
    assert status(home, code=3)["running"] is False
    assert "stopping: idle for" in (home / "spark" / "server.log").read_text()
