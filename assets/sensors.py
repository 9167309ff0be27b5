"""The landing sensor: new batch files → dynamic partitions and one run that ingests and projects
them; after an ingest-only run, or one a rejected file failed before it projected, a projection run."""

import json
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, Sequence

import dagster as dg
import duckdb

from assets.jobs import Jobs
from assets.partitions import BATCHES
from assets.schedules import STORE_WAIT_SECONDS
from assets.tags import CLI_HOME_TAG, NOW_TAG
from assets.targets import run_target
from pipelines.facade import plan_run
from pipelines.store.database import ENGINE_DDL, Store, StoreBusy
from pipelines.view import View
from resources import HomeResource

# a landed file waits at most this long for the sensor: the daemon looks about as often (freshness, issue 13)
LANDING_INTERVAL_SECONDS = 1


@contextmanager
def _ingest_log(home: HomeResource) -> Iterator[Store]:
    """The store read-only; before the first run, an empty one (nothing is ingested yet)."""
    if home.home().database.exists():
        with home.open_reader(wait_seconds=STORE_WAIT_SECONDS) as store:
            yield store
        return
    con = duckdb.connect(":memory:")
    con.execute(ENGINE_DDL)
    with Store(con, None, home.home(), read_only=True) as store:
        yield store


def build_sensors(views: Sequence[View], jobs: Jobs) -> list[dg.SensorDefinition]:
    return [landing_sensor(views, jobs.ingest_and_project), *projection_sensors(jobs), tag_runs_whose_checks_failed]


def landing_sensor(views: Sequence[View], ingest_and_project_job) -> dg.SensorDefinition:
    @dg.sensor(jobs=[ingest_and_project_job], minimum_interval_seconds=LANDING_INTERVAL_SECONDS,
               default_status=dg.DefaultSensorStatus.RUNNING, name="landing_sensor",
               description="Adds a partition of event_batches per landing file the ingest log does not hold yet "
                           "(or a changed file's new content) and requests one run that ingests and projects them")
    def _landing(context: dg.SensorEvaluationContext, home: HomeResource) -> dg.SensorResult | dg.SkipReason:
        return _new_landing_files(context, home, views)

    return _landing


def _new_landing_files(context: dg.SensorEvaluationContext, home: HomeResource,
                       views: Sequence[View]) -> dg.SensorResult | dg.SkipReason:
    """What is new is what `inorder run` would ingest (`pipelines.facade.plan_run`, read from the ingest
    log): a file already ingested, by the CLI or by an earlier run, never starts a run; a file whose
    stem another file claimed gets its whole name as key (ingested as a visible clash, never skipped);
    a changed file gets `name@hash` (set aside as a rejected batch). The cursor keeps the keys
    requested but not yet in the ingest log, with the file's size and mtime, so a queued run is not
    requested again; the run_key names the run's partitions, so even a lost cursor never launches the
    same batches twice."""
    requested = json.loads(context.cursor) if context.cursor else {}
    try:
        with _ingest_log(home) as store:
            plan = plan_run(store, home.home(), views)
    except StoreBusy as busy:
        return dg.SkipReason(f"the read store is busy ({busy}); the next evaluation looks again")
    waiting, fresh = {}, []
    for landing in plan.landing:
        try:
            stat = landing.path.stat()
        except OSError:
            continue  # gone since it was listed: the next evaluation looks again
        now = [landing.path.name, stat.st_size, stat.st_mtime_ns]
        if requested.get(landing.batch_id) != now:
            fresh.append(landing)
        waiting[landing.batch_id] = now
    cursor = json.dumps(dict(sorted(waiting.items())))
    if not fresh:
        return dg.SensorResult(cursor=cursor)
    target = run_target(replace(plan, landing=tuple(fresh)), context.instance.get_dynamic_partitions(BATCHES.name))
    keys = [f.batch_id for f in fresh]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=",".join(keys), tags=target.tags)],
        dynamic_partitions_requests=[BATCHES.build_add_request(target.new_partitions)] if target.new_partitions else [],
        cursor=cursor,
    )


