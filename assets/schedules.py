"""The tick schedule: moves logical time when no batch arrives, so blocked gaps can time out."""

from datetime import datetime, timedelta, timezone

import dagster as dg

from assets.jobs import project_job
from assets.partitions import run_target
from assets.sensors import STORE_WAIT_SECONDS
from pipelines.ingest import LogicalTimeError
from pipelines.registry import load_views
from pipelines.run import plan_run
from pipelines.store import Store, StoreBusy
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
            plan = plan_run(store, home, ALL_VIEWS, now, min_idle_seconds=TICK_INTERVAL.total_seconds())
    except StoreBusy as busy:
        return dg.SkipReason(f"the read store is busy ({busy}); the next tick looks again")
    except LogicalTimeError as behind:  # runs with a later --now recorded logical time ahead of the clock
        return dg.SkipReason(str(behind))
    if plan.landing:
        return dg.SkipReason("new landing files: the landing sensor's run ingests and projects them")
    if plan.tick or plan.resumed:  # resumed: an interrupted run archived batches it did not project
        target = run_target(plan, [])
        return dg.RunRequest(tags=target.tags, asset_selection=target.asset_selection)
    return dg.SkipReason("no gap timer is due, and the newest entry is younger than the tick interval")
