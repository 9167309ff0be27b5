"""CONCEPTS §2 step 2: route each message to the views that subscribe to its stream type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from pipelines.view import View

if TYPE_CHECKING:  # the readers (`status`, `errors`, `checks`) import this module for its counts, not Spark
    from pyspark.sql import DataFrame, SparkSession


def subscriptions(views: Iterable[View]) -> list[tuple[str, str]]:
    """(stream_type, view) pairs."""
    return [(stream_type, view.name) for view in views for stream_type in view.subscribes]


def subscribed_types(views: Iterable[View]) -> list[str]:
    """The stream types some view subscribes to, sorted."""
    return sorted({stream_type for stream_type, _ in subscriptions(views)})


def unrouted(stream_types: dict[str, int], views: Iterable[View]) -> dict[str, int]:
    """Of a batch's messages per stream type, those of the types no view subscribes to (CONCEPTS §2)."""
    subscribed = set(subscribed_types(views))
    return {t: n for t, n in sorted(stream_types.items()) if t not in subscribed and n}


def describe_unrouted(counts: dict[str, int], subscribed: Iterable[str]) -> str:
    """One line: what went unrouted, what the views subscribe to (`subscribed_types`), and the way back."""
    what = ", ".join(f"{n} of stream type {t!r}" for t, n in counts.items())
    return (f"{sum(counts.values())} records reached no view ({what}); the views subscribe to "
            f"{', '.join(subscribed) or 'nothing'}. If source.json maps them wrong, fix it and run "
            f"`inorder reingest BATCH…`")


def routes(view_entries: Iterable[tuple[str, int]], views: Iterable[View]) -> list[tuple[str, int, str]]:
    """(stream_type, entry_idx, the views that still have to project that entry's messages of that
    stream type, comma-joined and sorted): small enough to broadcast."""
    subscribed: dict[str, set[str]] = {}
    for stream_type, view in subscriptions(views):
        subscribed.setdefault(view, set()).add(stream_type)
    targets: dict[tuple[str, int], list[str]] = {}
    for view, entry_idx in view_entries:
        for stream_type in subscribed.get(view, ()):
            targets.setdefault((stream_type, entry_idx), []).append(view)
    return [(stream_type, entry_idx, ",".join(sorted(vs))) for (stream_type, entry_idx), vs in targets.items()]


def select_views(spark: SparkSession, messages: DataFrame, view_entries: list[tuple[str, int]],
                 views: Iterable[View]) -> DataFrame:
    """Each message once, with the views it goes to (`views`, comma-joined: view names are identifiers),
    kept only where some subscribed view still has to project its entry (`view_entries` lists those
    (view, entry_idx) pairs). One row per message, not per (message, view): the shuffle that brings a
    stream together carries each message once, and the walker hands it to each of its views."""
    targets = spark.createDataFrame(routes(view_entries, views), "stream_type string, entry_idx long, views string")
    return messages.join(targets.hint("broadcast"), ["stream_type", "entry_idx"])