def projection_sensors(jobs: Jobs) -> list[dg.SensorDefinition]:
    """After an ingest-only run, or one a rejected file failed before it projected: a projection run."""
    @dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[jobs.ingest],
                          request_job=jobs.project, minimum_interval_seconds=5,
                          default_status=dg.DefaultSensorStatus.RUNNING, name="project_after_ingest",
                          description="Projects what each successful ingest_batch run (a backfill of event_batches) "
                                      "archived (every view; only the views it changes are materialised)")
    def _after_ingest(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
        return _projection_after(context.dagster_run)

    @dg.run_failure_sensor(monitored_jobs=[jobs.ingest_and_project], request_job=jobs.project,
                           minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
                           name="project_after_rejection",
                           description="Projects what an ingest_and_project run archived when a rejected file failed "
                                       "it before its projection step")
    def _after_rejection(context: dg.RunFailureSensorContext) -> dg.RunRequest | dg.SkipReason:
        if not any(e.step_key == EVENT_BATCHES_STEP for e in context.get_step_failure_events()):
            return dg.SkipReason("the run failed after ingesting: projecting again would fail the same way")
        return _projection_after(context.dagster_run)

    return [_after_ingest, _after_rejection]


EVENT_BATCHES_STEP = dg.AssetKey("event_batches").to_python_identifier()


def _projection_after(run: dg.DagsterRun) -> dg.RunRequest | dg.SkipReason:
    if CLI_HOME_TAG in run.tags:
        return dg.SkipReason("`inorder run` projects in its own run")
    now = {NOW_TAG: run.tags[NOW_TAG]} if NOW_TAG in run.tags else {}
    return dg.RunRequest(run_key=f"project-after-{run.run_id}", tags=now)


CHECKS_TAG = "inorder/checks"  # on a successful run whose checks did not all pass: "2 failed, 1 warned"
FAILED_CHECKS_TAG = "inorder/failed_checks"  # ... and which: "accounts.reject_rate, …"


def check_verdicts(instance: dg.DagsterInstance, run_id: str) -> dict[tuple[str, str], str]:
    """(asset, check) -> "passed", "warned" (a WARN-severity check that did not pass) or "failed", for
    the checks a run evaluated: Dagster calls a run whose non-blocking checks failed a success."""
    verdicts = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.event_specific_data
        verdicts[(evaluation.asset_key.to_user_string(), evaluation.check_name)] = "passed" if evaluation.passed \
            else "warned" if evaluation.severity == dg.AssetCheckSeverity.WARN else "failed"
    return verdicts


def checks_tags(verdicts: dict[tuple[str, str], str]) -> dict[str, str]:
    """The tags that keep a run whose checks did not all pass from looking plain green (none when they did)."""
    failed = sorted(f"{asset}.{check}" for (asset, check), v in verdicts.items() if v == "failed")
    warned = sum(v == "warned" for v in verdicts.values())
    if not failed and not warned:
        return {}
    tags = {CHECKS_TAG: f"{len(failed)} failed, {warned} warned"}
    if failed:
        listed = ", ".join(failed)
        tags[FAILED_CHECKS_TAG] = listed if len(listed) <= 200 else listed[:199] + "…"
    return tags


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, minimum_interval_seconds=5,
                      default_status=dg.DefaultSensorStatus.RUNNING,
                      description=f"Tags a successful run whose checks failed or warned ({CHECKS_TAG}, "
                                  f"{FAILED_CHECKS_TAG}), so that its run page does not look plain green")
def tag_runs_whose_checks_failed(context: dg.RunStatusSensorContext) -> dg.SkipReason:
    tags = checks_tags(check_verdicts(context.instance, context.dagster_run.run_id))
    if tags:
        context.instance.add_run_tags(context.dagster_run.run_id, tags)
    return dg.SkipReason(f"tagged {tags[CHECKS_TAG]}" if tags else "every check of the run passed")
