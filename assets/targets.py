"""What Dagster run a run plan (`pipelines.facade.plan_run`) becomes: `inorder run` executes it, the landing
sensor and the tick schedule request it."""

from typing import NamedTuple, Sequence

import dagster as dg

from assets.tags import RANGE_END_TAG, RANGE_START_TAG, TICK_TAG
from pipelines.facade import RunPlan

INGEST_AND_PROJECT, PROJECT = "ingest_and_project", "project_views"
LOG_KEYS = [dg.AssetKey("errors"), dg.AssetKey("gaps")]


class RunTarget(NamedTuple):
    """The Dagster run a plan becomes."""

    job: str
    tags: dict[str, str]
    asset_selection: list[dg.AssetKey] | None  # None: the whole job
    new_partitions: list[str]  # event_batches partitions to add before the run


def run_target(plan: RunPlan, known_partitions: Sequence[str]) -> RunTarget:
    """New batches: one run that ingests them (a range of partitions, from the first to the last in the
    order they were added) and projects every view. Else a projection run: a tick's selects the views it
    projects and the logs, and materialises those it walked (none when no timer was due); otherwise every
    view (it finishes what an interrupted run archived, and catches PostgreSQL up)."""
    if plan.batches:
        known = set(known_partitions)
        new = [b for b in plan.batches if b not in known]
        order = {key: i for i, key in enumerate([*known_partitions, *new])}
        ranked = sorted(plan.batches, key=order.__getitem__)
        return RunTarget(INGEST_AND_PROJECT, {RANGE_START_TAG: ranked[0], RANGE_END_TAG: ranked[-1]}, None, new)
    if plan.tick:
        return RunTarget(PROJECT, {TICK_TAG: "true"}, [dg.AssetKey(v) for v in plan.projected] + LOG_KEYS, [])
    return RunTarget(PROJECT, {TICK_TAG: "false"}, None, [])
