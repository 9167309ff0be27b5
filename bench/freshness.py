"""Case 9, freshness: one batch (10k events) landed on the bank store (1M events), timed until its views
are committed, three ways, each over ROUNDS rounds (medians):

- `cli`: `inorder run` in a new process, from its start to its exit, as a user's shell runs it (warm by
  default, no manual step): the first run of a home with no server up (it starts one), the later runs
  (they reuse it), and cold (`INORDER_SPARK_WARM=0`: `local[*]`, a JVM per run);
- `dagster`: `dagster dev` (webserver, daemon, landing sensor) sharing the CLI's server, from the moment
  the file is written into the landing folder to the ledger's `committed_at` of the batch;
- `engine`: `pipelines.facade.run` in this process's warm Spark session: the engine's own share.

Where the time goes comes from the runs themselves: the Dagster instance's run and step records
(created, started, each step's start and end) and the `run/…_seconds` metadata of the projection
step (Spark start, pass, commit, publish); `inorder run --json` gives the time inside the CLI.
Every round starts from a copy of the same store, so the rounds are the same work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from bench.bulk import T0, fresh_home
from bench import data
from bench.data import BANK_VIEWS, bank_batches, incremental_batch, inorder_cli, jsonl_files, land
from bench.incremental import T_INCREMENT
from pipelines.facade import run
from pipelines.spark.server import free_port
from pipelines.store.database import Home

ROUNDS = 5
PATHS = (  # (result key, what is timed, target key, the median's key); the report's rows
    ("cli_warm", "inorder run, second and later runs (warm by default): process start to exit",
     "freshness_cli_warm_s", "wall_s"),
    ("cli_first", "inorder run, the first with no server up (it starts one): process start to exit",
     "freshness_cli_first_s", "wall_s"),
    ("cli_cold", "inorder run, INORDER_SPARK_WARM=0 (local[*]): process start to exit", "freshness_cli_cold_s",
     "wall_s"),
    ("dagster", "dagster dev + landing sensor, warm Spark server: file written to views committed",
     "freshness_dagster_s", "freshness_s"),
    ("engine", "the engine alone, warm session (pipelines.facade.run)", None, "wall_s"),
)
DAGSTER_WAIT_SECONDS = 300  # for `dagster dev` to come up, and for one batch to be committed through it
STEP_PARTS = ("event_batches", "projections")


def store_template(spark, cache: Path, events: int) -> Home:
    """The bank store after `events` events at logical time T0 (built once by the engine, then copied)."""
    home = data.home(cache / f"store-bank-{events}")
    if (home.root / ".done").exists():
        return home
    fresh_home(home.root)
    land(jsonl_files(bank_batches(cache, events)), home.landing)
    run(spark, home, BANK_VIEWS, now=T0)
    (home.root / ".done").write_text("")
    return home


def reset(home: Home, template: Home) -> None:
    """`home` becomes a copy of the template's store, archive and landing folder. Its warm Spark server
    (`spark/`) stays; its Dagster instance is new, as on a first run."""
    for name in ("store.duckdb", "store.duckdb.wal", "archive", "landing", "dagster", "scratch"):
        path = home.root / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    home.root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template.database, home.database)
    shutil.copytree(template.archive, home.archive)
    land(sorted(template.landing.iterdir()), home.landing)
    if (template.root / "source.json").exists():
        shutil.copyfile(template.root / "source.json", home.root / "source.json")


def _env(home: Home, **settings: str) -> dict:
    return {**os.environ, "INORDER_HOME": str(home.root), "INORDER_VIEWS": "views",
            "DAGSTER_HOME": str(home.root / "dagster"), **settings}


def spark_server(home: Home, action: str) -> None:
    subprocess.run([*inorder_cli(), "spark", action], env=_env(home), check=True, stdout=subprocess.DEVNULL)


def _instance(home: Home):
    import dagster as dg

    return dg.DagsterInstance.from_config(str(home.root / "dagster"))


def run_parts(home: Home, run_ids: list[str]) -> dict:
    """Where the Dagster runs' time went: each run's launch (created → started → first step), its steps
    (the ingest, the projection step split by its `run/…_seconds` metadata, the checks), read back from
    the instance."""
    import dagster as dg

    instance = _instance(home)
    parts: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        parts[name] = parts.get(name, 0.0) + seconds

    for run_id in run_ids:
        record = instance.get_run_record_by_id(run_id)
        steps = instance.get_run_step_stats(run_id)
        first_step = min((s.start_time for s in steps if s.start_time), default=None)
        if record.start_time and first_step:
            add("dagster_launch", first_step - record.start_time)
        for step in steps:
            seconds = (step.end_time or 0) - (step.start_time or 0)
            add(step.step_key if step.step_key in STEP_PARTS else "checks", seconds)
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            metadata = entry.dagster_event.step_materialization_data.materialization.metadata
            if "run/pass_seconds" in metadata:
                for name in ("spark_start", "pass", "commit", "publish"):
                    add(name, metadata[f"run/{name}_seconds"].value)
                add("projections", -sum(metadata[f"run/{n}_seconds"].value
                                        for n in ("spark_start", "pass", "commit", "publish")))
                break
    parts["projection_step_other"] = parts.pop("projections", 0.0)
    return {k: round(v, 3) for k, v in parts.items()}


def cli_round(home: Home, template: Home, batch: Path, **settings: str) -> dict:
    reset(home, template)
    land([batch], home.landing)
    started = time.perf_counter()
    done = subprocess.run([*inorder_cli(), "run", "--now", T_INCREMENT.isoformat(), "--json"],
                          env=_env(home, **settings), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"inorder run failed: {done.stderr[-2000:]}")
    document = json.loads(done.stdout)
    parts = run_parts(home, document["dagster_run_ids"])
    inside = sum(v for k, v in parts.items() if k != "dagster_launch")
    return {"wall_s": wall, "records": document["records"], "dagster_runs": len(document["dagster_run_ids"]),
            "parts": {"process_start_and_imports": round(wall - document["seconds"], 3),
                      "planning_and_dagster": round(document["seconds"] - inside, 3), **parts}}


def _committed_at(home: Home, batch_id: str) -> datetime | None:
    """The batch's commit time in the ledger (None until every view committed it). A short read-only
    open: while the file is held by the run, the next poll looks again."""
    try:
        con = duckdb.connect(str(home.database), read_only=True)
    except duckdb.Error:
        return None
    try:
        row = con.execute("SELECT count(*), max(committed_at) FROM inorder.batches WHERE batch_id = ?",
                          [batch_id]).fetchone()
    finally:
        con.close()
    return row[1] if row[0] == len(BANK_VIEWS) else None


class DagsterDev:
    """`dagster dev` on a home, in its own process group (stopped with the group, JVMs and all)."""

    def __init__(self, home: Home, port: int) -> None:
        self.home, self.port = home, port
        self.log = open(home.root / "dagster-dev.log", "wb")
        env = _env(home)
        from inorder.dagster_runs import dagster_home

        dagster_home(home)  # the instance config (run queue, concurrency) `inorder run` writes
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster")), "dev", "-h", "127.0.0.1", "-p", str(port)],
            cwd=Path(__file__).resolve().parents[1], env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_up(self) -> None:
        deadline = time.monotonic() + DAGSTER_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        raise TimeoutError("dagster dev did not come up")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()


def dagster_round(dev: DagsterDev, batch: Path) -> dict:
    """Write the file into the landing folder (atomically: the sensor never sees half a file), then wait
    for the ledger's commit of the batch."""
    home = dev.home
    partial = home.root / f".{batch.name}.partial"
    shutil.copyfile(batch, partial)
    written = datetime.now(timezone.utc)
    partial.replace(home.landing / batch.name)
    deadline = time.monotonic() + DAGSTER_WAIT_SECONDS
    while (committed := _committed_at(home, batch.stem)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch.stem} was not committed through Dagster; see {dev.log.name}")
        time.sleep(0.2)
    instance = _instance(home)
    runs = [r for r in instance.get_run_records() if batch.stem in r.dagster_run.tags.get(
        "dagster/asset_partition_range_start", "") + r.dagster_run.tags.get("dagster/asset_partition_range_end", "")]
    while runs and not runs[0].dagster_run.is_finished:  # its checks run after the commit: wait for its steps
        time.sleep(0.2)
        runs = [instance.get_run_record_by_id(runs[0].dagster_run.run_id)]
    parts = run_parts(home, [r.dagster_run.run_id for r in runs[:1]])
    if runs:
        created = runs[0].create_timestamp.timestamp()
        parts["sensor_wait"] = round(created - written.timestamp(), 3)
        if runs[0].start_time:
            parts["run_queue"] = round(runs[0].start_time - created, 3)
    return {"freshness_s": (committed - written).total_seconds(), "parts": parts}


