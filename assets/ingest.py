"""`event_batches`: materialising a partition inspects and archives that batch file (idempotent).

One run may materialise a range of partitions (the landing sensor and `inorder run` ask for one run
per set of new files; so does a backfill): each batch still gets its own materialisation and metadata."""

import warnings
from typing import Iterator, Sequence

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq
# not exported by dagster 1.13: a check evaluation's pointer to the materialisation it judges
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData

from assets.partitions import BATCHES
from assets.results import result_metadata
from assets.tags import CLI_HOME_TAG, STORE_POOL, run_time
from pipelines.faults import crash_point
from pipelines.engine.ingest import IngestResult, archive_path
from pipelines.facade import ingest_batches
from pipelines.engine.routing import unrouted
from pipelines.observe import checks
from pipelines.store.database import Home
from pipelines.view import View
from resources import HomeResource

FILE_NOT_REJECTED = dg.AssetCheckKey(dg.AssetKey("event_batches"), checks.FILE_CHECK)  # one verdict per partition


def batch_metadata(home: Home, views: Sequence[View], result: IngestResult) -> dict:
    metadata = {
        "status": dg.MetadataValue.text(result.status),
        "entry_idx": dg.MetadataValue.int(result.entry_idx),
        "records": dg.MetadataValue.int(result.records),
        "malformed": dg.MetadataValue.int(result.malformed),
        "bytes": dg.MetadataValue.int(result.bytes),
        "already_ingested": dg.MetadataValue.bool(result.already_ingested),
    }
    if result.status == "rejected":
        metadata["rejected_reason"] = dg.MetadataValue.text(result.reason or "")
        return metadata
    routed_nowhere = unrouted(result.stream_types, views)
    metadata["normalised"] = dg.MetadataValue.int(result.records - result.malformed)
    metadata["stream_types"] = dg.MetadataValue.json(result.stream_types)
    metadata["unrouted"] = dg.MetadataValue.int(sum(routed_nowhere.values()))
    metadata["unrouted_by_stream_type"] = dg.MetadataValue.json(routed_nowhere)
    messages = pq.read_table(archive_path(home, result.entry_idx), columns=["stream_id", "seq"])
    metadata["streams"] = dg.MetadataValue.int(len(pc.unique(messages["stream_id"])))
    if messages.num_rows:
        low, high = pc.min_max(messages["seq"]).values()
        metadata["seq_range"] = dg.MetadataValue.text(f"{low.as_py()}..{high.as_py()}")
    return metadata


def rejection_next_step(archived: list[str], by_cli: bool) -> str:
    """What a user does about a rejected file: the end of the Failure's description. The file's name stays
    in the ingest log, so a fixed file is read only under a new name; the fix is the file's, or source.json's
    when no source mapping took the file."""
    step = ("Next: fix what the reason says (the file, or source.json) and drop the file into the landing folder "
            "again under a new name (its name is in the ingest log now, and a name is never read twice)")
    if not archived:
        return step + "."
    projects = "this `inorder run` projects them" if by_cli else "the `project_after_rejection` sensor projects them"
    return f"{step}; the batches this run archived ({', '.join(archived)}) are not lost: {projects}."


def file_verdict(key: str, metadata: dict, next_step: str,
                 target: AssetCheckEvaluationTargetMaterializationData | None = None) -> dg.AssetCheckEvaluation:
    """`file_not_rejected` on the batch's own partition, where the UI shows a partition's reason: Dagster 1.13's
    partition panel shows only materialisations, and a rejected batch has none (docs/DAGSTER.md). An archived
    batch's verdict targets the partition's materialisation (`target`): the UI counts a verdict that targets
    an older one as missing."""
    reason = metadata.get("rejected_reason")
    if reason is None:
        return dg.AssetCheckEvaluation(asset_key=FILE_NOT_REJECTED.asset_key, check_name=FILE_NOT_REJECTED.name,
                                       passed=True, partition=key, metadata=metadata,
                                       target_materialization_data=target)
    return dg.AssetCheckEvaluation(
        asset_key=FILE_NOT_REJECTED.asset_key, check_name=FILE_NOT_REJECTED.name, passed=False, partition=key,
        description=f"batch {key} was rejected: {reason.value.rstrip('.')}. {next_step}",
        metadata={**metadata, "next_step": dg.MetadataValue.text(next_step)}, target_materialization_data=target)


