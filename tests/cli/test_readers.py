"""Readers are users too: a process reading the DuckDB store never makes a run fail (issue 11 §1).

DuckDB's file lock is per process, so while a reader holds the file a writer cannot open it, and the
other way round. Every opener waits with backoff, says who holds the file, and gives up with one
line only after INORDER_LOCK_WAIT."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from pipelines.config import Settings

from pipelines.store.database import StoreBusy, connect
from demos.shop import GeneratorConfig, generate
from tests.command import clean_environment, inorder


def hold(path: Path, seconds: float, read_only: bool) -> subprocess.Popen:
    """Another process that opens the file and keeps it for `seconds` (prints 'held' once it has it)."""
    code = textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(path)!r}, read_only={read_only})
        print("held", flush=True)
        time.sleep({seconds})
    """)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.fixture
def database(tmp_path) -> Path:
    path = tmp_path / "store.duckdb"
    duckdb.connect(str(path)).execute("CREATE TABLE t AS SELECT 1 AS x").close()
    return path


@pytest.mark.parametrize("reader_holds", [True, False])
def test_an_opener_waits_for_the_holder_and_says_who_it_is(database, reader_holds):
    holder = hold(database, 1.5, read_only=reader_holds)
    said: list[str] = []
    started = time.monotonic()
    con = connect(database, read_only=not reader_holds, wait_seconds=30, say=said.append)
    waited = time.monotonic() - started
    assert con.execute("SELECT x FROM t").fetchone() == (1,)
    con.close()
    holder.wait(timeout=10)
    assert 0.5 < waited < 10
    assert said and f"(PID {holder.pid})" in said[0] and "held by" in said[0]


def test_an_opener_gives_up_with_one_line_after_the_lock_wait(database):
    holder = hold(database, 5, read_only=True)
    try:
        with pytest.raises(StoreBusy) as caught:
            connect(database, read_only=False, wait_seconds=0.6, say=lambda _: None)
        message = str(caught.value)
        assert "\n" not in message and f"PID {holder.pid}" in message and "INORDER_LOCK_WAIT=0.6" in message
    finally:
        holder.kill()
        holder.wait()


def test_a_dashboard_reading_every_moment_never_fails_a_run_and_query_always_answers(tmp_path):
    """A reader opens the store read-only again and again while `inorder run` projects batches; the
    run succeeds, and `inorder query` run in a loop meanwhile answers every time, never going back.
    The shop's views (INORDER_VIEWS=shop.views): a user's domain, not the bank's."""
    home = tmp_path / "home"
    generate(home / "landing", GeneratorConfig(events=3000, streams=60, batches=3, seed=5))
    env = clean_environment(home, "shop.views", INORDER_SPARK_WARM="1")
    inorder(env, "run", "--now", "2026-11-02T00:00:00Z", timeout=300)
    generate(home / "more", GeneratorConfig(events=3000, streams=60, batches=2, seed=6))
    for i, path in enumerate(sorted((home / "more").iterdir()), start=1):
        path.rename(home / "landing" / f"more-{i}.jsonl")

    stop, running, opened, refused, during = threading.Event(), threading.Event(), [0], [0], [0]

    def dashboard() -> None:  # what a dashboard does: connect, read, disconnect, as often as it can
        while not stop.is_set():
            try:
                con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
                con.execute("SELECT count(*) FROM orders").fetchone()
                time.sleep(0.05)
                con.close()
                opened[0] += 1
                during[0] += running.is_set()
            except duckdb.IOException:
                refused[0] += 1  # the run holds the file: the reader's own problem, never the run's
            time.sleep(0.05)

    counts: list[int] = []

    def queries() -> None:
        while not stop.is_set():
            done = inorder(env, "query", "SELECT count(*) AS n FROM inorder.batches", "--format", "csv", timeout=300)
            counts.append(int(done.stdout.splitlines()[1]))

    readers = [threading.Thread(target=dashboard), threading.Thread(target=queries)]
    for t in readers:
        t.start()
    try:
        time.sleep(1.0)  # the readers are busy before the run starts
        running.set()
        run = inorder(env, "run", "--now", "2026-11-02T00:05:00Z")
        running.clear()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=120)
    assert "ran 2 batches" in run.stdout
    assert "waiting for store.duckdb: held by" in run.stderr  # the readers did get in the run's way
    assert opened[0] > 0 and counts and counts == sorted(counts)  # answers, never going back
    # the run holds the file only to register, load and commit: the dashboard got in during the run
    assert during[0] >= 10, (during, opened, refused)
    assert counts[-1] == 4 * 5  # 4 views × (3 first batches + 2 more)


def test_the_store_connection_keeps_duckdb_within_its_memory_limit(tmp_path, monkeypatch):
    """The driver's memory is bounded: DuckDB spills past INORDER_DUCKDB_MEMORY (default 512MiB)."""
    from pipelines.store.database import DEFAULT_DUCKDB_MEMORY, Home, Store

    def limit(home: Home) -> int:
        with Store.open(home, []) as store:
            return store.con.execute("SELECT value FROM duckdb_settings() WHERE name = 'memory_limit'").fetchone()[0]

    assert Home.of(Settings(), tmp_path / "a").memory_limit == DEFAULT_DUCKDB_MEMORY
    assert limit(Home.of(Settings(), tmp_path / "a")) == "512.0 MiB"
    two_gb = Settings.from_env({"INORDER_DUCKDB_MEMORY": " 2 GB "})
    assert limit(Home.of(two_gb, tmp_path / "b")) == "1.8 GiB"  # 2 GB = 1.86 GiB, as DuckDB shows it


@pytest.mark.parametrize("text", ["lots", "512", "-1GB", "1 PB", "1e9"])
def test_a_memory_limit_that_is_not_a_size_is_refused_in_one_line(text):
    from pipelines.store.database import Home

    with pytest.raises(ValueError, match="^INORDER_DUCKDB_MEMORY must be a size such as 512MiB or 2GB, not"):
        Home.of(Settings.from_env({"INORDER_DUCKDB_MEMORY": text}), "/nonexistent")
