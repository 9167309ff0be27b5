"""Dagster assets (the views and the error and gap logs are the outputs of `projections`), checks, jobs, sensors and schedules over the engine (thin: the work is in pipelines/)."""

from assets.checks import ALL_CHECKS
from assets.ingest import event_batches
from assets.jobs import ingest_job, project_job, rebuild_view
from assets.schedules import tick_schedule
from assets.sensors import landing_sensor, project_after_ingest
from assets.views import projections

ALL_ASSETS = [event_batches, projections]
ALL_JOBS = [ingest_job, project_job, rebuild_view]
__all__ = ["ALL_ASSETS", "ALL_CHECKS", "ALL_JOBS", "landing_sensor", "project_after_ingest", "tick_schedule"]
