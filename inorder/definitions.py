"""The Dagster code location (assets, sensors, schedules and checks arrive with the Dagster issue)."""

from __future__ import annotations

import dagster as dg

from assets import ALL_ASSETS

defs = dg.Definitions(assets=ALL_ASSETS)
