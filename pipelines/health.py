"""What an operator must hear about: error and late rates over thresholds, streams blocked past their
timers, parked streams, rejected files. The Dagster checks (assets/checks.py) turn these verdicts
yellow or red; everything here reads the store only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, NamedTuple, Sequence

import duckdb

from pipelines.ingest import archive_path
from pipelines.select import unrouted
from pipelines.store import Home, us_from_utc
from pipelines.view import Thresholds, View

Severity = Literal["WARN", "ERROR"]
DAY = timedelta(hours=24)


class Window(NamedTuple):
    """A view's outcome counts over some of its ledger entries."""

    label: str  # "last run" or "last 24 h"
    entries: int
    selected: int
    handler_error: int
    late: int

    def rate(self, outcome: str) -> float:
        return getattr(self, outcome) / self.selected if self.selected else 0.0


class Verdict(NamedTuple):
    passed: bool
    severity: Severity | None  # None when passed
    description: str


# a view's ledger rows of its last run (parameters: the view twice): a pass writes its rows with one commit time
LAST_RUN = "view = ? AND committed_at = (SELECT max(committed_at) FROM inorder.batches WHERE view = ?)"


def recent_windows(con: duckdb.DuckDBPyConnection, view: str) -> list[Window]:
    """The view's last run (the entries of its newest commit: a pass writes its ledger rows with one
    commit time) and the last 24 h of logical time before its newest entry."""
    sums = "count(*), coalesce(sum(selected), 0), coalesce(sum(handler_error), 0), coalesce(sum(late), 0)"
    last = con.execute(f"SELECT {sums} FROM inorder.batches WHERE {LAST_RUN}", [view, view]).fetchone()
    day = con.execute(f"SELECT {sums} FROM inorder.batches WHERE view = ? AND received_at > "
                      "(SELECT max(received_at) FROM inorder.batches WHERE view = ?) - ?::INTERVAL",
                      [view, view, DAY]).fetchone()
    return [Window("last run", *map(int, last)), Window("last 24 h", *map(int, day))]


def judge_rate(outcome: str, windows: list[Window], thresholds: Thresholds) -> Verdict:
    """ERROR when a window's rate is above `thresholds.error`, WARN above `thresholds.warn`."""
    worst = max(windows, key=lambda w: w.rate(outcome))
    rate = worst.rate(outcome)
    said = (f"{outcome} rate {rate:.2%} in the {worst.label} ({getattr(worst, outcome)} of {worst.selected} "
            f"selected); warn above {thresholds.warn:.2%}, fail above {thresholds.error:.2%}")
    if rate > thresholds.error:
        return Verdict(False, "ERROR", said)
    if rate > thresholds.warn:
        return Verdict(False, "WARN", said)
    return Verdict(True, None, said)


class OverdueStream(NamedTuple):
    stream_id: str
    waiting_for: int
    blocked_since: datetime
    due_at: datetime  # when the gap timer fires, in logical time
    overdue_seconds: float  # past due + the tick interval


def overdue_streams(con: duckdb.DuckDBPyConnection, view: View, now: datetime, tick_interval: timedelta,
                    limit: int = 20) -> tuple[int, list[OverdueStream]]:
    """Streams blocked (not parked) for longer than the view's gap_timeout + the tick interval at `now`:
    a timer that should have fired did not (no tick is running, say). Returns (how many, the oldest)."""
    cutoff = us_from_utc(now) - view.gap_timeout_us - int(tick_interval.total_seconds() * 1e6)
    where = ("FROM inorder.watermarks WHERE view = ? AND blocked_at IS NOT NULL AND NOT parked "
             "AND epoch_us(blocked_since) < ?")
    count = con.execute(f"SELECT count(*) {where}", [view.name, cutoff]).fetchone()[0]
    rows = con.execute(f"SELECT stream_id, last_seq + 1, blocked_since {where} ORDER BY blocked_since, stream_id "
                       "LIMIT ?", [view.name, cutoff, limit]).fetchall()
    due = timedelta(microseconds=view.gap_timeout_us)
    return count, [OverdueStream(s, seq, since, since + due, (cutoff - us_from_utc(since)) / 1e6)
                   for s, seq, since in rows]


def parked_streams(con: duckdb.DuckDBPyConnection, view: str, limit: int = 20) -> tuple[int, list[tuple]]:
    """(how many, the first `limit` as (stream_id, parked seq, failed attempts))."""
    count = con.execute("SELECT count(*) FROM inorder.watermarks WHERE view = ? AND parked", [view]).fetchone()[0]
    rows = con.execute("SELECT stream_id, last_seq + 1, attempts FROM inorder.watermarks WHERE view = ? AND parked "
                       "ORDER BY stream_id LIMIT ?", [view, limit]).fetchall()
    return count, rows


class RejectedFile(NamedTuple):
    entry_idx: int
    batch_id: str
    file_name: str | None
    reason: str | None


