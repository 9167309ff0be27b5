"""The same runs on `local[2]`, on a standalone cluster (`spark://`) and through a Spark Connect
server (`sc://`), chosen by configuration alone, give the same read store.

A loopback cluster (scripts/cluster.py: master, two 1-core workers, Connect server on the
master) runs for this module. Each master gets its own INORDER_HOME and three `inorder run`
subprocesses: batches 1-2, a tick 15 minutes later (gaps time out), then batch 3 (late messages).
Spark event logs show what the executors read: the archive's Parquet files locally, messages
shipped from the driver on the cluster; executor work dirs show the shipped code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest

from pipelines.store.database import Home
from scripts.cluster import QUICK_JVM, Cluster, event_log_conf
from tests.harness import assert_same_store, read_store
from tests.command import clean_environment, inorder
from tests.domains import BANK_VIEWS

pytestmark = [
    pytest.mark.long,  # scripts/reliability.sh runs it; CI's time budget does not hold it
    pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
                       reason="no Java: the standalone master, workers and Spark Connect server run on the JVM")]

STEPS = [  # (batches that land before the run, logical time)
    (["batch-00001", "batch-00002"], "2026-11-02T00:00:00Z"),
    ([], "2026-11-02T00:15:00Z"),  # a tick: open gaps are older than gap_timeout (600 s) and are skipped
    (["batch-00003"], "2026-11-02T00:16:00Z"),  # messages for the skipped gaps are late
]
WALL_CLOCK_COLUMNS = {"mtime_ns"}  # ingest_log: the landing file's mtime differs between copies


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()  # stops what it started when it fails
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("batches")
    inorder(clean_environment(), "generate", "--out", str(out), "--events", "5000", "--streams", "250",
            "--batches", "3", timeout=120)
    return out


def run_chain(root: Path, batches: Path, master: str, conf: dict[str, str],
              extra: dict[str, str] | None = None) -> tuple[Home, list[float]]:
    """The three steps in one INORDER_HOME, each an `inorder run` subprocess (with `extra` environment
    variables); returns their wall times."""
    home = Home(root).ensure()
    env = clean_environment(root, as_a_user=True, INORDER_SPARK_MASTER=master, INORDER_SPARK_CONF=json.dumps(conf),
                            PYSPARK_PYTHON=sys.executable, **(extra or {}))
    seconds = []
    for names, now in STEPS:
        for name in names:
            shutil.copy(batches / f"{name}.jsonl", home.landing)
        started = time.perf_counter()
        inorder(env, "run", "--now", now, timeout=300)
        seconds.append(time.perf_counter() - started)
    return home, seconds


def ingest_log(home: Home) -> list[dict]:
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        cursor = con.execute("SELECT * FROM inorder.ingest_log ORDER BY entry_idx")
        names = [d[0] for d in cursor.description]
        return [{n: v for n, v in zip(names, row) if n not in WALL_CLOCK_COLUMNS} for row in cursor.fetchall()]
    finally:
        con.close()


def event_logs(folder: Path) -> dict[str, str]:
    """Application id → its Spark event log text (Spark 4 writes `eventlog_v2_<app id>/events_…` folders)."""
    return {app.name.removeprefix("eventlog_v2_"): "".join(p.read_text() for p in sorted(app.iterdir()))
            for app in folder.iterdir() if app.is_dir()}


def shipped_code(cluster: Cluster, app_id: str) -> list[Path]:
    return sorted((cluster.folder / "work").glob(f"worker-*/{app_id}/**/inorder-code-*.zip"))


@pytest.fixture(scope="module")
def local_run(batches: Path, tmp_path_factory):
    """The local[2] chain, in a thread: it needs no cluster, so it runs while the cluster starts."""
    root = tmp_path_factory.mktemp("local")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run_chain, root / "home", batches, "local[2]", chain_conf(root / "events"))
        yield root / "events", future


def chain_conf(events: Path) -> dict[str, str]:
    """Event logs, and quick-starting driver and executor JVMs (each run is a new application)."""
    return {**event_log_conf(events), "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM}


@pytest.fixture(scope="module")
def runs(local_run, cluster: Cluster, batches: Path, tmp_path_factory):
    """(home, event log folder, step seconds) per master; the cluster masters one after the other,
    since both applications share the workers' cores."""
    out = {}
    for name, master in (("standalone", cluster.master_url), ("connect", cluster.connect_url)):
        root = tmp_path_factory.mktemp(name)
        events = cluster.folder / "events" if name == "connect" else root / "events"
        out[name] = (*run_chain(root / "home", batches, master, chain_conf(root / "events")), events)
    local_events, future = local_run
    out["local"] = (*future.result(), local_events)
    print("\nseconds per step (batches 1-2, tick, batch 3): "
          + "; ".join(f"{name} {', '.join(f'{s:.1f}' for s in seconds)}" for name, (_, seconds, _) in out.items()))
    return out


def test_cluster_runs_give_the_local_store(runs):
    local_home = runs["local"][0]
    local = read_store(local_home, BANK_VIEWS)
    # the scenario reaches the paths that matter: pending buffers, gaps timed out by the tick, late messages
    assert any(b["pending"] for b in local["batches"] if b["batch_id"].startswith("batch-00001")), "no pending buffer"
    assert local["gaps"], "no gap timed out"
    assert any(e["kind"] == "late" for e in local["errors"]), "no late message"
    assert any(b["kind"] == "tick" for b in local["batches"]), "no tick was projected"
    for name in ("standalone", "connect"):
        home = runs[name][0]
        assert_same_store(read_store(home, BANK_VIEWS), local)
        assert ingest_log(home) == ingest_log(local_home), f"ingest_log on {name} differs from local"


