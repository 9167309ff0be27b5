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

# Ingesting is a run of its own: a rejected file fails only its run (and its partition), never the
# views' checks; `project_after_ingest` (assets/sensors.py) projects after each successful one.
ingest_job = dg.define_asset_job(
    "ingest_batch", selection=dg.AssetSelection.assets(event_batches),
    tags=STORE_TAGS, description="Ingest one landing batch (a partition of event_batches)")

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
