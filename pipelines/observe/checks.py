"""The checks on every view and on the ingest log, evaluated on the store (read-only): the view's Great
Expectations suite, the conservation identity (blocking), that no stream's watermark moved backwards,
that keys are unique, that PostgreSQL shows its newest commit, and what an operator must act on (reject
and late rates over the view's thresholds, any bug in its handlers, streams blocked past their timers,
parked streams); on the ingest log: no new rejected files, no unrouted records. A check that fails or
warns says why (`top_reasons`) and what to run next (`next_command`).

No Dagster here: each check returns a `CheckOutcome` whose metadata are plain values; assets/checks.py
turns them into Dagster's asset check results."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import duckdb

from pipelines.observe.expectations import SuiteResult, sample_row, suite_markdown, validate_suite
from pipelines.observe.health import (REASON_HEADER, Reason, Severity, Verdict, Window, duplicate_keys, judge_bugs,
                              judge_rate, newest_entry, overdue_streams, parked_reasons, parked_streams,
                              recent_windows, rejected_after, timer_clock, top_reasons, unrouted_after)
from pipelines.observe.markdown import markdown_table
from pipelines.serve.publish import read_positions
from pipelines.engine.routing import describe_unrouted, subscribed_types
from pipelines.observe.status import read_status
from pipelines.records import select
from pipelines.store.database import Store
from pipelines.view import Thresholds, View

SAMPLE = 5


class Markdown(str):
    """A metadata value shown as Markdown (a plain `str` is text)."""


class CheckOutcome(NamedTuple):
    """A check's verdict. Metadata values: bool, int, float, str (text), Markdown, or lists and dicts (JSON)."""

    passed: bool
    metadata: dict[str, object]
    description: str | None = None
    severity: Severity = "ERROR"  # how a check that did not pass counts: a failure, or a warning


OnTables = Callable[[duckdb.DuckDBPyConnection, View], CheckOutcome]  # a check that reads the store's tables
Evaluate = Callable[[Store, View], CheckOutcome]  # ... or its archive too


class ViewCheck(NamedTuple):
    name: str
    describe: Callable[[View], str]  # the check's description, for the view
    evaluate: Evaluate
    blocking: bool = False


def _on_tables(name: str, describe: Callable[[View], str], evaluate: OnTables, blocking: bool = False) -> ViewCheck:
    return ViewCheck(name, describe, lambda store, view: evaluate(store.con, view), blocking)


def expectations(con: duckdb.DuckDBPyConnection, view: View,
                 archived: Callable[[int], Path] | None = None) -> CheckOutcome:
    """The view's suite. With `archived` (where the home archives an entry's messages), its failing rows name
    their stream and the newest message that stream applied (`last_applied`), and the next step."""
    suite = validate_suite(con, view)
    failures = suite.failures
    metadata: dict[str, object] = {
        "suite": suite.suite, "results": Markdown(suite_markdown(suite)), "expectations": len(suite.results),
        "failed": len(failures), "failures": failures}
    if failures and archived is not None:
        rows = failing_rows(con, archived, view, suite)
        metadata |= {"failing_rows": Markdown(markdown_table(FAILING_ROWS_HEADER, [r.cells() for r in rows])),
                     "failing_row_writers": [r.as_json() for r in rows],
                     "next_command": f"(fix the handler that wrote them, or the expectation, then: inorder rebuild "
                                     f"{view.name})"}
    return CheckOutcome(not failures, metadata, None if not failures else
                        f"{len(failures)} of {len(suite.results)} expectations of suite {suite.suite} failed")


class Applied(NamedTuple):
    """The newest message a view applied to a stream: no later message of the stream wrote its rows."""

    seq: int
    event_type: str
    batch_id: str
    line: int

    def describe(self) -> str:
        return f"seq {self.seq} {self.event_type} (batch {self.batch_id}, line {self.line})"


