"""`inorder run`, `rebuild`, `retry`, `skip` and `publish` through Dagster: the same assets, materialised
in-process against the instance under $INORDER_HOME/dagster, so every write of the CLI appears in the UI's
run history, followed by its checks. The home reaches the runs as the `home` resource's config, never
through the environment."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import dagster as dg

from assets.tags import CLI_HOME_TAG
from inorder.terminal import PROGRESS_LOGGER
from inorder.verdicts import dagster_folder
from pipelines.store.database import Home, Store, take_lock
from resources import DEFAULT_LOCK_WAIT_SECONDS, HomeResource

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


def dagster_instance(home: Home) -> dg.DagsterInstance:
    """The home's Dagster instance (where the CLI's runs are recorded, beside the daemon's), as its
    dagster.yaml says but for the steps' captured output."""
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home(home)), overrides=_CLI_OVERRIDES))


class CliDagster:
    """One `inorder` command's Dagster side: the definitions of its views on its home (given as resource
    config, never through the environment), and the home's instance."""

    def __init__(self, home: Home, views, lock_wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS) -> None:
        from inorder.definitions import build_definitions

        self.home, self.views = home, tuple(views)
        self.defs = build_definitions(self.views, HomeResource.of(home, lock_wait_seconds))
        self.instance = dagster_instance(home)

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


@dataclass
class CliRun:
    ingested: list[dict] = field(default_factory=list)  # event_batches materialisation metadata, and batch_id
    ticked: bool = False
    resumed: bool = False  # it projected what an interrupted run had archived
    catching_up: tuple[str, ...] = ()  # views added to the store, projected over the archive for the first time
    run_ids: list[str] = field(default_factory=list)
    projection: dict = field(default_factory=dict)  # per view metadata
    publish_error: str | None = None  # PostgreSQL could not be brought to DuckDB's newest commit
    refused: dict[str, str] = field(default_factory=dict)  # view -> why it was not projected (its tables changed)
    checks: dict[str, str] = field(default_factory=dict)  # "asset.check" -> verdict (assets.sensors.check_verdicts)
    seconds: float = 0.0


def _run_config(debug: bool) -> dict:
    """The steps' log lines as progress lines only (Dagster's console log with INORDER_DEBUG=1)."""
    return {"loggers": {"console": {"config": {"log_level": "INFO"}}} if debug else {PROGRESS_LOGGER: {}}}


def _materializations(instance: dg.DagsterInstance, run_id: str, key: str) -> dict[str | None, dict]:
    """The metadata of each materialisation of asset `key` in the run, by partition (None: unpartitioned).
    Read from the instance: a step that failed (a rejected batch) leaves its batches' materialisations
    in the event log, not in the in-process result."""
    found = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.dagster_event.step_materialization_data.materialization
        if materialization.asset_key == dg.AssetKey(key):
            found[materialization.partition] = {k: v.value for k, v in materialization.metadata.items()}
    return found


def _refusals(home: Home, views) -> dict[str, str]:
    """view -> the one line saying why runs do not project it (its tables changed), whether or not
    this run had anything for it (a tick walks only the views with a timer due)."""
    from pipelines.store.versions import read_versions

    with Store.open_read_only(home) as store:
        versions = read_versions(store.con, views)
    return {name: version.refusal() for name, version in versions.items() if version.refused}


def _only_refused(result: dg.ExecuteInProcessResult) -> bool:
    """The run failed only because every view it was to project was refused."""
    from assets.views import REFUSED

    failures = [e for e in result.all_events if e.is_step_failure]
    data = [f.step_failure_data.user_failure_data for f in failures]
    return bool(failures) and all(d is not None and REFUSED in d.metadata for d in data)


def _step_failure(result: dg.ExecuteInProcessResult):
    return next((e for e in result.all_events if e.is_step_failure), None)


def _rejected(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    """The metadata of each batch the ingest step rejected (assets/ingest.py fails the step for them);
    none when the run failed only because its views were refused (`_report_projection` says so); any other
    failure of the run fails `inorder run` with its message."""
    from assets.ingest import REJECTED_BATCHES

    failure = _step_failure(result)
    data = failure.step_failure_data.user_failure_data if failure else None
    if data is not None and REJECTED_BATCHES in data.metadata:
        return data.metadata[REJECTED_BATCHES].value
    if _only_refused(result):
        return {}
    raise RuntimeError(_user_error(result))


def _fail_orphaned_runs(instance: dg.DagsterInstance, home: Home) -> None:
    """Runs of an earlier `inorder run` on this home that was killed stay 'started' for ever in the
    UI. Under the run lock no other such run is alive: mark them failed, saying why."""
    from assets.jobs import PUBLISH_JOB, RETRY, SKIP

    orphans = instance.get_runs(dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
        tags={CLI_HOME_TAG: str(home.root)}))
    for run in orphans:
        if run.job_name not in (RETRY, SKIP, PUBLISH_JOB):  # those commands take no run lock: theirs may be alive
            instance.report_run_failed(run, "the `inorder run` process running this died before the run ended; "
                                            "a later `inorder run` finished its work")


