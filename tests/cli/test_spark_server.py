"""The warm Spark server, real Spark Connect servers and real `inorder run` processes on homes of the shop's
views. Warm by default: the first run of a home starts a server and says so, later runs reuse it; a server
that died, or one of another build (venv or inorder version), is replaced, and a master that is set is used
as it is. `inorder spark start|stop|status`: a run on the warm home starts no JVM of its own and gives the
store a `local[*]` run of the same batches gives; a stopped server leaves no process, and with
INORDER_SPARK_WARM=0 runs start `local[*]`; an idle server stops by itself."""

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

from pipelines.spark.server import ServerFiles, end_groups, process_alive, process_parents, this_build
from pipelines.store.database import Home
from tests.command import INORDER, clean_environment, inorder
from tests.domains import SHOP_VIEWS
from tests.harness import assert_same_store, read_store

# a JVM server and five runs: about a minute on 2 cores, in `.ci/run`

NOW = "2026-11-02T00:00:00Z"


def shop(home: Path, **settings: str) -> dict[str, str]:
    """The environment of `inorder` on `home` with the shop's views, a user's: no master set, warm by default (the
    test run's INORDER_SPARK_WARM=0 is left out), and `settings`."""
    return clean_environment(home, "shop.views", as_a_user=True, **settings)


def status(home: Path, code: int) -> dict:
    return json.loads(inorder(shop(home), "spark", "status", "--json", code=code).stdout)


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


