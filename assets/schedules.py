"""The tick schedule: moves logical time when no batch arrives, so blocked gaps can time out."""

from datetime import datetime, timedelta, timezone

import dagster as dg

from assets.jobs import project_job
from assets.partitions import TICK_TAG, tick_selection
from assets.sensors import STORE_WAIT_SECONDS
from pipelines.project import views_with_due_buffers
from pipelines.registry import load_views
from pipelines.store import Store, StoreBusy, us_from_utc
from resources import FoldersResource, ReadStoreResource, inorder_home

ALL_VIEWS = load_views()  # INORDER_VIEWS, read when the code location loads
TICK_INTERVAL = timedelta(minutes=5)  # the cron below


@dg.schedule(job=project_job, cron_schedule="*/5 * * * *",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Every 5 minutes: a tick, only when a gap timer is due (it projects just those views) "
                         "or when no entry was recorded for longer than the tick interval (it walks nothing, "
                         "so it materialises nothing)")
def tick_schedule(context: dg.ScheduleEvaluationContext, read_store: ReadStoreResource,
                  folders: FoldersResource) -> dg.RunRequest | dg.SkipReason:
    home = inorder_home(read_store, folders)
    if not home.database.exists():
        return dg.SkipReason(f"no read store at {home.database} yet")
    now = context.scheduled_execution_time or datetime.now(timezone.utc)
    home.file_wait_seconds = min(home.file_wait_seconds, STORE_WAIT_SECONDS)
    try:
        with Store.open_read_only(home) as store:
            due = views_with_due_buffers(store.con, ALL_VIEWS, us_from_utc(now))
            newest = store.last_logical_time_us()
    except StoreBusy as busy:
        return dg.SkipReason(f"the read store is busy ({busy}); the next tick looks again")
    if due or newest is None or us_from_utc(now) - newest > TICK_INTERVAL.total_seconds() * 1e6:
        return dg.RunRequest(tags={TICK_TAG: "true"}, asset_selection=tick_selection(due))
    return dg.SkipReason("no gap timer is due, and the newest entry is younger than the tick interval")
