"""What an operator must hear about: reject and late rates over thresholds, any bug in a view's
handlers, and why (the commonest reasons), streams blocked past their timers, parked streams,
rejected files. The checks (pipelines/observe/checks.py, made Dagster's in assets/checks.py) turn these
verdicts yellow or red; everything here reads the store only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, NamedTuple, Sequence

import duckdb

from pipelines.engine.ingest import archive_path
from pipelines.engine.routing import unrouted
from pipelines.store.database import Home, us_from_utc
from pipelines.engine.outcomes import COUNTED, EntryKind, Outcome, OUTCOME_COLUMNS
from pipelines.store.layout import LIVE, uncommitted
from pipelines.view import Thresholds, View

Severity = Literal["WARN", "ERROR"]
DAY = timedelta(hours=24)


class Window(NamedTuple):
    """A view's outcome counts over some of its ledger entries."""

    label: str  # "last run" or "last 24 h"
    entries: int
    # the messages the entries brought to an outcome, whether newly selected or released from a pending
    # buffer (a tick's skipped gap, a retry): what a rate is a share of
    outcomes: int
    late: int
    reject: int  # messages a handler refused (`Reject`), each once however often it was retried
    bug: int  # messages a handler failed on with any other exception (a bug in the view), each once

    def rate(self, outcome: str) -> float:
        return getattr(self, outcome) / self.outcomes if self.outcomes else 0.0


class Verdict(NamedTuple):
    passed: bool
    severity: Severity | None  # None when passed
    description: str
    window: Window | None  # the window the verdict is about (its reasons are listed); None: nothing to judge


# a view's ledger rows of its last run: a pass writes its rows with one commit time
LAST_RUN = "view = $view AND committed_at = (SELECT max(committed_at) FROM inorder.batches WHERE view = $view)"
# the entries of each window: the last run, and the last 24 h of logical time before the view's newest entry
WINDOW_ENTRIES = {
    "last run": f"SELECT entry_idx FROM inorder.batches WHERE {LAST_RUN}",
    "last 24 h": "SELECT entry_idx FROM inorder.batches WHERE view = $view AND received_at > "
                 "(SELECT max(received_at) FROM inorder.batches WHERE view = $view) - $day::INTERVAL",
}
# a handler_error row's class, 'reject' or 'bug' (rows written before classes were logged have none: a
# Reject is still known by its exception type)
ERROR_CLASS = "coalesce(e.error_class, CASE WHEN e.exception_type = 'Reject' THEN 'reject' ELSE 'bug' END)"
_MESSAGES = "count(DISTINCT (e.stream_id, e.seq))"  # a message's retried attempts are one message
# a window's outcomes: the ledger's, but for handler errors, which are counted from the error log by message
# as the rates' numerators are (a parked message's failure is logged at once, and reaches the ledger only if
# it is skipped)
_SETTLED = " + ".join(f"coalesce(sum({name}), 0)" for name in OUTCOME_COLUMNS if name != Outcome.HANDLER_ERROR)


def _of_class(error_class: str) -> str:
    return f"{ERROR_CLASS} = '{error_class}'"


def _run(con: duckdb.DuckDBPyConnection, sql: str, **params: object) -> duckdb.DuckDBPyConnection:
    """Run `sql` with the named parameters it uses (DuckDB refuses any it does not)."""
    return con.execute(sql, {name: value for name, value in params.items() if f"${name}" in sql})


def _logged(label: str, kind: str, where: str = "TRUE") -> str:
    """The view's error rows of `kind` logged by the entries of the window `label`."""
    return (f"FROM inorder.errors e WHERE e.view = $view AND e.kind = '{kind}' AND {where} "
            f"AND e.entry_idx IN ({WINDOW_ENTRIES[label]})")


def recent_windows(con: duckdb.DuckDBPyConnection, view: str) -> list[Window]:
    """The view's last run (the entries of its newest commit) and the last 24 h of logical time before
    its newest entry. Rejects and bugs come from the error log, by message: a parked message's failed
    attempts are one message, and a bug that parked its stream counts although it moved no watermark.
    A window counts every outcome its entries produced: a tick selects nothing, yet the messages a
    skipped gap releases are applied, refused or failed on there."""
    windows = []
    for label, entries in WINDOW_ENTRIES.items():
        failed = f"(SELECT {_MESSAGES} {_logged(label, 'handler_error')})"
        reject, bug = (f"(SELECT {_MESSAGES} {_logged(label, 'handler_error', _of_class(error_class))})"
                       for error_class in ("reject", "bug"))
        windows.append(Window(label, *map(int, _run(
            con, f"SELECT count(*), {_SETTLED} + {failed}, coalesce(sum(late), 0), {reject}, {bug} "
                 f"FROM inorder.batches WHERE view = $view AND entry_idx IN ({entries})",
            view=view, day=DAY).fetchone())))
    return windows


