"""The tick schedule: moves logical time when no batch arrives, so blocked gaps can time out."""

from datetime import datetime, timedelta, timezone
from typing import Sequence

import dagster as dg

from assets.targets import run_target
from pipelines.engine.ingest import LogicalTimeError
from pipelines.facade import plan_run
from pipelines.store.database import StoreBusy
from pipelines.view import View
from resources import HomeResource

TICK_INTERVAL = timedelta(minutes=5)  # the cron below
STORE_WAIT_SECONDS = 10.0  # a sensor or schedule evaluation has 60 s: a store held longer is looked at next time


def tick_schedule(views: Sequence[View], project_job) -> dg.ScheduleDefinition:
    """The schedule that ticks `project_job` for these views."""
    @dg.schedule(job=project_job, cron_schedule="*/5 * * * *", name="tick_schedule",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="Every 5 minutes: a tick, only when a gap timer is due (it materialises just the views it walks) "
                             "or when no entry was recorded for longer than the tick interval (it walks nothing, "
                             "so it materialises nothing)")
    def _tick(context: dg.ScheduleEvaluationContext, home: HomeResource) -> dg.RunRequest | dg.SkipReason:
        if not home.home().database.exists():
            return dg.SkipReason(f"no read store at {home.home().database} yet")
        now = context.scheduled_execution_time or datetime.now(timezone.utc)
        try:
            with home.open_reader(wait_seconds=STORE_WAIT_SECONDS) as store:
                plan = plan_run(store, home.home(), views, now, min_idle_seconds=TICK_INTERVAL.total_seconds())
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

    return _tick
