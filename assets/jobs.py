"""Jobs: ingest one batch, project (or tick), and rebuild a view."""

import dagster as dg

from assets.ingest import event_batches
from assets.partitions import STORE_POOL, STORE_TAGS
from assets.views import projections
from pipelines.registry import load_views, view_named
from pipelines.run import rebuild
from resources import FoldersResource, ReadStoreResource, SparkResource, inorder_home

ALL_VIEWS = load_views()  # INORDER_VIEWS, read when the code location loads

PROJECTION = dg.AssetSelection.assets(projections)  # the views, and the error and gap logs

# New landing files are ingested and projected in one run (the landing sensor's and `inorder run`'s):
# a rejected file fails that run and its own partition, never the views' checks, and
# `project_after_rejection` (assets/sensors.py) projects what the run archived.
ingest_and_project_job = dg.define_asset_job(
    "ingest_and_project", selection=dg.AssetSelection.assets(event_batches) | PROJECTION, tags=STORE_TAGS,
    description="Ingest new landing batches (a range of event_batches partitions), then project every view")

# Ingesting alone (a backfill of event_batches, or by hand): `project_after_ingest` projects after each success.
ingest_job = dg.define_asset_job(
    "ingest_batch", selection=dg.AssetSelection.assets(event_batches),
    tags=STORE_TAGS, description="Ingest landing batches (partitions of event_batches) without projecting")

project_job = dg.define_asset_job(
    "project_views", selection=PROJECTION, tags=STORE_TAGS,
    description="Project every archived batch not yet committed; with tag inorder/tick=true, tick first")


class RebuildConfig(dg.Config):
    view: str


@dg.op(pool=STORE_POOL)
def rebuild_view_op(context: dg.OpExecutionContext, config: RebuildConfig, spark: SparkResource,
                    read_store: ReadStoreResource, folders: FoldersResource) -> None:
    view = view_named(ALL_VIEWS, config.view)
    stats = rebuild(spark.session, inorder_home(read_store, folders), ALL_VIEWS, view, progress=context.log.info)
    context.log_event(dg.AssetMaterialization(asset_key=view.name, metadata={
        "rebuilt": dg.MetadataValue.bool(True),
        "entries_replayed": dg.MetadataValue.int(stats.entries),
        "handler_calls": dg.MetadataValue.int(stats.handler_calls),
    }))


@dg.job(tags=STORE_TAGS, description="Truncate a view and its state, then replay the archive with the recorded times")
def rebuild_view() -> None:
    rebuild_view_op()
