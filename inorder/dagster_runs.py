"""`inorder run`, `rebuild`, `retry`, `skip`, `publish`, `reingest` and `remove-view` through Dagster: the
same assets and jobs, run in-process against the instance under $INORDER_HOME/dagster, so every write of
the CLI appears in the UI's run history, followed by its checks. The home reaches the runs as the `home`
resource's config, never through the environment. Each step's result comes back typed, decoded from its
metadata entry (assets/results.py)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypeVar

import dagster as dg
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SQLITE_BUSY_TIMEOUT_SECONDS, SqliteEventLogStorage
from sqlalchemy import Connection, Engine, create_engine

from assets.jobs import OPERATOR_JOBS, PUBLISH_JOB, REBUILD, REINGEST_JOB, REMOVE_VIEW, RETRY, SKIP, drop_view
from assets.partitions import BATCHES
from assets.results import decoded
from assets.sensors import check_verdicts, checks_tags
from assets.tags import CLI_HOME_TAG, NOW_TAG, TICK_TAG
from assets.targets import INGEST_AND_PROJECT, PROJECT, run_target
from assets.views import OPERATOR_STREAMS, PUBLISH, REBUILD_CONFIG, REFUSED, REINGEST, action_config
from inorder.definitions import build_definitions
from inorder.terminal import PROGRESS_LOGGER
from inorder.verdicts import dagster_folder
from pipelines.engine.ingest import IngestResult
from pipelines.engine.outcomes import EntryKind
from pipelines.engine.planning import entries_waiting
from pipelines.engine.stats import ProjectionStats
from pipelines.facade import Reingested, RunReport, plan
from pipelines.observe.status import plural
from pipelines.serve.publish import Publication, ServeTarget, read_positions
from pipelines.store.database import Home, Store, take_lock
from pipelines.store.versions import RemovedView, ViewSetMismatch, read_versions
from pipelines.view import View
from resources import DEFAULT_LOCK_WAIT_SECONDS, HomeResource

Record = TypeVar("Record")

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
run_queue:
  dequeue_interval_seconds: 1  # a queued run starts within a second (freshness; the default is 5)
telemetry:
  enabled: false
"""


def dagster_home(home: Home) -> Path:
    """The Dagster instance's folder (`dagster_folder`), with an instance config made on first use."""
    path = dagster_folder(home)
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML)
    return path


# the CLI's runs leave stdout and stderr alone: Dagster's default mirrors them through `tail` and watcher
# processes, which delay the progress lines and print their own tracebacks on Ctrl-C; the CLI's lines are in
# the run's event log anyway
_CLI_OVERRIDES = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager",
                                   "class": "NoOpComputeLogManager"}}
_STORAGE_KEYS = {"storage", "run_storage", "event_log_storage", "schedule_storage"}


class KeptConnectionsEventLog(SqliteEventLogStorage):
    """Dagster's SQLite event log, in the same files, with one kept connection per file for the process:
    Dagster's own makes an engine and a connection for every event it stores (a run stores about 140), and
    closing the file's last connection checkpoints it, which cost a CLI run about 1.5 CPU-s (docs/BENCHMARKS.md).
    Other processes (the UI's) read and write the files as before: SQLite's WAL keeps them consistent."""

    def __init__(self, base_dir: str, inst_data=None) -> None:
        self._engines: dict[str, Engine] = {}
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "KeptConnectionsEventLog":
        return cls(inst_data=inst_data, **config_value)  # Dagster's makes its own class, whatever the config names

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engines.get(shard)
            if engine is None:
                engine = self._engines[shard] = create_engine(self.conn_string_for_shard(shard),
                                                              connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def dispose(self) -> None:
        super().dispose()
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()


def dagster_instance(home: Home) -> dg.DagsterInstance:
    """The home's Dagster instance (where the CLI's runs are recorded, beside the daemon's), as its
    dagster.yaml says but for the steps' captured output, and for its event log, kept connected, unless the
    file names storage of its own (PostgreSQL, say)."""
    folder = dagster_home(home)
    overrides = dict(_CLI_OVERRIDES)
    if not _STORAGE_KEYS & set(yaml.safe_load((folder / "dagster.yaml").read_text()) or {}):
        default = InstanceRef.config_defaults(str(folder))["event_log_storage"]  # where Dagster keeps its files
        overrides["event_log_storage"] = {"module": __name__, "class": KeptConnectionsEventLog.__name__,
                                          "config": default.config_dict}
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(folder), overrides=overrides))


