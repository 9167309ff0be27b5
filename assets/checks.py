"""Asset checks on every view: its Great Expectations suite, the conservation identity (blocking),
that no stream's watermark moved backwards, that PostgreSQL shows its newest commit, and what an
operator must act on (reject and late rates over the view's thresholds, any bug in its handlers,
streams blocked past their timers, parked streams); on `event_batches`: no new rejected files.
A check that fails or warns says why (`top_reasons`) and what to run next (`next_command`)."""

from datetime import datetime, timezone
from typing import Callable, Iterator, NamedTuple

import dagster as dg

from pipelines.expectations import suite_markdown, validate_suite
from pipelines.health import (REASON_HEADER, Reason, Verdict, Window, duplicate_keys, judge_bugs, judge_rate,
                              newest_entry, overdue_streams, parked_reasons, parked_streams, recent_windows,
                              rejected_after, top_reasons, unrouted_after)
from pipelines.markdown import markdown_table
from pipelines.publish import read_positions
from pipelines.registry import load_views
from pipelines.select import describe_unrouted, subscribed_types
from pipelines.status import read_status
from pipelines.store import Store
from pipelines.view import Thresholds, View
from assets.schedules import TICK_INTERVAL
from resources import FoldersResource, ReadStoreResource, inorder_home

ALL_VIEWS = load_views()  # INORDER_VIEWS, read when the code location loads

SAMPLE = 5


class ViewCheck(NamedTuple):
    spec: dg.AssetCheckSpec
    evaluate: Callable[[Store], dg.AssetCheckResult]  # on the store, opened read-only once for the view's checks