def run_through_dagster(home: Home, views, now: datetime | None) -> CliRun:
    """What `plan_run` decides, as one Dagster run on the instance (`run_target`): new landing files are
    ingested as partitions of `event_batches` and projected in the same run; with nothing new, a tick
    or a projection. A rejected file adds a second run, which projects what the first archived."""
    started = time.perf_counter()
    home.ensure()
    # one `inorder run` at a time per home, for its whole length (the store lock is per Dagster step);
    # the lock goes with the process, so a killed run never leaves it behind
    run_lock = take_lock(home.root / "run.lock", 0, f"another `inorder run` is in progress on {home.root}; "
                                                   "try again when it ends")
    try:
        if home.database.exists():  # views the store does not hold are refused before anything is written
            Store.open_read_only(home, views).close()
        return _run_through_dagster(CliDagster(home, views), now, started)
    except KeyboardInterrupt:
        raise RunInterrupted(_left_for_the_next_run(home, views)) from None
    finally:
        os.close(run_lock)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C ended an `inorder run`: its message says what the run left for the next one."""


def _left_for_the_next_run(home: Home, views) -> str:
    """What an interrupted run leaves (every write is whole or not made, so the store says it): the
    batches archived that views still have to project, or nothing."""
    from pipelines.engine.planning import entries_waiting
    from pipelines.observe.status import plural
    from pipelines.store.versions import read_versions

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


def _run_through_dagster(cli: CliDagster, now: datetime | None, started: float) -> CliRun:
    from assets.partitions import BATCHES
    from assets.tags import NOW_TAG, TICK_TAG
    from assets.targets import INGEST_AND_PROJECT, PROJECT, run_target
    from pipelines.facade import plan_run

    home, views, instance = cli.home, cli.views, cli.instance
    tags = {NOW_TAG: now.isoformat()} if now else {}
    _fail_orphaned_runs(instance, home)
    with HomeResource.of(home, home.lock_wait_seconds).open_writer(views) as store:
        plan = plan_run(store, home, views, now)
    target = run_target(plan, instance.get_dynamic_partitions(BATCHES.name))
    instance.add_dynamic_partitions(BATCHES.name, target.new_partitions)
    report = CliRun(ticked=plan.tick, resumed=plan.resumed, catching_up=plan.catching_up)

    def execute(job: str, job_tags: dict, selection) -> dg.ExecuteInProcessResult:
        result = cli.execute(job, {**tags, **job_tags}, selection=selection)
        report.run_ids.append(result.run_id)
        return result

    result = execute(target.job, target.tags, target.asset_selection)
    if target.job == INGEST_AND_PROJECT:
        # one run ingests the new batches and projects them; a rejected file fails the run (and its
        # partition) before the projection, so a second run projects what the first archived
        archived = _materializations(instance, result.run_id, "event_batches")
        rejected = {} if result.success else _rejected(result)
        report.ingested = [{"batch_id": b, **(archived.get(b) or rejected.get(b) or {})} for b in plan.batches]
        if rejected:
            result = execute(PROJECT, {TICK_TAG: "false"}, None)
    _report_projection(cli, result, report)
    report.seconds = time.perf_counter() - started
    return report


def _report_projection(cli: CliDagster, result: dg.ExecuteInProcessResult, report: CliRun) -> None:
    """The views' materialisations, what PostgreSQL lags by, and the checks' verdicts of the report's runs
    (which it tags, as tag_runs_whose_checks_failed does for the daemon's runs)."""
    from assets.sensors import check_verdicts, checks_tags

    home, views, instance = cli.home, cli.views, cli.instance
    report.refused = _refusals(home, views)
    if not result.success and not _only_refused(result):
        raise RuntimeError(_user_error(result))
    report.projection = {view.name: _materializations(instance, result.run_id, view.name).get(None, {})
                         for view in views}
    report.publish_error = next((m["publish_error"] for m in report.projection.values() if m.get("publish_error")),
                                None) or _publication_lag(home, views)
    for run_id in report.run_ids:
        verdicts = check_verdicts(instance, run_id)
        tags = checks_tags(verdicts)
        if tags:
            instance.add_run_tags(run_id, tags)
        report.checks.update({f"{asset}.{check}": verdict for (asset, check), verdict in verdicts.items()})


def _publication_lag(home: Home, views) -> str | None:
    """Why PostgreSQL (when it serves reads) does not show DuckDB's newest commit after the run, if it
    does not: its error, or the views it is behind on (a run that materialised no view reports it too)."""
    from pipelines.serve.publish import read_positions

    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, views, store.home.settings)
    if not positions.configured or positions.error is not None:
        return positions.error
    behind = [f"{p.view} ({p.behind} entries)" for p in positions.behind]
    return f"PostgreSQL is behind DuckDB for {', '.join(behind)}" if behind else None


