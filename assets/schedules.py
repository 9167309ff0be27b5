"""The tick schedule: moves logical time when no batch arrives, so blocked gaps can time out."""

import dagster as dg

from assets.jobs import project_job
from assets.partitions import TICK_TAG


@dg.schedule(job=project_job, cron_schedule="*/5 * * * *",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Every 5 minutes: record a tick at the wall clock and re-examine pending buffers")
def tick_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    return dg.RunRequest(run_key=None, tags={TICK_TAG: "true"})
