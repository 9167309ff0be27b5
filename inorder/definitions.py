"""The Dagster code location: `dagster dev` from the repository root loads this (workspace.yaml).

Importing it reads nothing: Dagster calls `defs` when it loads the location, and only then are
INORDER_VIEWS and INORDER_HOME read. `build_definitions` makes the same definitions from any view set
and home (the CLI's runs, tests)."""

from __future__ import annotations

from typing import Sequence

import dagster as dg

from inorder.terminal import PROGRESS_LOGGER, progress_logger
from pipelines.store.database import Home
from pipelines.view import View


def build_definitions(views: Sequence[View], home=None) -> dg.Definitions:
    """The code location's definitions for `views`, on `home` (a Home, a HomeResource, or None: the
    environment's, read when a run sets its resources up). One process per run: every step shares one
    Spark session (no JVM start per asset)."""
    from assets import build_layer
    from resources import resources

    layer = build_layer(views)
    return dg.Definitions(
        assets=layer.assets,
        asset_checks=layer.checks,
        jobs=list(layer.jobs),
        sensors=layer.sensors,
        schedules=[layer.schedule],
        resources=resources(home),
        executor=dg.in_process_executor,
        # a run uses the console logger unless its config names loggers; `inorder run` names PROGRESS_LOGGER
        loggers={"console": dg.colored_console_logger, PROGRESS_LOGGER: dg.LoggerDefinition(
            progress_logger, description="`inorder run`: the steps' log lines (INFO and up) as progress lines on "
                                         "stderr, without Dagster's events")},
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What Dagster loads: the views of INORDER_VIEWS on the home of INORDER_HOME, read now. The location
    refuses to load views its home's store does not hold (or none of the views it holds), with the line
    `inorder run` prints: an asset of a foreign view would write them into the store for good."""
    from pipelines.config import Settings
    from pipelines.registry import load_views
    from pipelines.store.database import Store

    home = Home.of(Settings.from_env())  # the code location's edge: its one read of the INORDER_* variables
    views = load_views(home=home)
    if home.database.exists():
        Store.open_read_only(home, views).close()
    return build_definitions(views)
