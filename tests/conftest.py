"""Shared fixtures: one Spark session for the whole test run: local[2], or with INORDER_TEST_SPARK=warm a
session on a warm Spark Connect server of the run's own, as `inorder run` gets one (tests/cli/test_warm_server.py
runs the engine's property tests that way in a pytest process of their own: a process holds classic or Connect
sessions, not both)."""

from __future__ import annotations

import json
import os
import sys

import pytest

import tests.profiles  # noqa: F401 - registers and loads the Hypothesis profile
from scripts.cluster import QUICK_JVM
from tests.command import clean_os_environ

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# every `inorder` process a test starts gets a quick-starting driver JVM (C1 only, serial GC): about 4 s
# less per `inorder run` on 2 cores. Tests check behaviour; the benchmarks measure speed, without it.
os.environ.setdefault("INORDER_SPARK_CONF", json.dumps({"spark.driver.extraJavaOptions": QUICK_JVM}))
# a run with no server up starts local[*] of its own, as before warm by default: a pytest process holds the classic
# `spark` session, and Dagster runs in it cannot open Connect ones beside it. The tests of the users' default set
# INORDER_SPARK_WARM=1 themselves (or scrub INORDER_*: the README's quickstart and tutorial), and
# `no_server_outlives_its_test` stops what they start.
os.environ.setdefault("INORDER_SPARK_WARM", "0")
os.environ.setdefault("INORDER_SPARK_IDLE_MINUTES", "1")  # a server whose test's fixture outlives it (module scope)


TIERS = ("fast", "engine", "cli", "dagster", "e2e")  # the folders under tests/, each its marker (docs/TESTING.md)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.jvm)  # `make mutation` leaves these out: a JVM per mutant is out of reach
        if _builds_a_module_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=_longest_first)


def _builds_a_module_fixture(item) -> bool:
    """The test uses a fixture its own module builds once for all its tests (a store, a sweep's reference runs):
    scripts/test.sh's `--dist loadgroup` keeps such a module's tests on one worker, and spreads the others."""
    fixtures = getattr(item, "_fixtureinfo", None)
    return fixtures is not None and any(
        definition.scope == "module" and definition.baseid == item.nodeid.split("::")[0]
        for definitions in fixtures.name2fixturedefs.values() for definition in definitions)


def _longest_first(item) -> int:
    """The workers take tests in collection order: the long ones first (a property test through Spark, then the
    tiers that start processes), so that no long test starts last while the other workers sit idle."""
    property_test = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
    if property_test and "spark" in getattr(item, "fixturenames", ()):
        return 0
    tier = item.path.parent.name
    return 1 + ("e2e", "cli", "dagster", "engine", "fast").index(tier) if tier in TIERS else len(TIERS) + 1


# the home of the warm `spark` fixture's server: the fixture stops it itself, after its session (a session left
# open on a stopped server retries its release for minutes)
SESSION_SERVER_HOME = "session-spark"


def _stop_servers_under(root) -> None:
    from pipelines.spark.server import ServerFiles, stop

    for state in root.rglob("spark/server.json"):
        if not state.parent.parent.name.startswith(SESSION_SERVER_HOME):
            stop(ServerFiles(state.parent))


@pytest.fixture(autouse=True)
def no_server_outlives_its_test(request):
    """Stops every warm Spark server a test started under its tmp_path (runs start one by default), whatever failed."""
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp_path is not None:
        _stop_servers_under(tmp_path)


@pytest.fixture(autouse=True, scope="module")
def no_server_outlives_its_module(tmp_path_factory):
    """The same for the homes of a module's fixtures (under this worker's base folder)."""
    yield
    _stop_servers_under(tmp_path_factory.getbasetemp())


@pytest.fixture
def home(tmp_path):
    """A home of the test's own, its folders made (`home.root` is what an `inorder` command takes)."""
    from pipelines.store.database import Home

    return Home(tmp_path / "home").ensure()


@pytest.fixture
def clean_env(monkeypatch) -> None:
    """The test's os.environ without the INORDER_* and DAGSTER_* settings of the run, a user's but for the quick JVM
    (tests/command.py)."""
    clean_os_environ(monkeypatch, as_a_user=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pipelines.spark.session import spark_session

    if os.environ.get("INORDER_TEST_SPARK") == "warm":
        yield from _warm_session(tmp_path_factory.mktemp(SESSION_SERVER_HOME))
        return
    # the session the whole run shares keeps the JVM's optimising compiler (no QUICK_JVM)
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g",
                                         "spark.driver.extraJavaOptions": ""})
    yield session
    session.stop()


def _warm_session(root):
    """The session every `inorder` process of a home with a warm server gets (`inorder spark start`; its
    code version's session, with the pass's files read where the planner wrote them), on a server of
    the test run's own, stopped at its end whatever fails."""
    from pipelines.spark.server import ServerFiles, start, stop
    from pipelines.spark.session import spark_session

    from pipelines.config import Settings
    from pipelines.store.database import Home

    files = ServerFiles.of(root)
    try:
        start(files, idle_timeout_seconds=3600)
        session = spark_session(home=Home.of(Settings(), root))
        yield session
        session.stop()  # before the server: a client left open retries a stopped server for minutes
    finally:
        stop(files)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the whole test run (tests/postgres_server.py): its libpq connection string.
    Never skipped: without the server binaries the tests that need it fail, saying how to install them.
    INORDER_TEST_POSTGRES names a server already running instead (`make mutation`'s, one for all its runs)."""
    from tests.postgres_server import PostgresServer

    if os.environ.get("INORDER_TEST_POSTGRES"):
        yield os.environ["INORDER_TEST_POSTGRES"]
        return
    with PostgresServer() as server:
        yield server.dsn
