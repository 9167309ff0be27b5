"""The run tags and the concurrency pool every run that writes the store carries, and the logical time a
run's tag sets."""

from datetime import datetime, timezone

STORE_POOL = "inorder_store"  # every step that writes the read store; the instance limits it to one at a time
STORE_TAGS = {"inorder/store": "write"}  # run-level limit (instance config in inorder/dagster_runs.py)
NOW_TAG = "inorder/now"  # logical time of a run (ISO 8601); the wall clock when absent
TICK_TAG = "inorder/tick"  # "true": record a tick before projecting, so gap timers fire
CLI_HOME_TAG = "inorder/cli_home"  # the home an `inorder` command's run worked on
# Dagster's tags for a run over a range of partitions (what a single-run backfill sets)
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def run_time(context) -> datetime | None:
    """The run's logical time from its tag, or None for the wall clock."""
    text = context.run.tags.get(NOW_TAG)
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