def _view_checks(view: View) -> list[ViewCheck]:
    checks: list[ViewCheck] = []

    def check(name: str, description: str, blocking: bool = False):
        def register(evaluate: Callable[[Store], dg.AssetCheckResult]) -> Callable:
            spec = dg.AssetCheckSpec(name, asset=view.name, description=description, blocking=blocking)
            checks.append(ViewCheck(spec, evaluate))
            return evaluate
        return register

    @check("expectations", f"The Great Expectations suite of {view.name}'s declared expectations, evaluated in "
                           "DuckDB SQL (no table is loaded whole into pandas)")
    def expectations(store: Store) -> dg.AssetCheckResult:
        suite = validate_suite(store.con, view)
        failures = suite.failures
        return dg.AssetCheckResult(passed=not failures, metadata={
            "suite": dg.MetadataValue.text(suite.suite),
            "results": dg.MetadataValue.md(suite_markdown(suite)),
            "expectations": dg.MetadataValue.int(len(suite.results)),
            "failed": dg.MetadataValue.int(len(failures)),
            "failures": dg.MetadataValue.json(failures),
        }, description=None if not failures else
            f"{len(failures)} of {len(suite.results)} expectations of suite {suite.suite} failed")

    @check("conservation", "selected = applied + ignored + handler_error + duplicate + late + "
                           "conflict + pending, and records = malformed + normalised per batch", blocking=True)
    def conservation(store: Store) -> dg.AssetCheckResult:
        (status,) = read_status(store.con, [view]).views
        unbalanced = store.con.execute(
            "SELECT batch_id, records, malformed, normalised FROM inorder.batches "
            "WHERE view = ? AND records != malformed + normalised LIMIT ?", [view.name, SAMPLE]).fetchall()
        outcomes = sum(status.outcomes.values())
        return dg.AssetCheckResult(passed=status.conserved and not unbalanced, metadata={
            "selected": dg.MetadataValue.int(status.selected),
            "outcomes": dg.MetadataValue.int(outcomes),
            "pending": dg.MetadataValue.int(status.pending),
            "ledger_pending": dg.MetadataValue.int(status.ledger_pending),
            "difference": dg.MetadataValue.int(status.selected - outcomes - status.pending),
            "unbalanced_batches": dg.MetadataValue.json([list(map(str, row)) for row in unbalanced]),
        })

    @check("watermarks_never_move_back", "No stream's last_seq is below the value it had before its latest commit")
    def watermarks_monotonic(store: Store) -> dg.AssetCheckResult:
        count, = store.con.execute("SELECT count(*) FROM inorder.watermarks WHERE view = ? "
                                   "AND last_seq < prev_last_seq", [view.name]).fetchone()
        sample = store.con.execute(
            "SELECT stream_id, prev_last_seq, last_seq FROM inorder.watermarks WHERE view = ? "
            "AND last_seq < prev_last_seq ORDER BY stream_id LIMIT ?", [view.name, SAMPLE]).fetchall()
        streams, = store.con.execute("SELECT count(*) FROM inorder.watermarks WHERE view = ?",
                                     [view.name]).fetchone()
        return dg.AssetCheckResult(passed=count == 0, metadata={
            "streams": dg.MetadataValue.int(streams),
            "moved_back": dg.MetadataValue.int(count),
            "sample": dg.MetadataValue.json([{"stream_id": s, "before": b, "after": a} for s, b, a in sample]),
        })

    @check("keys_unique", "No key occurs twice: a stream's watermark, its buffered seqs, and the primary key of "
                          "each keyed and append table (these carry no PRIMARY KEY: the commit keeps them unique)")
    def keys_unique(store: Store) -> dg.AssetCheckResult:
        duplicated = duplicate_keys(store.con, view)
        return dg.AssetCheckResult(passed=not any(duplicated.values()), metadata={
            f"duplicated_{name}": dg.MetadataValue.int(n) for name, n in duplicated.items()})

    @check("published", "PostgreSQL (INORDER_SERVE_POSTGRES) shows the view as DuckDB has it after its newest "
                        "commit; passes with nothing to check when publishing is not configured")
    def published(store: Store) -> dg.AssetCheckResult:
        positions = read_positions(store.con, [view])
        if positions is None:
            return dg.AssetCheckResult(passed=True, metadata={"configured": dg.MetadataValue.bool(False)},
                                       description="INORDER_SERVE_POSTGRES is not set: nothing is published")
        if isinstance(positions, str):
            return dg.AssetCheckResult(passed=False, metadata={"error": dg.MetadataValue.text(positions)},
                                       description=f"PostgreSQL cannot be read: {positions}")
        (position,) = positions
        return dg.AssetCheckResult(passed=position.current, metadata={
            "configured": dg.MetadataValue.bool(True),
            "committed_entry": dg.MetadataValue.int(position.committed or 0),
            "published_entry": dg.MetadataValue.int(position.published if position.published is not None else -1),
            "behind_entries": dg.MetadataValue.int(position.behind),
        }, description=None if position.current else
            f"PostgreSQL is {position.behind} entries behind DuckDB: `inorder publish` catches it up")

    def window_metadata(windows: list[Window], outcome: str) -> dict:
        metadata = {}
        for w in windows:
            prefix = w.label.replace(" ", "_")
            metadata[f"{prefix}/rate"] = dg.MetadataValue.float(round(w.rate(outcome), 6))
            metadata[f"{prefix}/{outcome}"] = dg.MetadataValue.int(getattr(w, outcome))
            metadata[f"{prefix}/selected"] = dg.MetadataValue.int(w.selected)
        return metadata

    def rate_check(outcome: str, what: str, kind: str) -> None:
        thresholds: Thresholds = getattr(view.alerts, f"{outcome}_rate")

        @check(f"{outcome}_rate", f"The share of selected messages that were {what}, in the last run and over the "
                                  f"last 24 h of logical time: warns above {thresholds.warn:.2%}, fails above "
                                  f"{thresholds.error:.2%}, judged on {view.alerts.min_selected} selected messages "
                                  "at least (the view's `alerts`)")
        def rate(store: Store) -> dg.AssetCheckResult:
            windows = recent_windows(store.con, view.name)
            verdict = judge_rate(outcome, windows, thresholds, view.alerts.min_selected)
            metadata = {"warn_above": dg.MetadataValue.float(thresholds.warn),
                        "fail_above": dg.MetadataValue.float(thresholds.error),
                        "min_selected": dg.MetadataValue.int(view.alerts.min_selected),
                        **window_metadata(windows, outcome)}
            return _verdict(verdict, metadata,
                            _why(store, view, verdict, outcome, f"inorder errors --view {view.name} --kind {kind}"))

    rate_check("reject", "refused by a handler (`Reject`: business refusals, expected at some rate)", "handler_error")
    rate_check("late", "late (after their gap was skipped)", "late")

    @check("no_handler_bugs", "No message failed on a bug in the view's handlers (an exception other than `Reject`) "
                              "in the last run or the last 24 h of logical time: a bug is never normal, one fails")
    def no_handler_bugs(store: Store) -> dg.AssetCheckResult:
        windows = recent_windows(store.con, view.name)
        verdict = judge_bugs(windows)
        return _verdict(verdict, window_metadata(windows, "bug"),
                        _why(store, view, verdict, "bug",
                             f"inorder errors --view {view.name} --kind handler_error {_fix_then_retry(view)}"))

    @check("no_overdue_blocked_streams",
           f"No stream blocked longer than its gap_timeout ({view.gap_timeout:g}s) plus the tick interval "
           f"({TICK_INTERVAL.total_seconds():g}s) by the wall clock: a gap timer that should have fired did not "
           "(is the tick schedule running?)")
    def no_overdue_blocked_streams(store: Store) -> dg.AssetCheckResult:
        now = max(datetime.now(timezone.utc), store.con.execute(
            "SELECT coalesce(max(received_at), now()) FROM inorder.ingest_log").fetchone()[0])
        count, oldest = overdue_streams(store.con, view, now, TICK_INTERVAL)
        metadata = {
            "overdue_streams": dg.MetadataValue.int(count),
            "oldest": dg.MetadataValue.json([{"stream_id": o.stream_id, "waiting_for_seq": o.waiting_for,
                                             "blocked_since": o.blocked_since.isoformat(),
                                             "timer_due_at": o.due_at.isoformat(),
                                             "overdue_seconds": round(o.overdue_seconds)} for o in oldest]),
        }
        command = f"inorder pending --view {view.name}"
        if count:
            metadata["next_command"] = dg.MetadataValue.text(command)
        return dg.AssetCheckResult(passed=count == 0, metadata=metadata, description=None if count == 0 else
            f"{count} streams are blocked past their gap timer: `{command}` lists them")

    @check("no_parked_streams", "No stream parked by a handler error, waiting for `inorder retry` or "
                                "`inorder skip` (warns)")
    def no_parked_streams(store: Store) -> dg.AssetCheckResult:
        count, first = parked_streams(store.con, view.name)
        metadata = {"parked_streams": dg.MetadataValue.int(count),
                    "first": dg.MetadataValue.json([{"stream_id": s, "parked_seq": q, "attempts": a}
                                                    for s, q, a in first])}
        if count:
            metadata |= _next_step(parked_reasons(store.con, view.name),
                                   f"inorder pending --view {view.name} {_fix_then_retry(view)}")
        return dg.AssetCheckResult(
            passed=count == 0, severity=dg.AssetCheckSeverity.WARN, metadata=metadata,
            description=None if count == 0 else
            f"{count} parked streams: fix the view, then `inorder retry --view {view.name} --all` "
            f"(or `inorder skip`)")

    return checks