def last_applied(con: duckdb.DuckDBPyConnection, archived: Callable[[int], Path], view: View,
                 stream_ids: Sequence[str]) -> dict[str, Applied]:
    """The newest message the view applied to each stream: at or below its watermark, the first copy the archive
    holds of its seq (a later one was a duplicate or a conflict), of an event type the view handles, neither in
    a gap the stream skipped (its copy came late) nor logged as a handler_error (not applied; one a retry
    applied later is passed over too). The store does not record which message wrote a row, so this is the
    last one that can have. Reads only the archived batches that hold a copy of these streams' walked seqs
    (`inorder.ingest_seq_ranges`), for the few streams a check samples."""
    if not stream_ids or not view.handlers:
        return {}
    streams = "SELECT unnest(?::VARCHAR[])"
    walked = (f"JOIN inorder.watermarks w ON w.view = ? AND w.stream_id = {{s}}.stream_id AND w.stream_id IN "
              f"({streams})")
    entries = con.execute(f"SELECT DISTINCT i.entry_idx FROM inorder.ingest_seq_ranges i "
                          f"{walked.format(s='i')} AND i.min_seq <= w.last_seq ORDER BY 1",
                          [view.name, list(stream_ids)]).fetchall()
    files = [str(path) for (entry,) in entries if (path := archived(entry)).exists()]
    if not files:
        return {}
    rows = con.execute(f"""
        WITH first_copy AS (
            SELECT a.stream_id, {select('a', Applied._fields)} FROM read_parquet(?) a
            {walked.format(s='a')} AND a.seq <= w.last_seq
            WHERE a.stream_type IN (SELECT unnest(?::VARCHAR[]))
            QUALIFY row_number() OVER (PARTITION BY a.stream_id, a.seq ORDER BY a.entry_idx, a.line) = 1)
        SELECT f.* FROM first_copy f
        WHERE f.event_type IN (SELECT unnest(?::VARCHAR[]))
          AND NOT EXISTS (SELECT 1 FROM inorder.errors e WHERE e.view = ? AND e.kind = 'handler_error'
                          AND e.stream_id = f.stream_id AND e.seq = f.seq)
          AND NOT EXISTS (SELECT 1 FROM inorder.gaps g WHERE g.view = ? AND g.stream_id = f.stream_id
                          AND f.seq BETWEEN g.first_missing AND g.last_missing)
        QUALIFY row_number() OVER (PARTITION BY f.stream_id ORDER BY f.seq DESC) = 1""",
        [files, view.name, list(stream_ids), list(view.subscribes), list(view.handlers), view.name,
         view.name]).fetchall()
    return {stream: Applied(*applied) for stream, *applied in rows}


FAILING_ROWS_HEADER = ("table", "expectation", "row (keys)", "stream", "its newest applied message")


class FailingRow(NamedTuple):
    """A sampled row of a failing expectation, its stream (None in an aggregate table, whose rows every stream
    shares, or when only its value is known), and the newest message that stream applied."""

    table: str
    expectation: str
    row: str
    stream_id: str | None
    applied: Applied | None

    def cells(self) -> tuple:
        written = (self.applied.describe() if self.applied else "none applied") if self.stream_id else \
            "no one stream's (an aggregate row, or only its value is known)"
        return self.table, self.expectation, self.row, self.stream_id, written

    def as_json(self) -> dict:
        return {"table": self.table, "expectation": self.expectation, "row": self.row, "stream_id": self.stream_id,
                "applied": self.applied._asdict() if self.applied else None}


def failing_rows(con: duckdb.DuckDBPyConnection, archived: Callable[[int], Path], view: View,
                 suite: SuiteResult) -> list[FailingRow]:
    """The failing expectations' sampled rows (at most 5 each), with the newest message their stream applied."""
    tables = {table.name: table for table in view.tables}
    sampled = []
    for result in suite.results:
        columns = result.kwargs.get("column_list") or [result.kwargs.get("column")]
        stream_key = tables[result.table].stream_key
        for found in result.sample_rows:
            stream = str(found[stream_key]) if stream_key in found else None
            sampled.append((result, sample_row(found, columns), stream))
    applied = last_applied(con, archived, view, sorted({stream for *_, stream in sampled if stream is not None}))
    return [FailingRow(result.table, result.type, row, stream, applied.get(stream) if stream else None)
            for result, row, stream in sampled]