def judge_rate(outcome: str, windows: list[Window], thresholds: Thresholds, min_selected: int) -> Verdict:
    """ERROR when a window's rate is above `thresholds.error`, WARN above `thresholds.warn`; a window of
    fewer than `min_selected` outcomes is too small a sample to judge."""
    judged = [w for w in windows if w.outcomes >= min_selected]
    if not judged:
        most = max(w.outcomes for w in windows)
        return Verdict(True, None, f"{most} outcomes at most in a window: fewer than the "
                                   f"{min_selected} (`alerts.min_selected`) a rate is judged on", None)
    worst = max(judged, key=lambda w: w.rate(outcome))
    rate = worst.rate(outcome)
    said = (f"{outcome} rate {rate:.2%} in the {worst.label} ({getattr(worst, outcome)} of {worst.outcomes} "
            f"outcomes); warn above {thresholds.warn:.2%}, fail above {thresholds.error:.2%}")
    if rate > thresholds.error:
        return Verdict(False, "ERROR", said, worst)
    if rate > thresholds.warn:
        return Verdict(False, "WARN", said, worst)
    return Verdict(True, None, said, worst)


def judge_bugs(windows: list[Window]) -> Verdict:
    """ERROR on any bug: unlike a refusal, a bug is never expected, whatever the sample."""
    worst = max(windows, key=lambda w: w.bug)
    if worst.bug:
        return Verdict(False, "ERROR", f"{worst.bug} messages failed on a bug in the view's handlers in the "
                                       f"{worst.label} ({worst.outcomes} outcomes)", worst)
    return Verdict(True, None, "no handler failed on a bug in the last 24 h", worst)


class Reason(NamedTuple):
    """Why messages ended as errors of one kind: one reason, how many, and where to look first."""

    reason: str
    messages: int
    streams: int
    example: str  # a stream and seq it happened to


REASON_HEADER = ("reason", "messages", "streams", "e.g.")

# what each kind of error row says about why: a handler's exception, or the skipped gap a late message missed
_REASON = {
    "reject": "e.message",
    "bug": "e.exception_type || ': ' || e.message",
    "late": "coalesce((SELECT 'its gap was skipped (' || g.reason || ')' FROM inorder.gaps g WHERE g.view = e.view "
            "AND g.stream_id = e.stream_id AND e.seq BETWEEN g.first_missing AND g.last_missing LIMIT 1), e.reason)",
}


def top_reasons(con: duckdb.DuckDBPyConnection, view: str, outcome: str, window: Window,
                limit: int = 5) -> list[Reason]:
    """The commonest reasons behind `outcome` (reject, bug or late) in the window, commonest first."""
    kind, where = ("late", "TRUE") if outcome == "late" else ("handler_error", _of_class(outcome))
    rows = _run(
        con, f"SELECT {_REASON[outcome]} AS why, {_MESSAGES} AS messages, count(DISTINCT e.stream_id), "
             f"min(e.stream_id || ' seq ' || e.seq) {_logged(window.label, kind, where)} "
             "GROUP BY why ORDER BY messages DESC, why LIMIT $limit", view=view, day=DAY, limit=limit).fetchall()
    return [Reason(*row) for row in rows]


def parked_reasons(con: duckdb.DuckDBPyConnection, view: str, limit: int = 5) -> list[Reason]:
    """Why the view's parked streams are parked: the exceptions their parked messages raised, commonest first."""
    rows = con.execute(
        f"SELECT {_REASON['bug']} AS why, {_MESSAGES} AS messages, count(DISTINCT e.stream_id), "
        "min(e.stream_id || ' seq ' || e.seq) FROM inorder.watermarks w JOIN inorder.errors e ON e.view = w.view "
        "AND e.stream_id = w.stream_id AND e.seq = w.last_seq + 1 AND e.kind = 'handler_error' "
        "WHERE w.view = $view AND w.parked GROUP BY why ORDER BY messages DESC, why LIMIT $limit",
        {"view": view, "limit": limit}).fetchall()
    return [Reason(*row) for row in rows]


class OverdueStream(NamedTuple):
    stream_id: str
    waiting_for: int
    blocked_since: datetime
    due_at: datetime  # when the gap timer fires, in logical time
    overdue_seconds: float  # how long before the instant judged it was due


class TimerClock(NamedTuple):
    """The instant `no_overdue_blocked_streams` judges gap timers at, the clock it comes from, and why."""

    clock: Literal["logical", "wall"]
    at: datetime
    why: str


