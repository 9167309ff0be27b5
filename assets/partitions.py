"""One dynamic partition per batch file of the landing folder."""

from datetime import datetime, timezone

import dagster as dg

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


def run_time(context) -> datetime | None:
    """The run's logical time from its tag, or None for the wall clock."""
    text = context.run.tags.get(NOW_TAG)
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