def event_batches_asset(views: Sequence[View]) -> dg.AssetsDefinition:
    """`event_batches`, routing the batches' records to these views."""
    with warnings.catch_warnings():  # backfill_policy is beta in Dagster 1.13 (pinned): not the users' concern
        warnings.simplefilter("ignore", dg.BetaWarning)

        @dg.asset(partitions_def=BATCHES, pool=STORE_POOL, group_name="ingest", kinds={"duckdb", "parquet"},
                  backfill_policy=dg.BackfillPolicy.single_run(), dagster_type=dg.Nothing,
                  description="A landing batch, normalised and archived as Parquet (entry of the ingest log). "
                              "A file that cannot be read fails its partition, with the reason.")
        def event_batches(context: dg.AssetExecutionContext, home: HomeResource) -> Iterator:
            yield from _ingest(context, home.home(), views)

    return event_batches


def _ingest(context: dg.AssetExecutionContext, home: Home, views: Sequence[View]) -> Iterator:
    """Each batch archived or rejected, then materialised (archived) and given its verdict. A generator, so
    that the materialisations are stored before the verdicts that target them."""
    archived, rejected, results = {}, {}, {}
    keys = context.partition_keys  # in the order the partitions were added: file-name order per set
    for key, result in zip(keys, ingest_batches(home, views, keys, run_time(context), context.log.info)):
        (rejected if result.status == "rejected" else archived)[key] = batch_metadata(home, views, result)
        results[key] = result_metadata(result)
    crash_point("dagster.ingested")  # every batch of the run archived or rejected, none projected yet
    next_step = rejection_next_step(list(archived), by_cli=CLI_HOME_TAG in context.run.tags)
    if not rejected:
        for key, metadata in archived.items():
            context.add_asset_metadata({**metadata, **results[key]}, partition_key=key)
        yield dg.Output(None)  # one materialisation per partition of the run
        yield from _verdicts(context, keys, archived, next_step)
        return
    yield from _fail_rejected(context, archived, rejected, results, next_step)


def _verdicts(context: dg.AssetExecutionContext, keys: Sequence[str], metadata: dict,
              next_step: str) -> Iterator[dg.AssetCheckEvaluation]:
    """Each partition's `file_not_rejected`, an archived one's targeting the materialisation this run stored."""
    materialised = context.instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=context.asset_key, asset_partitions=list(keys)), limit=len(keys)).records
    targets = {}
    for record in materialised:  # newest first
        if record.run_id == context.run.run_id:
            targets.setdefault(record.partition_key, AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp))
    for key in keys:
        yield file_verdict(key, metadata[key], next_step, targets.get(key))


def _fail_rejected(context: dg.AssetExecutionContext, archived: dict, rejected: dict, results: dict,
                   next_step: str) -> Iterator:
    """A rejected file fails its partition, never shows as a green batch: the step fails, and only the
    batches it archived are materialised (the failure marks the others of the run failed); the
    partition keeps its reason in its `file_not_rejected` verdict and as an observation (the asset's events)."""
    for key, metadata in archived.items():
        yield dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata={**metadata, **results[key]})
    for key, metadata in rejected.items():
        yield dg.AssetObservation(asset_key=context.asset_key, partition=key, metadata={**metadata, **results[key]})
    yield from _verdicts(context, context.partition_keys, {**archived, **rejected}, next_step)
    reasons = "; ".join(f"batch {key} was rejected: {m['rejected_reason'].value}" for key, m in rejected.items())
    raise dg.Failure(description=f"{reasons.rstrip('.')}. {next_step}", allow_retries=False,
                     metadata=next(iter(rejected.values())) if len(rejected) == 1 else {})
