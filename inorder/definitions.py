"""The Dagster code location: `dagster dev` from the repository root loads this (workspace.yaml)."""

from __future__ import annotations

import dagster as dg

from assets import ALL_ASSETS, ALL_CHECKS, ALL_JOBS, landing_sensor, tick_schedule
from resources import RESOURCES

# One process per run: every step shares one Spark session (no JVM start per asset).
defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=ALL_JOBS,
    sensors=[landing_sensor],
    schedules=[tick_schedule],
    resources=RESOURCES,
    executor=dg.in_process_executor,
)
