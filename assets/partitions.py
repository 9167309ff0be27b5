"""One dynamic partition per batch file of the landing folder, and what run a run plan becomes."""

from datetime import datetime, timezone
from typing import NamedTuple, Sequence

import dagster as dg

from pipelines.run import RunPlan

BATCHES = dg.DynamicPartitionsDefinition(name="event_batches")
STORE_POOL = "inorder_store"  # every step that writes the read store; the instance limits it to one at a time
STORE_TAGS = {"inorder/store": "write"}  # run-level limit (instance config in inorder/dagster_runs.py)
NOW_TAG = "inorder/now"  # logical time of a run (ISO 8601); the wall clock when absent
TICK_TAG = "inorder/tick"  # "true": record a tick before projecting, so gap timers fire


CLI_HOME_TAG = "inorder/cli_home"  # the home an `inorder run` worked on
LOG_KEYS = [dg.AssetKey("errors"), dg.AssetKey("gaps")]


def tick_selection(due_views: list[str]) -> list[dg.AssetKey]:
    """What a tick materialises: the views with a gap timer due, and the logs (the tick schedule and
    `inorder run` both ask this); with none due, the logs alone, which a tick that walks nothing skips."""
    return [dg.AssetKey(v) for v in due_views] + LOG_KEYS


# Dagster's tags for a run over a range of partitions (what a single-run backfill sets)
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
INGEST_AND_PROJECT, PROJECT = "ingest_and_project", "project_views"


class RunTarget(NamedTuple):
    """The Dagster run a plan becomes: `inorder run` executes it, the sensor and schedule request it."""

    job: str
    tags: dict[str, str]
    asset_selection: list[dg.AssetKey] | None  # None: the whole job
    new_partitions: list[str]  # event_batches partitions to add before the run


def run_target(plan: RunPlan, known_partitions: Sequence[str]) -> RunTarget:
    """New batches: one run that ingests them (a range of partitions, from the first to the last in the
    order they were added) and projects every view. Else a projection run: a tick's selects the views
    with a timer due (and the logs); otherwise every view (it finishes what an interrupted run
    archived, and catches PostgreSQL up)."""
    if plan.batches:
        known = set(known_partitions)
        new = [b for b in plan.batches if b not in known]
        order = {key: i for i, key in enumerate([*known_partitions, *new])}
        ranked = sorted(plan.batches, key=order.__getitem__)
        return RunTarget(INGEST_AND_PROJECT, {RANGE_START_TAG: ranked[0], RANGE_END_TAG: ranked[-1]}, None, new)
    if plan.tick:
        return RunTarget(PROJECT, {TICK_TAG: "true"}, tick_selection(list(plan.due_views)), [])
    return RunTarget(PROJECT, {TICK_TAG: "false"}, None, [])


def run_time(context) -> datetime | None:
    """The run's logical time from its tag, or None for the wall clock."""
    text = context.run.tags.get(NOW_TAG)
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
