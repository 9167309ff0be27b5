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
    """The cursor holds the batch ids already requested (those still in the landing folder); the
    run_key is the batch id, so even a lost cursor never makes Dagster launch a batch twice."""
    requested = set(json.loads(context.cursor)) if context.cursor else set()
    present = [batch_id_of(p) for p in landing_files(inorder_home(read_store, folders))]
    new = [key for key in dict.fromkeys(present) if key not in requested]
    existing = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=key) for key in new],
        dynamic_partitions_requests=[BATCHES.build_add_request([k for k in new if k not in existing])] if new else [],
        cursor=json.dumps(sorted(requested.intersection(present) | set(new))),
    )
