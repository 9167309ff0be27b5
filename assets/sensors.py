"""The landing sensor: a new batch file → a dynamic partition and one run to ingest and project it."""

import json

import dagster as dg

from assets.jobs import ingest_job
from assets.partitions import BATCHES
from pipelines.ingest import batch_id_of, landing_files
from resources import FoldersResource, ReadStoreResource, inorder_home


@dg.sensor(job=ingest_job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds a partition of event_batches per new landing file and requests its run")
def landing_sensor(context: dg.SensorEvaluationContext, read_store: ReadStoreResource,
                   folders: FoldersResource) -> dg.SensorResult:
    """The cursor maps each requested partition key to its file (for files still in the landing
    folder). A file whose stem another file already claimed gets its whole name as key, so it is
    ingested as a visible clash, never skipped. The run_key is the partition key, so even a lost
    cursor never makes Dagster launch a batch twice."""
    claimed: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    present = landing_files(inorder_home(read_store, folders))
    new = []
    for path in present:
        key = batch_id_of(path)
        if claimed.get(key, path.name) != path.name:
            key = path.name
        if key not in claimed:
            claimed[key] = path.name
            new.append(key)
    names = {p.name for p in present}
    existing = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=key) for key in new],
        dynamic_partitions_requests=[BATCHES.build_add_request([k for k in new if k not in existing])] if new else [],
        cursor=json.dumps({k: v for k, v in sorted(claimed.items()) if v in names}),
    )