@dataclass
class CliRebuild:
    run_id: str
    metadata: dict  # the view's materialisation
    checks: dict[str, str]  # check name -> verdict (assets.sensors.check_verdicts)


def rebuild_through_dagster(home: Home, views, view: str) -> CliRebuild:
    """`inorder rebuild VIEW` as a run of the `rebuild_view` job on the instance: a materialisation of the
    view's asset, so its checks run after it (a failed blocking check fails the command)."""
    from assets.jobs import REBUILD
    from assets.sensors import check_verdicts
    from assets.views import REBUILD_CONFIG

    cli = CliDagster(home, views)
    result = cli.execute(REBUILD, run_config=REBUILD_CONFIG, selection=[dg.AssetKey(view)])
    checks = {check: verdict for (_, check), verdict in check_verdicts(cli.instance, result.run_id).items()}
    if not result.success:
        failure = _step_failure(result)
        failed = sorted(name for name, verdict in checks.items() if verdict == "failed")
        raise RuntimeError(_user_error(result) if failure and failure.step_failure_data.error
                           else f"the rebuild's checks failed: {', '.join(failed)}")
    return CliRebuild(result.run_id, _materializations(cli.instance, result.run_id, view).get(None, {}), checks)


def _user_error(result: dg.ExecuteInProcessResult) -> str:
    """The message of the exception that failed the run's step, as the command would have said it had it
    raised it itself (Dagster wraps it: the innermost cause is the step's own)."""
    failure = _step_failure(result)
    error = failure.step_failure_data.error if failure else None
    if error is None:
        return "the run failed"
    while error.cause is not None:
        error = error.cause
    message = error.message.strip()
    name, colon, said = message.partition(": ")  # "pipelines.engine.order.NotParked: stream … is not parked"
    return said if colon and name.rsplit(".", 1)[-1] == error.cls_name else message


def _run_written(cli: CliDagster, job: str, run_config: dict, selection: list[dg.AssetKey] | None
                 ) -> list[tuple[str, dict]]:
    """Run a writing command's job (at once refused, like the command, when another writer holds the
    store); (asset, metadata) of each view it materialised, in order; its failure's message raised."""
    result = cli.execute(job, run_config=run_config, selection=selection)
    if not result.success:
        raise RuntimeError(_user_error(result))
    views = {view.name for view in cli.views}
    return [(m.asset_key.to_user_string(), {k: v.value for k, v in m.metadata.items()})
            for m in (e.step_materialization_data.materialization for e in result.get_asset_materialization_events())
            if m.asset_key.to_user_string() in views]


def operator_through_dagster(home: Home, views, view: str, streams: list[str] | None, action: str) -> list[str]:
    """`inorder retry` or `skip` as a run of its job: the view's materialisation, so its checks follow.
    Returns the streams acted on (none: nothing was parked)."""
    from assets.jobs import RETRY, SKIP
    from assets.views import OPERATOR_STREAMS, action_config

    cli = CliDagster(home, views, home.lock_wait_seconds)
    config = action_config(action, **({"streams": streams} if streams is not None else {}))
    done = _run_written(cli, {"retry": RETRY, "skip": SKIP}[action], config, [dg.AssetKey(view)])
    return [stream for _, metadata in done for stream in metadata[OPERATOR_STREAMS]]


def publish_through_dagster(home: Home, views, full: str | None):
    """`inorder publish` as a run of the `publish_views` job: each view published is materialised, so its
    checks follow. Returns the publications, in the order they were made."""
    from assets.jobs import PUBLISH_JOB
    from assets.views import PUBLISH, action_config
    from pipelines.serve.publish import Publication

    cli = CliDagster(home, views, home.lock_wait_seconds)
    done = _run_written(cli, PUBLISH_JOB, action_config(PUBLISH, **({"full": full} if full else {})), None)
    return [Publication(name, m["publish/entry"], "", m["publish/mode"], m["publish/rows"], m["publish/seconds"])
            for name, m in done]