def watched_run(home: Path, jvm_pid: int | None = None, **settings: str) -> tuple[bool, set[int]]:
    """`inorder run` on `home`, watched while it runs: (did it start a JVM of its own, the warm
    server's Python daemons that served it)."""
    process = subprocess.Popen([INORDER, "run", "--now", NOW, "--json"], env=shop(home, **settings),
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
    inorder(shop(warm), "init", str(warm))
    inorder(shop(warm), "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "900", "--streams",
            "25", "--batches", "3", "--gaps", "0.05", "--poison", "0.02", "--disorder", "0.2", "--seed", "5")
    inorder(shop(local), "init", str(local))
    for batch in (warm / "landing").iterdir():
        shutil.copy(batch, local / "landing")
    yield warm, local
    inorder(shop(warm), "spark", "stop")


def test_runs_use_the_warm_server_give_the_local_store_and_fall_back_once_it_stops(homes):
    warm, local = homes
    assert status(warm, code=3)["running"] is False
    local_run = ThreadPoolExecutor(1).submit(watched_run, local, INORDER_SPARK_WARM="0")  # while the server starts
    started = inorder(shop(warm), "spark", "start")
    endpoint = started.stdout.strip()
    assert endpoint.startswith("sc://127.0.0.1:")
    assert inorder(shop(warm), "spark", "start").stdout.startswith(f"already running: {endpoint}")
    server = status(warm, code=0)
    assert server["running"] and server["endpoint"] == endpoint and server["idle_timeout_seconds"] == 15 * 60

    own_jvm, daemons = watched_run(warm, server["jvm_pid"])
    assert not own_jvm, "a run with the warm server up started a JVM"
    assert daemons, "no Python daemon of the warm server served the run"
    assert local_run.result(timeout=300)[0], "the run with no server for its home started no JVM"
    assert_same_store(read_store(Home(warm), SHOP_VIEWS), read_store(Home(local), SHOP_VIEWS))
    # a second run of the same code reattaches to its code version's session: the same warm daemon serves it
    inorder(shop(warm), "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "100", "--streams",
            "5", "--batches", "1", "--seed", "7", "--prefix", "more")
    _, again = watched_run(warm, server["jvm_pid"])
    assert again and again <= daemons, "the second run of the same code did not reuse the warm session"

    stopped = inorder(shop(warm), "spark", "stop")
    assert stopped.stdout.startswith(f"stopped the warm Spark server {endpoint}")
    assert gone(server["pid"], server["jvm_pid"], *daemons, within=5)
    assert not (warm / "spark" / "server.json").exists()
    assert status(warm, code=3)["running"] is False
    assert inorder(shop(warm), "spark", "stop").stdout.startswith("no warm Spark server is running")

    inorder(shop(warm), "generate", "--domain", "shop", "--out", str(warm / "landing"), "--events", "100", "--streams",
            "5", "--batches", "1", "--seed", "6")
    own_jvm, _ = watched_run(warm, INORDER_SPARK_WARM="0")
    assert own_jvm, "with the server stopped and INORDER_SPARK_WARM=0, the run did not start Spark local[*]"
    assert not (warm / "spark" / "server.json").exists()


def test_an_idle_server_and_one_whose_home_is_deleted_stop_by_themselves(tmp_path):
    home = tmp_path / "home"
    inorder(shop(home), "init", str(home))
    inorder(shop(home), "spark", "start", "--idle-timeout", "0.05")  # 3 s
    state = ServerFiles.of(home).read_state()
    try:
        assert state is not None and state.idle_timeout_seconds == pytest.approx(3)
        assert gone(state.pid, state.jvm_pid, within=45), "the idle server is still running"
    finally:
        inorder(shop(home), "spark", "stop")
    assert status(home, code=3)["running"] is False
    assert "stopping: idle for" in (home / "spark" / "server.log").read_text()

    # a home deleted under its server (a demo run again): no run finds the server again, and it stops, now
    inorder(shop(home), "spark", "start")
    state = ServerFiles.of(home).read_state()
    assert state is not None and state.idle_timeout_seconds == 15 * 60
    shutil.rmtree(home)
    try:
        assert gone(state.pid, state.jvm_pid, within=45), "the server of a deleted home is still running"
    finally:
        if process_alive(state.pid):  # no fixture finds it in the deleted home
            end_groups([state.pid], wait_seconds=5)


def test_warm_by_default_a_server_is_started_once_reused_and_replaced_when_dead_or_of_another_build(tmp_path):
    home, cold, other = tmp_path / "home", tmp_path / "cold", tmp_path / "other"
    for h in (home, cold, other):
        inorder(shop(h), "init", str(h))
    files = ServerFiles.of(home)

    def land(seed: int) -> None:  # the same batch into the home and into the cold home it is compared with
        for h in (home, cold):
            inorder(shop(h), "generate", "--domain", "shop", "--out", str(h / "landing"), "--events", "300",
                    "--streams", "10", "--batches", "1", "--gaps", "0.05", "--poison", "0.02", "--seed", str(seed),
                    "--prefix", f"b{seed}-")

    def run(**settings: str) -> str:
        return inorder(shop(home, **settings), "run", "--now", NOW).stderr

    land(1)
    first = run()
    notice = "starting a Spark server for this home; it stops after 15 minutes idle"
    # said once, first: the server starts while the run imports Dagster and plans, and the run waits for it
    assert notice in first.splitlines()[0] and first.count(notice) == 1, first
    server = files.read_state()
    assert server is not None and server.build == this_build() and process_alive(server.jvm_pid)

    land(2)
    own_jvm, daemons = watched_run(home, server.jvm_pid)
    assert not own_jvm and daemons, "the second run did not use the server the first one started"
    assert files.read_state() == server

    # a master that is set is used as it is: a run of another home on this server starts none for its own
    inorder(shop(other), "generate", "--domain", "shop", "--out", str(other / "landing"), "--events", "100",
            "--streams", "5", "--batches", "1", "--seed", "9")
    elsewhere = inorder(shop(other, INORDER_SPARK_MASTER=server.endpoint), "run", "--now", NOW)
    assert "starting a Spark server" not in elsewhere.stderr and not (other / "spark").exists()
    assert files.read_state() == server

    # the server died (its supervisor and JVM killed at once): the next run starts another
    os.killpg(server.pid, 9)
    assert gone(server.pid, server.jvm_pid)
    land(3)
    assert "starting a Spark server for this home" in run()
    replacement = files.read_state()
    assert replacement is not None and replacement.pid != server.pid
    inorder(shop(home), "spark", "stop")

    # a server of another build (another venv or inorder version) is replaced, never used
    subprocess.run([sys.executable, "-c", "import sys, pathlib; from pipelines.spark.server import ServerFiles, start; "
                    "start(ServerFiles.of(pathlib.Path(sys.argv[1])), 900, build='/another/venv/bin/python 0123456789abcdef')",
                    str(home)], check=True, env=shop(home), timeout=300)
    foreign = files.read_state()
    assert foreign is not None and foreign.build != this_build()
    assert "of another inorder or venv: the next run replaces it" in inorder(shop(home), "spark", "status").stdout
    assert status(home, 0)["this_build"] is False
    land(4)
    said = run(INORDER_SPARK_IDLE_MINUTES="0.25")
    newest = files.read_state()
    assert "replacing the Spark server of another inorder or venv for this home" in said, said
    assert gone(foreign.pid, foreign.jvm_pid)
    assert newest is not None and newest.build == this_build() and newest.idle_timeout_seconds == pytest.approx(15)
    assert gone(newest.pid, newest.jvm_pid, within=75), "a server started with 15 s of idle time is still up"

    # every batch once, whatever served it: the views one cold local[*] run of the same batches gives (the engine's
    # tables keep how the batches were split into passes)
    inorder(shop(cold, INORDER_SPARK_WARM="0"), "run", "--now", NOW)
    tables = {t.name for v in SHOP_VIEWS for t in v.tables}
    warm_views, cold_views = ({name: rows for name, rows in read_store(Home(h), SHOP_VIEWS).items() if name in tables}
                              for h in (home, cold))
    assert warm_views.keys() == tables
    assert_same_store(warm_views, cold_views)