class CliDagster:
    """One `inorder` command's Dagster side: the definitions of its views on its home (given as resource
    config, never through the environment), and the home's instance."""

    def __init__(self, home: Home, views: Iterable[View], lock_wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS) -> None:
        self.home, self.views = home, tuple(views)
        self.defs = build_definitions(self.views, HomeResource.of(home, lock_wait_seconds))
        self.instance = dagster_instance(home)

    def __enter__(self) -> "CliDagster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.instance.dispose()  # lets the event log's kept connections go

    def execute(self, job: str, tags: dict | None = None, run_config: dict | None = None,
                selection: list[dg.AssetKey] | None = None) -> dg.ExecuteInProcessResult:
        """Run `job` in this process, recorded on the instance and tagged as this home's CLI run. Ctrl-C
        ends a step as a failure of Dagster's: it is raised again as the KeyboardInterrupt it was."""
        result = self.defs.resolve_job_def(job).execute_in_process(
            instance=self.instance, tags={CLI_HOME_TAG: str(self.home.root), **(tags or {})},
            run_config={**_run_config(self.home.settings.debug), **(run_config or {})}, asset_selection=selection, raise_on_error=False)
        failure = _step_failure(result)
        if failure and failure.step_failure_data.error and \
                failure.step_failure_data.error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt"):
            raise KeyboardInterrupt
        return result

    def results(self, run_id: str, record_type: type[Record], assets: Iterable[str]) -> dict[str | None, Record]:
        """The typed result each materialisation or observation of `assets` in the run carries, by partition
        (None: unpartitioned). Read from the instance: a step that failed (a rejected batch) leaves its
        events in the event log, not in the in-process result."""
        keys, found = {dg.AssetKey(name) for name in assets}, {}
        for entry in self.instance.all_logs(run_id, of_type={dg.DagsterEventType.ASSET_MATERIALIZATION,
                                                             dg.DagsterEventType.ASSET_OBSERVATION}):
            data = entry.dagster_event.event_specific_data
            event = getattr(data, "materialization", None) or data.asset_observation
            record = decoded(record_type, event.metadata) if event.asset_key in keys else None
            if record is not None:
                found[event.partition] = record
        return found


@dataclass
class CliRun(RunReport):
    """What `inorder run` did: the engine's report of the run, from its Dagster runs' results."""

    run_ids: list[str] = field(default_factory=list)
    publish_error: str | None = None  # PostgreSQL could not be brought to DuckDB's newest commit
    checks: dict[str, str] = field(default_factory=dict)  # "asset.check" -> verdict (assets.sensors.check_verdicts)


def _run_config(debug: bool) -> dict:
    """The steps' log lines as progress lines only (Dagster's console log with INORDER_DEBUG=1)."""
    return {"loggers": {"console": {"config": {"log_level": "INFO"}}} if debug else {PROGRESS_LOGGER: {}}}


def _only_refused(result: dg.ExecuteInProcessResult) -> bool:
    """The run failed only because every view it was to project was refused."""
    failures = [e for e in result.all_events if e.is_step_failure]
    data = [f.step_failure_data.user_failure_data for f in failures]
    return bool(failures) and all(d is not None and REFUSED in d.metadata for d in data)


def _step_failure(result: dg.ExecuteInProcessResult):
    return next((e for e in result.all_events if e.is_step_failure), None)


def _fail_orphaned_runs(instance: dg.DagsterInstance, home: Home) -> None:
    """Runs of an earlier `inorder run` on this home that was killed stay 'started' for ever in the
    UI. Under the run lock no other such run is alive: mark them failed, saying why."""
    orphans = instance.get_runs(dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
        tags={CLI_HOME_TAG: str(home.root)}))
    for run in orphans:
        if run.job_name not in OPERATOR_JOBS:  # those commands take no run lock: theirs may be alive
            instance.report_run_failed(run, "the `inorder run` process running this died before the run ended; "
                                            "a later `inorder run` finished its work")


