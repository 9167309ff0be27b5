"""`inorder run` through Dagster: the same assets, materialised in-process against the instance
under $INORDER_HOME/dagster, so CLI runs appear in the UI's run history."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import dagster as dg

from assets.partitions import CLI_HOME_TAG
from pipelines.faults import crash_point
from pipelines.ingest import check_logical_time, new_landing_files, tick_due
from pipelines.project import plan_passes, views_with_due_buffers
from inorder.terminal import PROGRESS_LOGGER
from pipelines.spark import debugging
from pipelines.store import Home, Store, take_lock, us_from_utc

INSTANCE_YAML = """\
# written by inorder: runs that write the read store never overlap
concurrency:
  pools:
    granularity: run
    default_limit: 1
  runs:
    tag_concurrency_limits:
      - key: "inorder/store"
        limit: 1
telemetry:
  enabled: false
"""


def dagster_home(home: Home) -> Path:
    """DAGSTER_HOME, by default under INORDER_HOME, with an instance config made on first use."""
    path = Path(os.environ.get("DAGSTER_HOME") or home.root / "dagster").resolve()
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    return path


@dataclass
class CliRun:
    ingested: list[dict] = field(default_factory=list)  # event_batches materialisation metadata, and batch_id
    ticked: bool = False
    resumed: bool = False  # it projected what an interrupted run had archived
    run_ids: list[str] = field(default_factory=list)
    projection: dict = field(default_factory=dict)  # per view metadata
    publish_error: str | None = None  # PostgreSQL could not be brought to DuckDB's newest commit
    seconds: float = 0.0


def _run_config() -> dict:
    """The steps' log lines as progress lines only (Dagster's console log with INORDER_DEBUG=1)."""
    return {"loggers": {"console": {"config": {"log_level": "INFO"}}} if debugging() else {PROGRESS_LOGGER: {}}}


def _metadata(result: dg.ExecuteInProcessResult, key: str) -> dict:
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if materialization.asset_key == dg.AssetKey(key):
            return {k: v.value for k, v in materialization.metadata.items()}
    return {}


def _rejected(result: dg.ExecuteInProcessResult) -> dict:
    """The metadata of a batch whose partition failed because the file was rejected (assets/ingest.py);
    any other failure of the ingest run fails `inorder run` with its message."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    data = failure.step_failure_data.user_failure_data if failure else None
    if data is None or "status" not in data.metadata:
        error = failure.step_failure_data.error if failure else None
        raise RuntimeError(error.message.strip() if error else "ingest run failed")
    return {k: v.value for k, v in data.metadata.items()}


def _fail_orphaned_runs(instance: dg.DagsterInstance, home: Home) -> None:
    """Runs of an earlier `inorder run` on this home that was killed stay 'started' for ever in the
    UI. Under the run lock no other such run is alive: mark them failed, saying why."""
    orphans = instance.get_runs(dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
        tags={CLI_HOME_TAG: str(home.root)}))
    for run in orphans:
        instance.report_run_failed(run, "the `inorder run` process running this died before the run ended; "
                                        "a later `inorder run` finished its work")


def run_through_dagster(home: Home, now: datetime | None, progress: Callable[[str], None]) -> CliRun:
    """Ingest each new landing file as a partition of `event_batches` (file-name order), then project
    every view once (with a tick when nothing was new). Each is a Dagster run on the instance."""
    started = time.perf_counter()
    home.ensure()
    # one `inorder run` at a time per home, for its whole length (the store lock is per Dagster step);
    # the lock goes with the process, so a killed run never leaves it behind
    run_lock = take_lock(home.root / "run.lock", 0, f"another `inorder run` is in progress on {home.root}; "
                                                   "try again when it ends")
    try:
        return _run_through_dagster(home, now, progress, started)
    finally:
        os.close(run_lock)


def _run_through_dagster(home: Home, now: datetime | None, progress: Callable[[str], None],
                         started: float) -> CliRun:
    from assets.partitions import BATCHES, NOW_TAG, TICK_TAG, tick_selection
    from inorder.definitions import defs
    from pipelines.registry import load_views

    views = load_views()
    os.environ["INORDER_HOME"] = str(home.root)
    instance = dg.DagsterInstance.from_config(str(dagster_home(home)))
    tags = {CLI_HOME_TAG: str(home.root), **({NOW_TAG: now.isoformat()} if now else {})}
    _fail_orphaned_runs(instance, home)
    with Store.open(home, views) as store:
        new = [f.batch_id for f in new_landing_files(store, home)]
        # archived entries an earlier run did not project (a tick projects only the views it concerns:
        # its entry waits for the others' next projection, and does not count)
        interrupted = any(e["kind"] != "tick" for plan in plan_passes(store, views) for e in plan.entries)
        if now is not None:
            check_logical_time(store, us_from_utc(now))
        # finishing an interrupted run is not a tick, nor is a time already recorded
        tick = not new and not interrupted and (now is None or tick_due(store, us_from_utc(now)))
        # a tick projects the views with a gap timer due, as the tick schedule does
        due = views_with_due_buffers(store.con, views, us_from_utc(now) if now else max(
            us_from_utc(datetime.now(timezone.utc)), store.last_logical_time_us() or 0)) if tick else []
    existing = set(instance.get_dynamic_partitions(BATCHES.name))
    instance.add_dynamic_partitions(BATCHES.name, [b for b in new if b not in existing])
    report = CliRun()
    run_config = _run_config()
    ingest = defs.resolve_job_def("ingest_batch")
    for i, batch_id in enumerate(new, start=1):
        result = ingest.execute_in_process(instance=instance, partition_key=batch_id, tags=tags, run_config=run_config,
                                           asset_selection=[dg.AssetKey("event_batches")], raise_on_error=False)
        metadata = _metadata(result, "event_batches") if result.success else _rejected(result)
        report.ingested.append({"batch_id": batch_id, **metadata})
        report.run_ids.append(result.run_id)
        progress(f"ingest {i}/{len(new)} {batch_id}: {metadata.get('status')}, {metadata.get('records')} records, "
                 f"{metadata.get('malformed')} malformed"
                 + (f" ({metadata['rejected_reason']})" if metadata.get("rejected_reason") else ""))
    crash_point("dagster.ingested")  # every new batch archived, none projected yet
    report.ticked, report.resumed = tick, interrupted
    result = defs.resolve_job_def("project_views").execute_in_process(
        instance=instance, tags={**tags, TICK_TAG: "true" if report.ticked else "false"}, run_config=run_config,
        asset_selection=tick_selection(due) if tick else None, raise_on_error=False)
    report.run_ids.append(result.run_id)
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        raise RuntimeError(failure.step_failure_data.error.message.strip() if failure else "projection run failed")
    report.projection = {view.name: _metadata(result, view.name) for view in views}
    report.publish_error = next((m["publish_error"] for m in report.projection.values() if m.get("publish_error")),
                                None) or _publication_lag(home, views)
    report.seconds = time.perf_counter() - started
    return report


def _publication_lag(home: Home, views) -> str | None:
    """Why PostgreSQL (when it serves reads) does not show DuckDB's newest commit after the run, if it
    does not: its error, or the views it is behind on (a run that materialised no view reports it too)."""
    from pipelines.publish import read_positions

    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, views)
    if positions is None or isinstance(positions, str):
        return positions
    behind = [f"{p.view} ({p.behind} entries)" for p in positions if not p.current]
    return f"PostgreSQL is behind DuckDB for {', '.join(behind)}" if behind else None