def engine_round(spark, home: Home, template: Home, batch: Path) -> dict:
    reset(home, template)
    land([batch], home.landing)
    report = run(spark, home, BANK_VIEWS, now=T_INCREMENT)
    return {"wall_s": report.seconds, "parts": {
        "ingest": round(report.ingest_seconds, 3), "pass": round(report.projection.spark_seconds, 3),
        "commit": round(report.projection.commit_seconds, 3)}}


def _median(samples: list[dict], key: str) -> dict:
    values = [s[key] for s in samples]
    parts = sorted({p for s in samples for p in s["parts"]})
    return {key: statistics.median(values), "samples_s": [round(v, 3) for v in values],
            "parts_median": {p: round(statistics.median(s["parts"].get(p, 0.0) for s in samples), 3) for p in parts}}


def freshness_case(spark, work: Path, cache: Path, store_events: int, batch_events: int, rounds: int = ROUNDS,
                   say=print) -> dict:
    template = store_template(spark, cache, store_events)
    batches = [incremental_batch(cache, batch_events, r) for r in range(1, rounds + 1)]
    home = data.home(work / "freshness")
    result: dict = {"store_events": store_events, "batch_events": batch_events, "rounds": rounds}

    say(f"freshness: engine alone, warm session ({rounds} rounds)")
    engine_round(spark, home, template, batches[0])  # the session's first run pays its warm-up
    result["engine"] = _median([engine_round(spark, home, template, b) for b in batches], "wall_s")

    say("freshness: inorder run, INORDER_SPARK_WARM=0 (a JVM per run)")
    result["cli_cold"] = _median([cli_round(home, template, b, INORDER_SPARK_WARM="0") for b in batches], "wall_s")

    say("freshness: inorder run, the first with no server up (it starts one)")
    reset(home, template)
    try:
        firsts = []
        for b in batches:
            spark_server(home, "stop")  # as after its idle time
            firsts.append(cli_round(home, template, b, INORDER_SPARK_WARM="1"))
        result["cli_first"] = _median(firsts, "wall_s")
        say("freshness: inorder run, second and later runs (warm by default)")
        result["cli_warm"] = _median([cli_round(home, template, b, INORDER_SPARK_WARM="1") for b in batches], "wall_s")

        say("freshness: dagster dev + landing sensor, warm Spark Connect server")
        reset(home, template)
        dev = DagsterDev(home, port=free_port())
        try:
            dev.wait_up()
            dagster_round(dev, incremental_batch(cache, batch_events, rounds + 1))  # code server and sensor warm
            result["dagster"] = _median([dagster_round(dev, b) for b in batches], "freshness_s")
        finally:
            dev.stop()
    finally:
        spark_server(home, "stop")
    shutil.rmtree(home.root, ignore_errors=True)
    return result


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store-events", type=int, default=1_000_000)
    parser.add_argument("--batch-events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--work", default=str(Path(__file__).resolve().parents[1] / ".inorder" / "bench"))
    args = parser.parse_args()
    work = Path(args.work)
    print(json.dumps(freshness_case(data.session(), work / "scratch", work / "inputs", args.store_events,
                                    args.batch_events, args.rounds), indent=1))
