"""The asset checks, as Dagster sees them: each view's checks (pipelines/observe/checks.py evaluates them on the
store) and, on `event_batches`, no new rejected files, no unrouted records, and each partition's own
`file_not_rejected`. Nothing here reads the store's tables: each check's logic is the engine's."""

import warnings
from typing import Callable, Iterator, Sequence

import dagster as dg

from assets.ingest import FILE_NOT_REJECTED, file_verdict, rejection_next_step
from assets.partitions import BATCHES
from pipelines.observe import checks
from pipelines.observe.health import rejected_after
from pipelines.observe.checks import CheckOutcome, Markdown
from pipelines.store.database import Store
from pipelines.view import View
from assets.schedules import TICK_INTERVAL
from resources import HomeResource

NO_NEW_REJECTED, NO_NEW_UNROUTED = (dg.AssetCheckKey(dg.AssetKey("event_batches"), name) for name in checks.INGEST_CHECKS)


def _metadata_value(value: object) -> dg.MetadataValue:
    if isinstance(value, Markdown):
        return dg.MetadataValue.md(value)
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, str):
        return dg.MetadataValue.text(value)
    return dg.MetadataValue.json(value)


def check_result(outcome: CheckOutcome, **key: object) -> dg.AssetCheckResult:
    """The engine's verdict as Dagster's (`key`: asset_key and check_name, where a step has several)."""
    severity = dg.AssetCheckSeverity.WARN if outcome.severity == "WARN" else dg.AssetCheckSeverity.ERROR
    return dg.AssetCheckResult(passed=bool(outcome.passed), severity=severity, description=outcome.description,
                               metadata={name: _metadata_value(v) for name, v in outcome.metadata.items()}, **key)


# a check made ready in the run's context (what it reads of Dagster's history, before the store is opened), then
# evaluated on the store
Prepare = Callable[[dg.AssetCheckExecutionContext], Callable[[Store], CheckOutcome]]


def _checked_up_to(context: dg.AssetCheckExecutionContext, key: dg.AssetCheckKey) -> int:
    """The newest entry an earlier evaluation of the check looked at (this run's own is only planned yet)."""
    for record in context.instance.event_log_storage.get_asset_check_execution_history(key, limit=20):
        checked = getattr(record.evaluation, "metadata", {}).get("checked_up_to_entry")
        if record.run_id != context.run.run_id and checked is not None:
            return int(checked.value)
    return 0


def _since_last_evaluation(key: dg.AssetCheckKey, description: str,
                           evaluate: Callable[..., CheckOutcome]) -> tuple[dg.AssetCheckSpec, Prepare]:
    """A check on `event_batches` of what the ingest log holds since the check last ran."""
    def prepare(context: dg.AssetCheckExecutionContext) -> Callable[[Store], CheckOutcome]:
        after = _checked_up_to(context, key)
        return lambda store: evaluate(store.con, after)

    return dg.AssetCheckSpec(key.name, asset=key.asset_key, description=description), prepare


def _evaluations(views: Sequence[View]) -> dict[dg.AssetCheckKey, tuple[dg.AssetCheckSpec, Prepare]]:
    """Each view's checks, then those of `event_batches` that read the ingest log since they last ran: no new
    rejected files, no new unrouted records (for these views)."""
    found = {}
    for view in views:
        for c in checks.view_checks(TICK_INTERVAL):
            found[dg.AssetCheckKey(dg.AssetKey(view.name), c.name)] = (
                dg.AssetCheckSpec(c.name, asset=view.name, description=c.describe(view), blocking=c.blocking),
                lambda context, c=c, view=view: lambda store: c.evaluate(store, view))
    found[NO_NEW_REJECTED] = _since_last_evaluation(
        NO_NEW_REJECTED, "No landing file was rejected (unreadable, clashing or changed) since this check last ran",
        checks.no_new_rejected_files)
    found[NO_NEW_UNROUTED] = _since_last_evaluation(
        NO_NEW_UNROUTED, "Every record of the batches archived since this check last ran is of a stream type some "
                         "view subscribes to (warns otherwise: a source.json that maps them wrong, most likely)",
        lambda con, after: checks.no_new_unrouted_records(con, after, views))
    return found


