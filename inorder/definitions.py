"""The Dagster code location: `dagster dev` from the repository root loads this (workspace.yaml)."""

from __future__ import annotations

import dagster as dg

from assets import ALL_ASSETS, ALL_CHECKS, ALL_JOBS, ALL_SENSORS, tick_schedule
from assets.jobs import ALL_VIEWS
from inorder.terminal import PROGRESS_LOGGER, progress_logger
from pipelines.store import Home, Store
from resources import RESOURCES

# The code location refuses to load views its home's store does not hold (or none of the views it holds),
# with the line `inorder run` prints: an asset of a foreign view would write them into the store for good.
if Home.from_env().database.exists():
    Store.open_read_only(Home.from_env(), ALL_VIEWS).close()

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
