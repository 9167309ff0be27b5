"""DESIGN §2 step 2: route each message to the views that subscribe to its stream type."""

from __future__ import annotations

from typing import Iterable

from pyspark.sql import DataFrame, SparkSession

from pipelines.view import View


def subscriptions(views: Iterable[View]) -> list[tuple[str, str]]:
    """(stream_type, view) pairs."""
    return [(stream_type, view.name) for view in views for stream_type in view.subscribes]


def select_views(spark: SparkSession, messages: DataFrame, view_entries: list[tuple[str, int]],
                 views: Iterable[View]) -> DataFrame:
    """One row per (message, subscribed view), kept only where the entry is still to be projected
    for that view (`view_entries` lists those (view, entry_idx) pairs)."""
    subs = spark.createDataFrame(subscriptions(views), "stream_type string, view string")
    todo = spark.createDataFrame(view_entries, "view string, entry_idx long")
    return messages.join(subs.hint("broadcast"), "stream_type").join(todo.hint("broadcast"), ["view", "entry_idx"])