def test_local_executors_read_the_archive(runs):
    home, _, events = runs["local"]
    logs = event_logs(events)
    assert logs, "the local run wrote no event log"
    assert any(f"{home.archive}/entry=" in text for text in logs.values()), \
        "the local run did not read the archive's Parquet files in Spark"


@pytest.mark.parametrize("name", ["standalone", "connect"])
def test_cluster_executors_get_messages_and_code_shipped(runs, cluster, name):
    home, _, events = runs[name]
    logs = event_logs(events)
    assert logs, f"no event log for the {name} runs"
    passes = {app: text for app, text in logs.items() if "MapInArrow" in text}
    assert passes, f"no projection pass in the {name} event logs"
    for app, text in logs.items():
        assert str(home.archive) not in text, f"{name} app {app} read the driver's archive files"
    for app in passes:
        assert shipped_code(cluster, app), f"inorder's code was not shipped to the executors of {name} app {app}"


def test_a_view_module_outside_the_repository_is_shipped_to_the_executors(runs, cluster, tmp_path):
    """INORDER_VIEWS names a module only the driver has (on its PYTHONPATH): cluster executors get it
    with the engine's code, and give the local store. (After `runs`: the workers' cores are free.)"""
    from tests.cli.test_own_views import helpdesk_outside, ticket_records

    outside = helpdesk_outside(tmp_path)
    lines = "".join(json.dumps(r) + "\n" for r in ticket_records())
    stores = {}
    for name, master in (("local", "local[2]"), ("standalone", cluster.master_url)):
        root = tmp_path / name
        (root / "landing").mkdir(parents=True)
        (root / "landing" / "tickets.jsonl").write_text(lines)
        env = clean_environment(root, "helpdesk_views", as_a_user=True, INORDER_SPARK_MASTER=master,
                                PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(outside),
                                INORDER_SPARK_CONF=json.dumps(chain_conf(root / "events")))
        inorder(env, "run", "--now", "2026-03-05T00:00:00Z", timeout=300, cwd=outside)
        con = duckdb.connect(str(root / "store.duckdb"), read_only=True)
        try:
            stores[name] = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                            for t in ("tickets", "ticket_log", "ticket_days")}
        finally:
            con.close()
    assert stores["standalone"] == stores["local"] and stores["local"]["tickets"]
    apps = [app for app, text in event_logs(tmp_path / "standalone" / "events").items() if "MapInArrow" in text]
    assert apps and all(shipped_code(cluster, app) for app in apps)
    for app in apps:
        (code,) = shipped_code(cluster, app)[:1]
        assert "helpdesk_views.py" in zipfile.ZipFile(code).namelist()


def test_with_a_shared_location_state_and_output_never_pass_through_the_driver(runs, cluster, batches, tmp_path):
    """INORDER_ARCHIVE_SHARED=1 and INORDER_SCRATCH on storage every executor mounts (here: this machine's
    disk, which the loopback workers share): the executors read the archive and the pass's state files
    and write its output files themselves, and the store is the local run's."""
    shared = tmp_path / "shared-scratch"
    root = tmp_path / "shared"
    conf = chain_conf(root / "events")
    home, _ = run_chain(root / "home", batches, cluster.master_url, conf,
                        extra={"INORDER_ARCHIVE_SHARED": "1", "INORDER_SCRATCH": str(shared)})
    assert_same_store(read_store(home, BANK_VIEWS), read_store(runs["local"][0], BANK_VIEWS))
    passes = {app: text for app, text in event_logs(root / "events").items() if "MapInArrow" in text}
    assert len(passes) == 3  # batches 1-2, the tick, batch 3
    for app, text in passes.items():
        assert f"{shared}/inorder-" in text and "/pass/output" in text, f"app {app} did not write its output there"
    # the tick and batch 3 find state (the first run starts from none): the executors read it where DuckDB wrote it
    assert sum(re.search(rf"{re.escape(str(shared))}/inorder-[^ ]*/pass/inputs-[0-9a-f]+\.parquet", text) is not None
               for text in passes.values()) == 2
    assert sum(str(home.archive) in text for text in passes.values()) == 2  # the runs with a batch read it themselves


WIDE_STREAMS = int(os.environ.get("INORDER_TEST_WIDE_STREAMS", "300000"))  # 1000000 for the 1M figure


def test_a_pass_of_300k_streams_with_state_completes_on_the_cluster(cluster, tmp_path):
    """The wide pass (bench/studies/side_by_side.py) at 300k streams × 3 bank views on the loopback cluster, with
    a shared location: a store of seq 1-2 for every stream, then one pass with seq 3 for each."""
    from bench import data

    store_batch, wide_batch = data.wide_batches(tmp_path / "inputs", WIDE_STREAMS)
    root = tmp_path / "wide"
    home = Home(root / "home").ensure()
    env = clean_environment(home.root, as_a_user=True, INORDER_SPARK_MASTER=cluster.master_url,
                            PYSPARK_PYTHON=sys.executable, INORDER_ARCHIVE_SHARED="1",
                            INORDER_SCRATCH=str(root / "scratch"),
                            INORDER_SPARK_CONF=json.dumps({"spark.driver.extraJavaOptions": QUICK_JVM}))
    for batch, now in ((store_batch, "2026-11-02T00:00:00Z"), (wide_batch, "2026-11-02T00:01:00Z")):
        shutil.copy(batch, home.landing)
        inorder(env, "run", "--now", now, timeout=3000)
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        assert con.execute("SELECT view, count(*), min(last_seq), max(last_seq) FROM inorder.watermarks "
                           "GROUP BY view ORDER BY view").fetchall() == [
            (view, WIDE_STREAMS, 3, 3) for view in ("account_activity", "accounts", "daily_totals")]
    finally:
        con.close()