def rejected_after(con: duckdb.DuckDBPyConnection, entry_idx: int) -> list[RejectedFile]:
    """Files set aside as rejected batches since entry `entry_idx`."""
    return [RejectedFile(*row) for row in con.execute(
        "SELECT entry_idx, batch_id, file_name, reason FROM inorder.ingest_log WHERE status = 'rejected' "
        "AND entry_idx > ? ORDER BY entry_idx", [entry_idx]).fetchall()]


class UnroutedBatch(NamedTuple):
    """A batch some of whose records reached no view: their stream types no view subscribes to."""

    entry_idx: int
    batch_id: str
    unrouted: dict[str, int]  # stream type -> records


def unrouted_after(con: duckdb.DuckDBPyConnection, entry_idx: int, views: Sequence[View]) -> list[UnroutedBatch]:
    """Archived batches since entry `entry_idx` with records of stream types no view subscribes to."""
    found = []
    for entry, batch_id, types in con.execute(
            "SELECT entry_idx, batch_id, stream_types FROM inorder.ingest_log WHERE kind = 'batch' "
            "AND status = 'archived' AND entry_idx > ? ORDER BY entry_idx", [entry_idx]).fetchall():
        counts = unrouted(dict(types or {}), views)
        if counts:
            found.append(UnroutedBatch(entry, batch_id, counts))
    return found


def newest_entry(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute("SELECT coalesce(max(entry_idx), 0) FROM inorder.ingest_log").fetchone()[0]


class Lag(NamedTuple):
    """How far a view trails, after its newest commit."""

    ingestion_seconds: float | None  # its newest batch: landing file's mtime -> committed to the view
    event_time_seconds: float | None  # logical time minus the newest occurred_at of a message it processed
    entries_behind: int  # archived entries of the ingest log not yet committed for the view


def view_lag(con: duckdb.DuckDBPyConnection, home: Home, view: View) -> Lag:
    newest = con.execute(
        "SELECT b.committed_at, l.mtime_ns FROM inorder.batches b JOIN inorder.ingest_log l USING (entry_idx) "
        "WHERE b.view = ? AND b.kind = 'batch' AND l.mtime_ns IS NOT NULL ORDER BY b.entry_idx DESC LIMIT 1",
        [view.name]).fetchone()
    ingestion = None if newest is None else max((us_from_utc(newest[0]) - newest[1] / 1000) / 1e6, 0.0)
    behind = con.execute(
        "SELECT count(*) FROM inorder.ingest_log l WHERE l.status = 'archived' "
        "AND (l.kind NOT IN ('retry', 'skip') OR l.target_view = ?) "
        "AND NOT EXISTS (SELECT 1 FROM inorder.batches b WHERE b.view = ? AND b.entry_idx = l.entry_idx)",
        [view.name, view.name]).fetchone()[0]
    return Lag(ingestion, _event_time_lag(con, home, view), behind)


def _event_time_lag(con: duckdb.DuckDBPyConnection, home: Home, view: View) -> float | None:
    """From the batches of the view's last run: the newest occurred_at among the messages its walked
    streams ended on (each stream's message at last_seq), against the run's logical time."""
    last_run = con.execute(
        f"SELECT entry_idx, kind, received_at FROM inorder.batches WHERE {LAST_RUN}", [view.name, view.name]).fetchall()
    files = [str(archive_path(home, e)) for e, kind, _ in last_run if kind == "batch"
             and archive_path(home, e).exists()]
    if not files:
        return None
    newest = con.execute(
        "SELECT max(try_cast(m.occurred_at AS TIMESTAMPTZ)) FROM read_parquet(?) m JOIN inorder.watermarks w "
        "ON w.view = ? AND w.stream_id = m.stream_id AND w.last_seq = m.seq", [files, view.name]).fetchone()[0]
    if newest is None:
        return None
    return (us_from_utc(max(t for _, _, t in last_run)) - us_from_utc(newest)) / 1e6


def duplicate_keys(con: duckdb.DuckDBPyConnection, view: View) -> dict[str, int]:
    """How many keys occur more than once, per table that relies on the commit rather than a PRIMARY KEY
    for uniqueness (docs/STORE.md): the view's watermarks (per stream) and pending buffers (per stream
    and seq), and each of its keyed and append tables (per primary key). All 0 in a healthy store."""
    def duplicated(source: str, keys: list[str], params: list) -> int:
        return con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {source} GROUP BY {', '.join(keys)} "
                           "HAVING count(*) > 1)", params).fetchone()[0]

    found = {"watermarks": duplicated("inorder.watermarks w WHERE w.view = ?", ["w.stream_id"], [view.name]),
             "pending": duplicated("inorder.pending p WHERE p.view = ?", ["p.stream_id", "p.seq"], [view.name])}
    for table in view.tables:
        if table.kind != "aggregate":
            found[table.name] = duplicated(f'"{table.name}" r', [f'r."{c}"' for c in table.primary_key], [])
    return found