def _checks_for(view: View) -> dg.AssetChecksDefinition:
    """The view's checks as one step: a run evaluates them on one read-only open of the store (a step and an
    open per check took seconds of a small run). Each can still be run alone (subsettable), and a check
    that raises fails alone, saying why, without taking the others down."""
    checks = {c.spec.name: c for c in _view_checks(view)}

    @dg.multi_asset_check(specs=[c.spec for c in checks.values()], can_subset=True, name=f"{view.name}_checks")
    def view_checks(context: dg.AssetCheckExecutionContext, read_store: ReadStoreResource,
                    folders: FoldersResource) -> Iterator[dg.AssetCheckResult]:
        selected = {key.name for key in context.selected_asset_check_keys}
        with Store.open_read_only(inorder_home(read_store, folders)) as store:
            for name, view_check in checks.items():
                if name in selected:
                    yield _evaluated(view_check, store)

    return view_checks


def _evaluated(view_check: ViewCheck, store: Store) -> dg.AssetCheckResult:
    try:
        result = view_check.evaluate(store)
    except Exception as error:  # the check could not be evaluated: it fails, with the reason
        result = dg.AssetCheckResult(passed=False, description=f"the check raised {type(error).__name__}: {error}")
    return dg.AssetCheckResult(asset_key=view_check.spec.asset_key, check_name=view_check.spec.name,
                               passed=result.passed, severity=result.severity, metadata=result.metadata,
                               description=result.description)


def _verdict(verdict: Verdict, metadata: dict, why: dict) -> dg.AssetCheckResult:
    severity = dg.AssetCheckSeverity.WARN if verdict.severity == "WARN" else dg.AssetCheckSeverity.ERROR
    return dg.AssetCheckResult(passed=verdict.passed, severity=severity, metadata={**metadata, **why},
                               description=verdict.description)


