"""The landing sensor: a new batch file → a dynamic partition and a run to ingest it; after each
successful ingest run, a run that projects it."""

import json
from contextlib import contextmanager
from typing import Iterator

import dagster as dg
import duckdb

from assets.jobs import ingest_job, project_job
from assets.partitions import BATCHES, CLI_HOME_TAG, NOW_TAG
from pipelines.ingest import new_landing_files
from pipelines.store import ENGINE_DDL, Home, Store, StoreBusy
from resources import FoldersResource, ReadStoreResource, inorder_home

STORE_WAIT_SECONDS = 10.0  # a sensor or schedule evaluation has 60 s: a store held longer is looked at next time


@contextmanager
def _ingest_log(home: Home) -> Iterator[Store]:
    """The store read-only; before the first run, an empty one (nothing is ingested yet)."""
    if home.database.exists():
        home.file_wait_seconds = min(home.file_wait_seconds, STORE_WAIT_SECONDS)
        with Store.open_read_only(home) as store:
            yield store
        return
    con = duckdb.connect(":memory:")
    con.execute(ENGINE_DDL)
    with Store(con, None, home, read_only=True) as store:
        yield store


@dg.sensor(job=ingest_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds a partition of event_batches per landing file the ingest log does not hold yet "
                       "(or a changed file's new content) and requests its run")
def landing_sensor(context: dg.SensorEvaluationContext, read_store: ReadStoreResource,
                   folders: FoldersResource) -> dg.SensorResult | dg.SkipReason:
    """What is new is what `inorder run` would ingest (`pipelines.ingest.new_landing_files`, read from the
    ingest log): a file already ingested, by the CLI or by an earlier run, never starts a run; a file
    whose stem another file claimed gets its whole name as key (ingested as a visible clash, never
    skipped); a changed file gets `name@hash` (set aside as a rejected batch). The cursor keeps the
    keys requested but not yet in the ingest log, with the file's size and mtime, so a queued run is
    not requested again; the run_key is the partition key, so even a lost cursor never launches a
    batch twice."""
    requested = json.loads(context.cursor) if context.cursor else {}
    home = inorder_home(read_store, folders)
    try:
        with _ingest_log(home) as store:
            new = new_landing_files(store, home)
    except StoreBusy as busy:
        return dg.SkipReason(f"the read store is busy ({busy}); the next evaluation looks again")
    waiting, keys = {}, []
    for landing in new:
        try:
            stat = landing.path.stat()
        except OSError:
            continue  # gone since it was listed: the next evaluation looks again
        now = [landing.path.name, stat.st_size, stat.st_mtime_ns]
        if requested.get(landing.batch_id) != now:
            keys.append(landing.batch_id)
        waiting[landing.batch_id] = now
    existing = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=key) for key in keys],
        dynamic_partitions_requests=[BATCHES.build_add_request([k for k in keys if k not in existing])] if keys else [],
        cursor=json.dumps(dict(sorted(waiting.items()))),
    )


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[ingest_job], request_job=project_job,
                      minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
                      description="Projects what each successful ingest_batch run archived (every view; only the "
                                  "views it changes are materialised)")
def project_after_ingest(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
    run = context.dagster_run
    if CLI_HOME_TAG in run.tags:
        return dg.SkipReason("`inorder run` projects in its own run")
    now = {NOW_TAG: run.tags[NOW_TAG]} if NOW_TAG in run.tags else {}
    return dg.RunRequest(run_key=f"project-after-{run.run_id}", tags=now)
