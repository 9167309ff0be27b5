"""The Dagster code location: `dagster dev` from the repository root loads this (workspace.yaml)."""

from __future__ import annotations

import dagster as dg

from assets import ALL_ASSETS, ALL_CHECKS, ALL_JOBS, ALL_SENSORS, tick_schedule
from inorder.terminal import PROGRESS_LOGGER, progress_logger
from resources import RESOURCES

# One process per run: every step shares one Spark session (no JVM start per asset).
defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=ALL_JOBS,
    sensors=ALL_SENSORS,
    schedules=[tick_schedule],
    resources=RESOURCES,
    executor=dg.in_process_executor,
    # a run uses the console logger unless its config names loggers; `inorder run` names PROGRESS_LOGGER
    loggers={"console": dg.colored_console_logger, PROGRESS_LOGGER: dg.LoggerDefinition(
        progress_logger, description="`inorder run`: the steps' log lines (INFO and up) as progress lines on stderr, "
                                     "without Dagster's events")},
)
