"""Dagster assets (the views and the error and gap logs are the outputs of `projections`), checks, jobs, sensors and schedules over the engine (thin: the work is in pipelines/)."""

from assets.checks import ALL_CHECKS
from assets.ingest import event_batches
from assets.jobs import ingest_and_project_job, ingest_job, project_job, rebuild_job
from assets.schedules import tick_schedule
from assets.sensors import landing_sensor, project_after_ingest, project_after_rejection, tag_runs_whose_checks_failed
from assets.views import projections

ALL_ASSETS = [event_batches, projections]
ALL_JOBS = [ingest_and_project_job, ingest_job, project_job, rebuild_job]
ALL_SENSORS = [landing_sensor, project_after_ingest, project_after_rejection, tag_runs_whose_checks_failed]
__all__ = ["ALL_ASSETS", "ALL_CHECKS", "ALL_JOBS", "ALL_SENSORS", "tick_schedule"]
