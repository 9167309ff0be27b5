"""Dagster assets over the engine (thin layer: the work is in pipelines/)."""

from __future__ import annotations

ALL_ASSETS: list = []
