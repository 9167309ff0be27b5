"""The landing sensor: a new batch file → a dynamic partition and one run to ingest and project it."""

import json

import dagster as dg

from assets.jobs import ingest_job
from assets.partitions import BATCHES
from pipelines.ingest import batch_id_of, current_version, landing_files
from resources import FoldersResource, ReadStoreResource, inorder_home


@dg.sensor(job=ingest_job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds a partition of event_batches per new landing file (or changed file) and requests its run")
def landing_sensor(context: dg.SensorEvaluationContext, read_store: ReadStoreResource,
                   folders: FoldersResource) -> dg.SensorResult:
    """The cursor maps each requested partition key to its file, with the file's size and mtime (for
    files still in the landing folder). A file whose stem another file already claimed gets its whole
    name as key, so it is ingested as a visible clash, never skipped. A claimed file whose size or mtime
    changes gets a run under `name@hash` of its new content, which sets that content aside as a rejected
    batch (or finds it unchanged). The run_key is the partition key, so even a lost cursor never makes
    Dagster launch a batch twice."""
    claimed = {key: _claim(value) for key, value in (json.loads(context.cursor) if context.cursor else {}).items()}
    home = inorder_home(read_store, folders)
    present = landing_files(home)
    new = []
    for path in present:
        try:
            stat = path.stat()
            key = batch_id_of(path)
            if claimed.get(key, [path.name])[0] != path.name:
                key = path.name
            now = [path.name, stat.st_size, stat.st_mtime_ns]
            before = claimed.setdefault(key, now)
            if before is now:
                new.append(key)
            elif before[1] is not None and before[1:] != now[1:]:
                new.append(current_version(home, path)[0])
            claimed[key] = now
        except OSError:
            continue  # gone or unreadable since it was listed: the next evaluation looks again
    names = {p.name for p in present}
    existing = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=key) for key in new],
        dynamic_partitions_requests=[BATCHES.build_add_request([k for k in new if k not in existing])] if new else [],
        cursor=json.dumps({k: v for k, v in sorted(claimed.items()) if v[0] in names}),
    )


def _claim(value: str | list) -> list:
    """[file name, size, mtime_ns]; a cursor written before sizes were kept holds the file name alone."""
    return value if isinstance(value, list) else [value, None, None]
