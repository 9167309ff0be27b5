"""Jobs: ingest one batch, project (or tick), and rebuild a view."""

import dagster as dg

from assets.ingest import event_batches
from assets.partitions import STORE_TAGS
from assets.views import REBUILD_CONFIG, projections
from pipelines.registry import load_views

ALL_VIEWS = load_views()  # INORDER_VIEWS, read when the code location loads

PROJECTION = dg.AssetSelection.assets(projections)  # the views, and the error and gap logs
VIEWS = dg.AssetSelection.assets(*(v.name for v in ALL_VIEWS))

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


# Rebuild the views selected in the run (one or several: `asset_selection`, or "Materialize selected"
# in the job's view in the UI): a materialisation of their assets, so their checks run after it.
rebuild_job = dg.define_asset_job(
    "rebuild_view", selection=VIEWS, tags=STORE_TAGS, config=REBUILD_CONFIG,
    description="Rebuild the selected views from the archive beside the live ones, swap them in at once, "
                "then run their checks")