def timer_clock(con: duckdb.DuckDBPyConnection, tick_interval: timedelta, wall_now: datetime) -> TimerClock:
    """Logical time judges every home: a timer not due at the store's newest logical time (its newest
    entry's T) was not missed, whatever the wall clock says. A backfill, the demo's runs and a first batch
    given `--now` in the past all record times the wall clock has long passed.

    A home whose runs take their time from the clock is judged by the wall clock too, less one tick
    interval: there, logical time follows the clock, so a timer due by the clock fires at the next tick,
    and one that did not says that no tick ran. A home follows the clock when its newest committed entry
    was committed within one tick interval of its logical time (a run with no `--now`, or a `--now` of the
    present); a `--now` further back than that is a time the run was given."""
    logical = logical_now(con)
    lag = _newest_commit_lag(con)
    if lag is None:
        return TimerClock("logical", logical, "the newest entry's: nothing is committed yet")
    if lag > tick_interval:
        return TimerClock("logical", logical, f"the newest entry's, a time its run was given: it was committed "
                                              f"{_span(lag)} later, so the wall clock does not judge its timers")
    if wall_now - tick_interval <= logical:
        return TimerClock("logical", logical, "the newest entry's: the runs take their time from the clock, and "
                                              "less than a tick interval has passed since")
    return TimerClock("wall", wall_now - tick_interval, f"the runs take their time from the clock, and the "
                                                        f"newest entry is {_span(wall_now - logical)} old")


def _newest_commit_lag(con: duckdb.DuckDBPyConnection) -> timedelta | None:
    """How long after its logical time the store's newest committed entry was first committed (the
    ledger's `committed_at` is the wall clock's); None when nothing is committed."""
    return con.execute("SELECT min(committed_at) - min(received_at) FROM inorder.batches "
                       "WHERE entry_idx = (SELECT max(entry_idx) FROM inorder.batches)").fetchone()[0]


def _span(span: timedelta) -> str:
    return str(timedelta(seconds=round(span.total_seconds())))


def overdue_streams(con: duckdb.DuckDBPyConnection, view: View, at: datetime,
                    limit: int = 20) -> tuple[int, list[OverdueStream]]:
    """Streams blocked (not parked) whose gap timer was due at `at` (blocked_since + gap_timeout <= at, the
    engine's own rule) and has not fired. Returns (how many, the oldest)."""
    at_us = us_from_utc(at)
    where = ("FROM inorder.watermarks WHERE view = ? AND blocked_at IS NOT NULL AND NOT parked "
             "AND epoch_us(blocked_since) + ? <= ?")
    params = [view.name, view.gap_timeout_us, at_us]
    count = con.execute(f"SELECT count(*) {where}", params).fetchone()[0]
    rows = con.execute(f"SELECT stream_id, last_seq + 1, blocked_since {where} ORDER BY blocked_since, stream_id "
                       "LIMIT ?", [*params, limit]).fetchall()
    due = timedelta(microseconds=view.gap_timeout_us)
    return count, [OverdueStream(s, seq, since, since + due, (at_us - us_from_utc(since + due)) / 1e6)
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


def logical_now(con: duckdb.DuckDBPyConnection) -> datetime:
    """The newest logical time the ingest log recorded (the wall clock's now when it holds nothing)."""
    return con.execute("SELECT coalesce(max(received_at), now()) FROM inorder.ingest_log").fetchone()[0]


def last_run_counts(con: duckdb.DuckDBPyConnection, view: str) -> dict[str, int]:
    """What the view's newest commit did: its ledger rows' selected messages, outcomes and gaps skipped."""
    names = COUNTED
    row = _run(con, f"SELECT {', '.join(f'coalesce(sum({n}), 0)' for n in names)} FROM inorder.batches "
                    f"WHERE {LAST_RUN}", view=view).fetchone()
    return {name: int(n) for name, n in zip(names, row)}


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
        f"SELECT count(*) FROM inorder.ingest_log l WHERE {uncommitted(LIVE.state, '?')}",
        [view.name, view.name]).fetchone()[0]
    return Lag(ingestion, _event_time_lag(con, home, view), behind)


def _event_time_lag(con: duckdb.DuckDBPyConnection, home: Home, view: View) -> float | None:
    """From the batches of the view's last run: the newest occurred_at among the messages its walked
    streams ended on (each stream's message at last_seq), against the run's logical time."""
    last_run = con.execute(
        f"SELECT entry_idx, kind, received_at FROM inorder.batches WHERE {LAST_RUN}", {"view": view.name}).fetchall()
    files = [str(archive_path(home, e)) for e, kind, _ in last_run if kind == EntryKind.BATCH
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