def _why(store: Store, view: View, verdict: Verdict, outcome: str, command: str) -> dict:
    """A failing or warning verdict's reasons (in the window it judged) and the command to run next."""
    if verdict.passed or verdict.window is None:
        return {}
    return _next_step(top_reasons(store.con, view.name, outcome, verdict.window), command)


def _fix_then_retry(view: View) -> str:
    return f"(fix the view, then: inorder retry --view {view.name} --all)"


def _next_step(reasons: list[Reason], command: str) -> dict:
    """What a check that is not green says about why, and what to run next."""
    return {"top_reasons": dg.MetadataValue.md(markdown_table(REASON_HEADER, reasons) if reasons else "none logged"),
            "next_command": dg.MetadataValue.text(command)}


NO_NEW_REJECTED = dg.AssetCheckKey(dg.AssetKey("event_batches"), "no_new_rejected_files")


def _checked_up_to(context: dg.AssetCheckExecutionContext, key: dg.AssetCheckKey) -> int:
    """The newest entry an earlier evaluation of the check looked at (this run's own is only planned yet)."""
    for record in context.instance.event_log_storage.get_asset_check_execution_history(key, limit=20):
        checked = getattr(record.evaluation, "metadata", {}).get("checked_up_to_entry")
        if record.run_id != context.run.run_id and checked is not None:
            return int(checked.value)
    return 0


@dg.asset_check(asset="event_batches", name=NO_NEW_REJECTED.name,
                description="No landing file was rejected (unreadable, clashing or changed) since this check last ran")
def no_new_rejected_files(context: dg.AssetCheckExecutionContext, read_store: ReadStoreResource,
                          folders: FoldersResource) -> dg.AssetCheckResult:
    after = _checked_up_to(context, NO_NEW_REJECTED)
    with Store.open_read_only(inorder_home(read_store, folders)) as store:
        rejected, newest = rejected_after(store.con, after), newest_entry(store.con)
    return dg.AssetCheckResult(passed=not rejected, metadata={
        "checked_up_to_entry": dg.MetadataValue.int(newest),
        "new_rejected_files": dg.MetadataValue.int(len(rejected)),
        "rejected": dg.MetadataValue.md("\n".join(f"- `{r.batch_id}` (entry {r.entry_idx}): {r.reason}"
                                                   for r in rejected) or "none"),
    }, description=None if not rejected else
        f"{len(rejected)} landing files rejected since entry {after}: {rejected[0].batch_id}: {rejected[0].reason}")


NO_UNROUTED = dg.AssetCheckKey(dg.AssetKey("event_batches"), "no_unrouted_records")


@dg.asset_check(asset="event_batches", name=NO_UNROUTED.name,
                description="Every record of the batches archived since this check last ran is of a stream type "
                            "some view subscribes to (warns otherwise: a source.json that maps them wrong, most likely)")
def no_unrouted_records(context: dg.AssetCheckExecutionContext, read_store: ReadStoreResource,
                        folders: FoldersResource) -> dg.AssetCheckResult:
    after = _checked_up_to(context, NO_UNROUTED)
    with Store.open_read_only(inorder_home(read_store, folders)) as store:
        found, newest = unrouted_after(store.con, after, ALL_VIEWS), newest_entry(store.con)
    totals: dict[str, int] = {}
    for batch in found:
        for stream_type, n in batch.unrouted.items():
            totals[stream_type] = totals.get(stream_type, 0) + n
    return dg.AssetCheckResult(passed=not found, severity=dg.AssetCheckSeverity.WARN, metadata={
        "checked_up_to_entry": dg.MetadataValue.int(newest),
        "unrouted_records": dg.MetadataValue.int(sum(totals.values())),
        "unrouted_by_stream_type": dg.MetadataValue.json(totals),
        "batches": dg.MetadataValue.md("\n".join(f"- `{b.batch_id}` (entry {b.entry_idx}): {b.unrouted}"
                                                  for b in found) or "none"),
    }, description=None if not found else
        f"{len(found)} batches since entry {after}: {describe_unrouted(totals, subscribed_types(ALL_VIEWS))}")


ALL_CHECKS = [_checks_for(view) for view in ALL_VIEWS] + [no_new_rejected_files, no_unrouted_records]
