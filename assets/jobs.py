"""Jobs: ingest batches, project (or tick), rebuild views, retry or skip parked streams, publish to
PostgreSQL, re-ingest batches, and remove a view. Every job writes the store, so every one carries STORE_TAGS."""

from typing import NamedTuple, Sequence

import dagster as dg
# not exported by dagster 1.13: what define_asset_job returns
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from pydantic import Field

from assets.ingest import FILE_NOT_REJECTED
from assets.results import result_metadata
from assets.tags import STORE_POOL, STORE_TAGS
from assets.targets import INGEST_AND_PROJECT, PROJECT
from assets.views import PUBLISH, REBUILD_CONFIG, REINGEST, action_config
from pipelines.engine.outcomes import EntryKind
from pipelines.store.versions import remove_view
from pipelines.view import View
from resources import HomeResource

REBUILD, RETRY, SKIP, PUBLISH_JOB = "rebuild_view", "retry_streams", "skip_streams", "publish_views"
REINGEST_JOB, REMOVE_VIEW = "reingest_batches", "remove_view"
OPERATOR_JOBS = (RETRY, SKIP, PUBLISH_JOB, REINGEST_JOB, REMOVE_VIEW)  # an operator's command, next to runs


class Jobs(NamedTuple):
    ingest_and_project: UnresolvedAssetJobDefinition
    ingest: UnresolvedAssetJobDefinition
    project: UnresolvedAssetJobDefinition
    rebuild: UnresolvedAssetJobDefinition
    retry: UnresolvedAssetJobDefinition
    skip: UnresolvedAssetJobDefinition
    publish: UnresolvedAssetJobDefinition
    reingest: UnresolvedAssetJobDefinition
    remove_view: dg.JobDefinition


def build_jobs(views: Sequence[View], event_batches: dg.AssetsDefinition, projections: dg.AssetsDefinition) -> Jobs:
    projection = dg.AssetSelection.assets(projections)  # the views, and the error and gap logs
    selected_views = dg.AssetSelection.assets(*(v.name for v in views))
    # the ingest step records each partition's file_not_rejected itself
    ingest = dg.AssetSelection.assets(event_batches) - dg.AssetSelection.checks(FILE_NOT_REJECTED)

    def on_views(name: str, config: dict, description: str) -> UnresolvedAssetJobDefinition:
        """A job that materialises the views selected in its run (one or several: `asset_selection`, or
        "Materialize selected" in the job's view in the UI), so their checks run after it."""
        return dg.define_asset_job(name, selection=selected_views, tags=STORE_TAGS, config=config,
                                   description=description)

    return Jobs(
        # New landing files are ingested and projected in one run (the landing sensor's and `inorder run`'s):
        # a rejected file fails that run and its own partition, never the views' checks, and
        # `project_after_rejection` (assets/sensors.py) projects what the run archived.
        dg.define_asset_job(
            INGEST_AND_PROJECT, selection=ingest | projection, tags=STORE_TAGS,
            description="Ingest new landing batches (a range of event_batches partitions), then project every view"),
        # Ingesting alone (a backfill of event_batches, or by hand): `project_after_ingest` projects after each success.
        dg.define_asset_job(
            "ingest_batch", selection=ingest, tags=STORE_TAGS,
            description="Ingest landing batches (partitions of event_batches) without projecting"),
        dg.define_asset_job(
            PROJECT, selection=projection, tags=STORE_TAGS,
            description="Project every archived batch not yet committed; with tag inorder/tick=true, tick first"),
        on_views(REBUILD, REBUILD_CONFIG, "Rebuild the selected views from the archive beside the live ones, swap "
                                          "them in at once, then run their checks"),
        on_views(RETRY, action_config(EntryKind.RETRY), "`inorder retry`: retry the parked streams of the one view selected "
                                                "(config `streams`; default every one), then run its checks"),
        on_views(SKIP, action_config(EntryKind.SKIP), "`inorder skip`: skip the parked message of the parked streams of the "
                                              "one view selected (config `streams`; default every one), then run "
                                              "its checks"),
        on_views(PUBLISH_JOB, action_config(PUBLISH), "`inorder publish`: bring the selected views' PostgreSQL "
                                                      "side to DuckDB's newest commit (config `full`: replace that "
                                                      "view's tables), then run their checks"),
        on_views(REINGEST_JOB, action_config(REINGEST), "`inorder reingest`: inspect archived batches (config "
                                                         "`batches`) again with today's source.json, then project "
                                                         "every view and run their checks"),
        remove_view_job,
    )


class RemoveViewConfig(dg.Config):
    view: str = Field(description="a view the store holds")


@dg.op(pool=STORE_POOL)
def drop_view(context: dg.OpExecutionContext, config: RemoveViewConfig, home: HomeResource) -> None:
    """Take the view out of the store: its tables and engine rows, in one transaction (the archive stays)."""
    with home.open_writer(()) as store:  # no views: none is recorded or checked on the way
        context.add_output_metadata(result_metadata(remove_view(store.con, config.view, confirmed=True)))


@dg.job(name=REMOVE_VIEW, tags=STORE_TAGS, description=drop_view.__doc__)
def remove_view_job() -> None:
    """`inorder remove-view VIEW --yes`: a job of its own, for the view may be one no view set loads any more."""
    drop_view()