def store_checks(views: Sequence[View]) -> list[dg.AssetChecksDefinition]:
    """Every check the store answers, a step per checked asset: a step evaluates those of its checks a run selected
    on one read-only open of the store (a step and an open per check took seconds of a small run: each step is
    several rows of Dagster's event log). Dagster skips a check step when an asset it checks was not materialised
    in the run: a step per asset skips only the checks of what the run left alone (a tick that touched none of the
    view's streams), never those of a view it moved. Each check can still be run alone (subsettable), and a check
    that raises fails alone, saying why, without taking the others down."""
    by_asset: dict[dg.AssetKey, dict[dg.AssetCheckKey, tuple[dg.AssetCheckSpec, Prepare]]] = {}
    for key, evaluation in _evaluations(views).items():
        by_asset.setdefault(key.asset_key, {})[key] = evaluation
    return [_checks_of(asset, evaluations) for asset, evaluations in by_asset.items()]


def _checks_of(asset: dg.AssetKey, evaluations: dict[dg.AssetCheckKey, tuple[dg.AssetCheckSpec, Prepare]]
               ) -> dg.AssetChecksDefinition:
    @dg.multi_asset_check(specs=[spec for spec, _ in evaluations.values()], can_subset=True,
                          name=f"{asset.to_python_identifier()}_checks")
    def _store_checks(context: dg.AssetCheckExecutionContext, home: HomeResource) -> Iterator[dg.AssetCheckResult]:
        ready = {key: prepare(context) for key, (_, prepare) in evaluations.items()
                 if key in context.selected_asset_check_keys}
        with home.open_reader() as store:
            for key, evaluate in ready.items():
                where = {"asset_key": key.asset_key, "check_name": key.name}
                try:
                    result = check_result(evaluate(store), **where)
                except Exception as error:  # the check could not be evaluated: it fails, with the reason
                    result = dg.AssetCheckResult(passed=False, **where,
                                                 description=f"the check raised {type(error).__name__}: {error}")
                yield result

    return _store_checks


def _file_not_rejected() -> dg.AssetChecksDefinition:
    """One verdict per partition, which ingesting the partition records (the ingest jobs leave this check
    out). Its body, for a run of the check on one partition, reads the ingest log again; Dagster 1.13 does
    not yet build a job of a partitioned check alone."""
    with warnings.catch_warnings():  # a partitioned check is a preview in Dagster 1.13 (pinned): not the users' concern
        warnings.simplefilter("ignore", dg.PreviewWarning)

        @dg.asset_check(asset=FILE_NOT_REJECTED.asset_key, name=FILE_NOT_REJECTED.name, partitions_def=BATCHES,
                        description="This partition's landing file was read and archived; a rejected one fails "
                                    "here with its reason and what to do next")
        def file_not_rejected(context: dg.AssetCheckExecutionContext, home: HomeResource) -> dg.AssetCheckResult:
            key = context.op_execution_context.partition_key
            with home.open_reader() as store:
                reasons = {r.batch_id: r.reason for r in rejected_after(store.con, 0)}
            metadata = {} if key not in reasons else {"rejected_reason": dg.MetadataValue.text(reasons[key] or "")}
            verdict = file_verdict(key, metadata, rejection_next_step([], by_cli=False))
            return dg.AssetCheckResult(passed=verdict.passed, description=verdict.description,
                                       metadata=verdict.metadata)

    return file_not_rejected


def build_checks(views: Sequence[View]) -> list[dg.AssetChecksDefinition]:
    """Every check of the code location, for these views: the store's, and each ingest partition's own."""
    return [*store_checks(views), _file_not_rejected()]