def run_through_dagster(home: Home, views: Sequence[View], now: datetime | None) -> CliRun:
    """What `plan` decides, as one Dagster run on the instance (`run_target`): new landing files are
    ingested as partitions of `event_batches` and projected in the same run; with nothing new, a tick
    or a projection. A rejected file adds a second run, which projects what the first archived. The
    engine's `pipelines.facade.run` is the same plan and the same steps, without Dagster."""
    started = time.perf_counter()
    home.ensure()
    # one `inorder run` at a time per home, for its whole length (the store lock is per Dagster step);
    # the lock goes with the process, so a killed run never leaves it behind
    run_lock = take_lock(home.root / "run.lock", 0, f"another `inorder run` is in progress on {home.root}; "
                                                   "try again when it ends")
    try:
        # planning opens the store's writer, which refuses views the store does not hold before anything is written
        report = CliRun(plan(home, views, now))
        with CliDagster(home, views) as cli:
            _run_steps(cli, report, now)
        report.seconds = time.perf_counter() - started
        return report
    except KeyboardInterrupt:
        raise RunInterrupted(_left_for_the_next_run(home, views)) from None
    finally:
        os.close(run_lock)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C ended an `inorder run`: its message says what the run left for the next one."""


def _left_for_the_next_run(home: Home, views: Sequence[View]) -> str:
    """What an interrupted run leaves (every write is whole or not made, so the store says it): the
    batches archived that views still have to project, or nothing."""
    if not home.database.exists():
        return f"nothing was archived; the next `inorder run` ingests the files in {home.landing}"
    with Store.open_read_only(home) as store:
        versions = read_versions(store.con, views)
        waiting = entries_waiting(store, [v for v in views if not versions[v.name].refused])
    if not waiting:
        return f"every archived batch is projected; the next `inorder run` ingests what is new in {home.landing}"
    batches = [batch for batch, _ in waiting]
    names = batches[0] if len(batches) == 1 else f"{batches[0]} to {batches[-1]}"
    them = "it" if len(batches) == 1 else "them"
    return (f"{plural(len(batches), 'batch', 'batches')} archived but not yet projected ({names}, for "
            f"{', '.join(sorted({v for _, todo in waiting for v in todo}))}); the next `inorder run` projects {them}")


def _run_steps(cli: CliDagster, report: CliRun, now: datetime | None) -> None:
    """The run the plan becomes, and a second when a rejected file failed the first before it projected."""
    instance, tags = cli.instance, {NOW_TAG: now.isoformat()} if now else {}
    _fail_orphaned_runs(instance, cli.home)
    target = run_target(report.plan, instance.get_dynamic_partitions(BATCHES.name))
    instance.add_dynamic_partitions(BATCHES.name, target.new_partitions)

    def execute(job: str, job_tags: dict, selection) -> dg.ExecuteInProcessResult:
        result = cli.execute(job, {**tags, **job_tags}, selection=selection)
        report.run_ids.append(result.run_id)
        return result

    result = execute(target.job, target.tags, target.asset_selection)
    if target.job == INGEST_AND_PROJECT:
        ingested = cli.results(result.run_id, IngestResult, ["event_batches"])
        report.ingested = [ingested[b] for b in report.plan.batches if b in ingested]
        if any(r.status == "rejected" for r in report.ingested):
            # a rejected file fails the run (and its partition) before the projection: a second run projects
            # what the first archived
            result = execute(PROJECT, {TICK_TAG: "false"}, None)
    if not result.success and not _only_refused(result):
        raise _failure(result)
    projected = cli.results(result.run_id, ProjectionStats, [view.name for view in cli.views])
    report.projection = projected.get(None, report.projection)  # every view of a step carries the step's result
    report.publish_error = report.projection.publish_error or _publication_lag(cli.home, cli.views)
    for run_id in report.run_ids:  # tagged as tag_runs_whose_checks_failed tags the daemon's runs
        verdicts = check_verdicts(instance, run_id)
        tags = checks_tags(verdicts)
        if tags:
            instance.add_run_tags(run_id, tags)
        report.checks.update({f"{asset}.{check}": verdict for (asset, check), verdict in verdicts.items()})


def _publication_lag(home: Home, views: Sequence[View]) -> str | None:
    """Why PostgreSQL, when it serves reads, does not show DuckDB's newest commit after the run, if it does
    not: its error, or the views it is behind on (the run may have projected only some of them, or none)."""
    if ServeTarget.of(home.settings) is None:
        return None
    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, views, store.home.settings)
    if positions.error is not None:
        return positions.error
    behind = [f"{p.view} ({p.behind} entries)" for p in positions.behind]
    return f"PostgreSQL is behind DuckDB for {', '.join(behind)}" if behind else None


@dataclass
class CliRebuild:
    run_id: str
    stats: ProjectionStats  # the rebuild step's result
    checks: dict[str, str]  # check name -> verdict (assets.sensors.check_verdicts)


def rebuild_through_dagster(home: Home, views: Sequence[View], view: str) -> CliRebuild:
    """`inorder rebuild VIEW` as a run of the `rebuild_view` job on the instance: a materialisation of the
    view's asset, so its checks run after it (a failed blocking check fails the command)."""
    with CliDagster(home, views) as cli:
        result = cli.execute(REBUILD, run_config=REBUILD_CONFIG, selection=[dg.AssetKey(view)])
        checks = {check: verdict for (_, check), verdict in check_verdicts(cli.instance, result.run_id).items()}
        if not result.success:
            failure = _step_failure(result)
            failed = sorted(name for name, verdict in checks.items() if verdict == "failed")
            raise _failure(result) if failure and failure.step_failure_data.error else \
                RuntimeError(f"the rebuild's checks failed: {', '.join(failed)}")
        return CliRebuild(result.run_id, cli.results(result.run_id, ProjectionStats, [view])[None], checks)