def conservation(con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    (status,) = read_status(con, [view]).views
    unbalanced = con.execute(
        "SELECT batch_id, records, malformed, normalised FROM inorder.batches "
        "WHERE view = ? AND records != malformed + normalised LIMIT ?", [view.name, SAMPLE]).fetchall()
    outcomes = sum(status.outcomes.values())
    return CheckOutcome(status.conserved and not unbalanced, {
        "selected": int(status.selected), "outcomes": int(outcomes), "pending": int(status.pending),
        "ledger_pending": int(status.ledger_pending),
        "difference": int(status.selected - outcomes - status.pending),
        "unbalanced_batches": [list(map(str, row)) for row in unbalanced],
    })


def watermarks_never_move_back(con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    moved_back = "FROM inorder.watermarks WHERE view = ? AND last_seq < prev_last_seq"
    count, = con.execute(f"SELECT count(*) {moved_back}", [view.name]).fetchone()
    sample = con.execute(f"SELECT stream_id, prev_last_seq, last_seq {moved_back} ORDER BY stream_id LIMIT ?",
                         [view.name, SAMPLE]).fetchall()
    streams, = con.execute("SELECT count(*) FROM inorder.watermarks WHERE view = ?", [view.name]).fetchone()
    return CheckOutcome(count == 0, {
        "streams": int(streams), "moved_back": int(count),
        "sample": [{"stream_id": s, "before": b, "after": a} for s, b, a in sample],
    })


def keys_unique(con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    duplicated = duplicate_keys(con, view)
    return CheckOutcome(not any(duplicated.values()), {f"duplicated_{name}": int(n) for name, n in duplicated.items()})


def published(store: Store, view: View) -> CheckOutcome:
    positions = read_positions(store.con, [view], store.home.settings)
    if not positions.configured:
        return CheckOutcome(True, {"configured": False}, "INORDER_SERVE_POSTGRES is not set: nothing is published")
    if positions.error is not None:
        return CheckOutcome(False, {"error": positions.error}, f"PostgreSQL cannot be read: {positions.error}")
    (position,) = positions.entries
    return CheckOutcome(position.current, {
        "configured": True, "committed_entry": int(position.committed or 0),
        "published_entry": int(position.published if position.published is not None else -1),
        "behind_entries": int(position.behind),
    }, None if position.current else f"PostgreSQL is {position.behind} entries behind DuckDB: `inorder publish` "
                                     "catches it up")


def _window_metadata(windows: list[Window], outcome: str) -> dict:
    metadata: dict[str, object] = {}
    for w in windows:
        prefix = w.label.replace(" ", "_")
        metadata[f"{prefix}/rate_pct"] = float(round(100 * w.rate(outcome), 2))  # a percentage: 6.22, not 0.062222
        metadata[f"{prefix}/{outcome}"] = int(getattr(w, outcome))
        metadata[f"{prefix}/outcomes"] = int(w.outcomes)
    return metadata


def _next_step(reasons: list[Reason], command: str) -> dict:
    """What a check that is not green says about why, and what to run next."""
    return {"top_reasons": Markdown(markdown_table(REASON_HEADER, reasons) if reasons else "none logged"),
            "next_command": command}


def _why(con: duckdb.DuckDBPyConnection, view: View, verdict: Verdict, outcome: str, command: str) -> dict:
    """A failing or warning verdict's reasons (in the window it judged) and the command to run next."""
    if verdict.passed or verdict.window is None:
        return {}
    return _next_step(top_reasons(con, view.name, outcome, verdict.window), command)


def _outcome(verdict: Verdict, metadata: dict, why: dict) -> CheckOutcome:
    return CheckOutcome(verdict.passed, {**metadata, **why}, verdict.description, verdict.severity or "ERROR")


def _fix_then_retry(view: View) -> str:
    return f"(fix the view, then: inorder retry --view {view.name} --all)"


def _thresholds(view: View, outcome: str) -> Thresholds:
    return getattr(view.alerts, f"{outcome}_rate")


def rate(outcome: str, kind: str, con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    """The share of a window's outcomes that were `outcome` (reject or late) against the view's
    thresholds; `kind` is the error log's kind that lists them."""
    thresholds = _thresholds(view, outcome)
    windows = recent_windows(con, view.name)
    verdict = judge_rate(outcome, windows, thresholds, view.alerts.min_selected)
    # the view's configuration as text: Dagster plots every number, and these never change from run to run
    metadata = {"warn_above": f"{thresholds.warn:.2%}", "fail_above": f"{thresholds.error:.2%}",
                "min_selected": str(view.alerts.min_selected), **_window_metadata(windows, outcome)}
    return _outcome(verdict, metadata, _why(con, view, verdict, outcome,
                                            f"inorder errors --view {view.name} --kind {kind}"))


def _describe_rate(outcome: str, what: str, view: View) -> str:
    thresholds = _thresholds(view, outcome)
    return (f"The share of outcomes that were {what}, in the last run and over the last 24 h of logical time "
            f"(every message an entry brought to an outcome, released by a tick or a retry too): warns above "
            f"{thresholds.warn:.2%}, fails above {thresholds.error:.2%}, judged on {view.alerts.min_selected} "
            f"outcomes at least (the view's `alerts`)")


def no_handler_bugs(con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    windows = recent_windows(con, view.name)
    verdict = judge_bugs(windows)
    return _outcome(verdict, _window_metadata(windows, "bug"), _why(
        con, view, verdict, "bug", f"inorder errors --view {view.name} --kind handler_error {_fix_then_retry(view)}"))


def no_overdue_blocked_streams(tick_interval: timedelta, con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    judged = timer_clock(con, tick_interval, datetime.now(timezone.utc))
    count, oldest = overdue_streams(con, view, judged.at)
    metadata: dict[str, object] = {
        "overdue_streams": int(count), "clock": judged.clock, "judged_at": judged.at.isoformat(),
        "oldest": [{"stream_id": o.stream_id, "waiting_for_seq": o.waiting_for,
                    "blocked_since": o.blocked_since.isoformat(), "timer_due_at": o.due_at.isoformat(),
                    "overdue_seconds": round(o.overdue_seconds)} for o in oldest],
    }
    clock = "logical time" if judged.clock == "logical" else "the wall clock, less the tick interval"
    when = f"at {judged.at.isoformat()} by {clock} ({judged.why})"
    if count == 0:
        return CheckOutcome(True, metadata, f"No stream is blocked past its gap timer {when}")
    command = metadata["next_command"] = f"inorder pending --view {view.name}"
    stalled = " Is the tick schedule running?" if judged.clock == "wall" else ""
    return CheckOutcome(False, metadata, f"{count} streams are blocked past their gap timer {when}: `{command}` "
                                         f"lists them.{stalled}")


def no_parked_streams(con: duckdb.DuckDBPyConnection, view: View) -> CheckOutcome:
    count, first = parked_streams(con, view.name)
    metadata = {"parked_streams": int(count),
                "first": [{"stream_id": s, "parked_seq": q, "attempts": a} for s, q, a in first]}
    if count:
        metadata |= _next_step(parked_reasons(con, view.name),
                               f"inorder pending --view {view.name} {_fix_then_retry(view)}")
    return CheckOutcome(count == 0, metadata, None if count == 0 else
                        f"{count} parked streams: fix the view, then `inorder retry --view {view.name} --all` "
                        f"(or `inorder skip`)", "WARN")


def view_checks(tick_interval: timedelta) -> tuple[ViewCheck, ...]:
    """Every view's checks, in the order they are evaluated; `tick_interval` is the tick schedule's."""
    return (
        ViewCheck("expectations", lambda view: f"The Great Expectations suite of {view.name}'s declared "
                  "expectations, evaluated in DuckDB SQL (no table is loaded whole into pandas); a failing row "
                  "names its stream and the newest message that stream applied",
                  lambda store, view: expectations(store.con, view, store.home.archived)),
        _on_tables("conservation", lambda view: "selected = applied + ignored + handler_error + duplicate + late + "
                   "conflict + pending, and records = malformed + normalised per batch", conservation, blocking=True),
        _on_tables("watermarks_never_move_back", lambda view: "No stream's last_seq is below the value it had "
                   "before its latest commit", watermarks_never_move_back),
        _on_tables("keys_unique", lambda view: "No key occurs twice: a stream's watermark, its buffered seqs, and the "
                   "primary key of each keyed and append table (these carry no PRIMARY KEY: the commit keeps them "
                   "unique)", keys_unique),
        ViewCheck("published", lambda view: "PostgreSQL (INORDER_SERVE_POSTGRES) shows the view as DuckDB has it "
                   "after its newest commit; passes with nothing to check when publishing is not configured",
                   published),
        _on_tables("reject_rate", partial(_describe_rate, "reject", "refused by a handler (`Reject`: business "
                   "refusals, expected at some rate)"), partial(rate, "reject", "handler_error")),
        _on_tables("late_rate", partial(_describe_rate, "late", "late (after their gap was skipped)"),
                   partial(rate, "late", "late")),
        _on_tables("no_handler_bugs", lambda view: "No message failed on a bug in the view's handlers (an exception "
                   "other than `Reject`) in the last run or the last 24 h of logical time: a bug is never normal, "
                   "one fails", no_handler_bugs),
        _on_tables("no_overdue_blocked_streams", lambda view: f"No stream blocked past its gap_timeout "
                   f"({view.gap_timeout:g}s) with its timer unfired, by logical time (the newest entry's): a timer "
                   "that is not due there never fails. A home whose runs take their time from the clock is judged "
                   f"by the wall clock too, less the tick interval ({tick_interval.total_seconds():g}s): there, a "
                   "timer that should have fired and did not says the tick schedule is not running",
                   partial(no_overdue_blocked_streams, tick_interval)),
        _on_tables("no_parked_streams", lambda view: "No stream parked by a handler error, waiting for `inorder "
                   "retry` or `inorder skip` (warns)", no_parked_streams),
    )


VIEW_CHECKS = tuple(check.name for check in view_checks(timedelta(0)))  # every view's (no tick interval names one)
INGEST_CHECKS = ("no_new_rejected_files", "no_new_unrouted_records")  # `event_batches`' checks of the whole ingest log
FILE_CHECK = "file_not_rejected"  # `event_batches`' check of each partition (a landing file)


def no_new_rejected_files(con: duckdb.DuckDBPyConnection, after: int) -> CheckOutcome:
    """No landing file was rejected since entry `after` (the newest one the check looked at before)."""
    rejected, newest = rejected_after(con, after), int(newest_entry(con))
    return CheckOutcome(not rejected, {
        "checked_up_to_entry": newest, "new_rejected_files": len(rejected),
        "rejected": Markdown("\n".join(f"- `{r.batch_id}` (entry {r.entry_idx}): {r.reason}" for r in rejected)
                             or "none"),
    }, None if not rejected else
        f"{len(rejected)} landing files rejected since entry {after}: {rejected[0].batch_id}: {rejected[0].reason}")


def no_new_unrouted_records(con: duckdb.DuckDBPyConnection, after: int, views: Sequence[View]) -> CheckOutcome:
    """Every record of the batches archived since entry `after` is of a stream type some view subscribes to."""
    found, newest = unrouted_after(con, after, views), int(newest_entry(con))
    totals = dict(sum((Counter(batch.unrouted) for batch in found), Counter()))
    return CheckOutcome(not found, {
        "checked_up_to_entry": newest, "unrouted_records": sum(totals.values()), "unrouted_by_stream_type": totals,
        "batches": Markdown("\n".join(f"- `{b.batch_id}` (entry {b.entry_idx}): {b.unrouted}" for b in found)
                            or "none"),
    }, None if not found else
        f"{len(found)} batches since entry {after}: {describe_unrouted(totals, subscribed_types(views))}", "WARN")
