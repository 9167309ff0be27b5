"""Dagster assets (the views and the error and gap logs are the outputs of `projections`), checks, jobs,
sensors and schedules over the engine (thin: the work is in pipelines/). Each is made by a factory that
takes the views: nothing is loaded at import (inorder/definitions.py builds the code location)."""

from typing import NamedTuple, Sequence

import dagster as dg

from assets.checks import build_checks
from assets.ingest import event_batches_asset
from assets.jobs import Jobs, build_jobs
from assets.schedules import tick_schedule
from assets.sensors import build_sensors
from assets.views import projections_asset
from pipelines.view import View


class Layer(NamedTuple):
    """The Dagster definitions of one view set."""

    event_batches: dg.AssetsDefinition
    projections: dg.AssetsDefinition
    checks: list[dg.AssetChecksDefinition]
    jobs: Jobs
    sensors: list[dg.SensorDefinition]
    schedule: dg.ScheduleDefinition

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        return [self.event_batches, self.projections]


def build_layer(views: Sequence[View]) -> Layer:
    views = tuple(views)
    event_batches, projections = event_batches_asset(views), projections_asset(views)
    jobs = build_jobs(views, event_batches, projections)
    return Layer(event_batches, projections, build_checks(views), jobs, build_sensors(views, jobs),
                 tick_schedule(views, jobs.project))


__all__ = ["Layer", "build_layer"]