def _failure(result: dg.ExecuteInProcessResult) -> Exception:
    """The exception that failed the run's step, as the command would have raised it had it run the step
    itself (Dagster wraps it: the innermost cause is the step's own): a refusal of the views stays one
    (exit 5), anything else says its message."""
    failure = _step_failure(result)
    error = failure.step_failure_data.error if failure else None
    if error is None:
        return RuntimeError("the run failed")
    while error.cause is not None:
        error = error.cause
    message = error.message.strip()
    name, colon, said = message.partition(": ")  # "pipelines.engine.order.NotParked: stream … is not parked"
    message = said if colon and name.rsplit(".", 1)[-1] == error.cls_name else message
    return ViewSetMismatch(message) if error.cls_name == ViewSetMismatch.__name__ else RuntimeError(message)


def _run_written(home: Home, views: Sequence[View], job: str, run_config: dict,
                 selection: list[dg.AssetKey] | None = None, tags: dict | None = None) -> list[dg.AssetMaterialization]:
    """Run a writing command's job (at once refused, like the command, when another writer holds the
    store); the views it materialised, in order; its failure raised."""
    with CliDagster(home, views, home.lock_wait_seconds) as cli:
        result = cli.execute(job, tags, run_config=run_config, selection=selection)
    if not result.success:
        raise _failure(result)
    names = {view.name for view in views}
    return [m for m in (e.step_materialization_data.materialization for e in result.get_asset_materialization_events())
            if m.asset_key.to_user_string() in names]


def operator_through_dagster(home: Home, views: Sequence[View], view: str, streams: list[str] | None,
                             action: str) -> list[str]:
    """`inorder retry` or `skip` as a run of its job: the view's materialisation, so its checks follow.
    Returns the streams acted on (none: nothing was parked)."""
    config = action_config(action, **({"streams": streams} if streams is not None else {}))
    done = _run_written(home, views, {EntryKind.RETRY: RETRY, EntryKind.SKIP: SKIP}[action], config, [dg.AssetKey(view)])
    return [stream for m in done for stream in m.metadata[OPERATOR_STREAMS].value]


def publish_through_dagster(home: Home, views: Sequence[View], full: str | None) -> list[Publication]:
    """`inorder publish` as a run of the `publish_views` job: each view published is materialised, so its
    checks follow. Returns the publications, in the order they were made."""
    done = _run_written(home, views, PUBLISH_JOB, action_config(PUBLISH, **({"full": full} if full else {})))
    return [decoded(Publication, m.metadata) for m in done]


def reingest_through_dagster(home: Home, views: Sequence[View], batch_ids: Sequence[str],
                             now: datetime | None) -> Reingested:
    """`inorder reingest` as a run of the `reingest_batches` job: the new entries, then every view projected
    and materialised, so their checks follow."""
    done = _run_written(home, views, REINGEST_JOB, action_config(REINGEST, batches=list(batch_ids)),
                        tags={NOW_TAG: now.isoformat()} if now else None)
    return decoded(Reingested, done[0].metadata)


def remove_view_through_dagster(home: Home, view: str) -> RemovedView:
    """`inorder remove-view VIEW --yes` as a run of the `remove_view` job, which loads no view (the one
    removed may be gone from the modules already)."""
    with CliDagster(home, (), home.lock_wait_seconds) as cli:
        result = cli.execute(REMOVE_VIEW, run_config={"ops": {drop_view.name: {"config": {"view": view}}}})
    if not result.success:
        raise _failure(result)
    (output,) = [e for e in result.all_events if e.is_successful_output]
    return decoded(RemovedView, output.step_output_data.metadata)
