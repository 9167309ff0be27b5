"""One asset per view. Selecting several shares one Spark pass (a subsettable multi-asset).

Each view's asset carries the view's fingerprint as its `code_version` (pipelines/store/versions.py), so
the UI marks a view whose code changed since its last materialisation. Materialised with
`rebuild: true` (the `rebuild_view` job), the selected views are rebuilt with no downtime, and their
checks run after, as after any materialisation."""

from typing import Iterator, Optional, Sequence

import dagster as dg
from pydantic import Field

from assets.logs import LOG_METADATA, log_specs
from assets.results import result_metadata
from assets.tags import STORE_POOL, TICK_TAG, run_time
from pipelines.observe.health import last_run_counts, view_lag
from pipelines.serve.publish import Positions, Publication, read_positions
from pipelines.facade import (ProjectionStats, Reingested, operator_action, project_views, publish, rebuild,
                              reingest_batches)
from pipelines.observe.status import (blocked_streams, blocked_streams_markdown, newest_errors, plural, read_status,
                              version_line)
from pipelines.store.database import Home, Store
from pipelines.engine.outcomes import COUNTED, OPERATOR_KINDS
from pipelines.store.versions import fingerprint
from pipelines.view import View
from resources import HomeResource, SparkResource


def _description(view: View) -> str:
    tables = ", ".join(f"{t.name} ({t.kind})" for t in view.tables)
    return (f"View `{view.name}`: tables {tables}; subscribes to {', '.join(view.subscribes)}; "
            f"gap_timeout {view.gap_timeout:g}s, max_pending {view.max_pending}, on_error {view.on_error}.")


def _freshness(view: View) -> dg.FreshnessPolicy | None:
    """Warn when the view was not materialised within `fresh_within`; fail past `stale_after` (default twice that)."""
    if view.fresh_within is None:
        return None
    return dg.FreshnessPolicy.time_window(fail_window=view.stale_after or 2 * view.fresh_within,
                                          warn_window=view.fresh_within)


def view_spec(view: View) -> dg.AssetSpec:
    return dg.AssetSpec(
        view.name, deps=["event_batches"], group_name="views", kinds={"spark", "duckdb"}, skippable=True,
        description=_description(view), code_version=fingerprint(view), owners=list(view.owners), tags=dict(view.tags),
        freshness_policy=_freshness(view),
        metadata={"dagster/column_schema": dg.TableSchema(columns=[
            dg.TableColumn(f"{t.name}.{name}" if len(view.tables) > 1 else name, column.sql_type,
                           description=column.doc or None)
            for t in view.tables for name, column in t.columns.items()])})


def view_metadata(store: Store, home: Home, view: View, counts: dict[str, int], streams_touched: int) -> dict:
    """`run/…`: what this materialisation did; `total/…`: the view so far (the numbers `inorder status`
    prints); `lag/…`: how far it trails (plotted across materialisations)."""
    (status,) = read_status(store.con, [view]).views
    lag = view_lag(store.con, home, view)
    metadata: dict = {f"run/{name}": dg.MetadataValue.int(counts.get(name, 0))
                      for name in COUNTED}
    metadata["run/streams_touched"] = dg.MetadataValue.int(streams_touched)
    metadata["total/selected"] = dg.MetadataValue.int(status.selected)
    metadata.update({f"total/{name}": dg.MetadataValue.int(n) for name, n in status.outcomes.items()})
    metadata.update({
        "total/pending": dg.MetadataValue.int(status.pending),
        "total/gaps_skipped": dg.MetadataValue.int(status.gaps_skipped),
        "total/streams": dg.MetadataValue.int(status.streams),
        "total/blocked_streams": dg.MetadataValue.int(status.blocked_streams),
        "total/parked_streams": dg.MetadataValue.int(status.parked_streams),
        "total/rejects": dg.MetadataValue.int(status.rejects),
        "total/bugs": dg.MetadataValue.int(status.bugs),
        "total/oldest_wait_seconds": dg.MetadataValue.float(status.oldest_wait_seconds or 0.0),
        "lag/entries": dg.MetadataValue.int(lag.entries_behind),
        "conserved": dg.MetadataValue.bool(status.conserved),
        "last_batch": dg.MetadataValue.text(status.last_batch or "-"),
        "newest_errors": dg.MetadataValue.md(newest_errors(store.con, view.name)),
        "blocked_streams": dg.MetadataValue.md(blocked_streams_markdown(blocked_streams(store.con, [view]))),
        **code_metadata(status.version),
    })
    metadata.update({f"rows/{table}": dg.MetadataValue.int(n) for table, n in status.rows.items()})
    if len(status.rows) == 1:  # the UI's row count is one table's: a view of several has one count per table
        metadata["dagster/row_count"] = dg.MetadataValue.int(*status.rows.values())
    if lag.ingestion_seconds is not None:
        metadata["lag/ingestion_seconds"] = dg.MetadataValue.float(round(lag.ingestion_seconds, 3))
    if lag.event_time_seconds is not None:
        metadata["lag/event_time_seconds"] = dg.MetadataValue.float(round(lag.event_time_seconds, 3))
    return metadata


def code_metadata(version) -> dict:
    """Which code built the view's rows: `code/state` says "matches the store", or since which batch
    it is built by older code, or that its tables changed."""
    return {"code/fingerprint": dg.MetadataValue.text(version.code),
            "code/stored_fingerprint": dg.MetadataValue.text(version.stored or "-"),
            "code/matches": dg.MetadataValue.bool(version.matches),
            "code/state": dg.MetadataValue.text(version_line(version))}


def rebuild_metadata(stats: ProjectionStats) -> dict:
    return {"rebuilt": dg.MetadataValue.bool(True), "rebuild/entries_replayed": dg.MetadataValue.int(stats.entries),
            "rebuild/passes": dg.MetadataValue.int(stats.passes)}


def timing_metadata(stats: ProjectionStats) -> dict:
    """Where the projection step's time went (the same for every view the step materialised together)."""
    return {f"run/{name}_seconds": dg.MetadataValue.float(round(seconds, 3)) for name, seconds in (
        ("spark_start", stats.spark_start_seconds), ("pass", stats.spark_seconds),
        ("commit", stats.commit_seconds), ("publish", stats.publish_seconds))}


def publication_metadata(positions: Positions, view: str, error: str | None) -> dict:
    """Where the view's PostgreSQL side stands (nothing when publishing is not configured); `error`: why
    this run's publishing failed, if it did."""
    if not positions.configured:
        return {}
    position = positions.of(view)
    if position is None:  # PostgreSQL cannot be read
        return {"publish_error": dg.MetadataValue.text(error or positions.error or f"{view} was not read")}
    metadata = {
        "committed_entry": dg.MetadataValue.int(position.committed or 0),
        "published_entry": dg.MetadataValue.int(position.published if position.published is not None else -1),
        "published_behind_entries": dg.MetadataValue.int(position.behind),
    }
    if error:
        metadata["publish_error"] = dg.MetadataValue.text(error)
    return metadata



def publish_metadata(publication: Publication) -> dict:
    """What `inorder publish` (the `publish_views` job) sent of the view to PostgreSQL."""
    return {"publish/entry": dg.MetadataValue.int(publication.entry_idx),
            "publish/mode": dg.MetadataValue.text(publication.mode),
            "publish/rows": dg.MetadataValue.int(publication.rows),
            "publish/seconds": dg.MetadataValue.float(round(publication.seconds, 3))}


PUBLISH = "publish"  # to PostgreSQL (`inorder publish`)
REINGEST = "reingest"  # archived batches inspected again, then every view projected (`inorder reingest`)


class ProjectionConfig(dg.Config):
    rebuild: bool = False
    """Rebuild the selected views from the archive (beside the live ones, swapped in at once) instead
    of projecting what is new: after a change to a view's tables or handlers."""
    action: str = Field(default="", description="'retry' or 'skip' the parked streams of the one view selected, "
                                                "'publish' the selected views to PostgreSQL, or 'reingest' "
                                                "`batches` and project every view; '' projects")
    streams: Optional[list[str]] = Field(default=None, description="retry or skip: these parked streams "
                                                                   "(default: every parked stream of the view)")
    full: Optional[str] = Field(default=None, description="publish: replace this view's PostgreSQL tables with "
                                                          "DuckDB's, in one transaction")
    batches: list[str] = Field(default_factory=list, description="reingest: these archived batches")


REFUSED = "refused"  # the metadata key of a refused view's observation
REBUILD_CONFIG = {"ops": {"projections": {"config": {"rebuild": True}}}}
OPERATOR_STREAMS = "operator/streams"  # the metadata key of the streams a retry or skip acted on


def action_config(action: str, **config: object) -> dict:
    """The run config of a retry, skip or publish (`config`: its streams, or the view to publish in full)."""
    return {"ops": {"projections": {"config": {"action": str(action), **config}}}}  # plain text: kept as JSON


def projections_asset(views: Sequence[View]) -> dg.AssetsDefinition:
    """The views' assets (one Spark pass for those selected together), and the error and gap logs."""
    @dg.multi_asset(specs=[view_spec(view) for view in views] + log_specs(views), can_subset=True, pool=STORE_POOL)
    def projections(context: dg.AssetExecutionContext, config: ProjectionConfig, spark: SparkResource,
                    home: HomeResource) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
        """Project every archived batch not yet committed for the selected views, in ingest order.

        A tick materialises only the views whose streams it walked (those with a gap timer due), so a
        tick with nothing due materialises nothing and the views' checks, the Great Expectations suites
        among them, do not run on every tick. The
        `errors` and `gaps` logs are materialised when selected, unless a tick walked nothing.

        A view whose stored tables are not its declared ones is not projected: the step logs why and
        records an observation of it (the other views go on, and their checks run); the step fails when
        it had nothing else to do.

        With `action`, it retries or skips the parked streams of the one view selected, publishes the
        selected views to PostgreSQL, or re-ingests archived batches and projects every view, and
        materialises the views it wrote, so their checks follow. Each materialisation carries the step's
        typed result (assets/results.py)."""
        selected = [v for v in views if dg.AssetKey(v.name) in context.selected_asset_keys]
        if config.action in OPERATOR_KINDS:
            yield from _operator(context, config, spark, home.home(), views, selected)
        elif config.action == PUBLISH:
            yield from _publish(config, home.home(), selected)
        elif config.action in ("", REINGEST):
            yield from _project(context, config, spark, home.home(), views, selected)
        else:
            raise dg.Failure(description=f"unknown action {config.action!r}: give retry, skip, publish, reingest "
                                         "or none")

    return projections


def _project(context: dg.AssetExecutionContext, config: ProjectionConfig, spark: SparkResource, home: Home,
             views: Sequence[View], selected: list[View]) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
    tick = context.run.tags.get(TICK_TAG) == "true" and not config.rebuild
    result = _projected(context, config, spark, home, views, selected, tick)
    stats = result.projection if isinstance(result, Reingested) else result
    context.log.info(f"{plural(stats.entries, 'entry', 'entries')} (batches and ticks of the ingest log) in "
                     f"{plural(stats.passes, 'Spark pass', 'Spark passes')}, {plural(stats.handler_calls, 'handler call')}, "
                     f"Spark {stats.spark_seconds:.1f}s, commit {stats.commit_seconds:.1f}s")
    if stats.publish_error:
        context.log.warning(f"publishing to PostgreSQL failed: {stats.publish_error}")
    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, selected, store.home.settings)
        for view_name, refusal in stats.refused.items():
            context.log.error(refusal)
            yield dg.AssetObservation(asset_key=view_name, metadata={REFUSED: dg.MetadataValue.text(refusal)})
        for view in selected:
            if (tick and not stats.streams_touched.get(view.name)) or view.name in stats.refused:
                continue
            yield dg.MaterializeResult(
                asset_key=view.name,
                metadata={**view_metadata(store, home, view, stats.by_view.get(view.name, {}),
                                          stats.streams_touched.get(view.name, 0)),
                          **timing_metadata(stats), **publication_metadata(positions, view.name, stats.publish_error),
                          **(rebuild_metadata(stats) if view.name in stats.rebuilt else {}), **result_metadata(result)})
        for key, metadata in LOG_METADATA.items():
            if dg.AssetKey(key) in context.selected_asset_keys and not (tick and not stats.streams_touched):
                yield dg.MaterializeResult(asset_key=key, metadata=metadata(store))
    if stats.refused and all(v.name in stats.refused for v in selected):
        raise dg.Failure(description="; ".join(stats.refused.values()),
                         metadata={REFUSED: dg.MetadataValue.json(stats.refused)})


def _projected(context: dg.AssetExecutionContext, config: ProjectionConfig, spark: SparkResource, home: Home,
               views: Sequence[View], selected: list[View], tick: bool) -> ProjectionStats | Reingested:
    """The selected views rebuilt, or every view projected after a re-ingest, or the selected views projected."""
    if config.rebuild:
        stats = ProjectionStats()
        for view in selected:
            stats.merge(rebuild(spark.session, home, views, view, progress=context.log.info))
        return stats
    if config.action == REINGEST:
        return reingest_batches(spark.session, home, views, config.batches, run_time(context), context.log.info)
    return project_views(spark.session, home, views, selected, tick=tick, now=run_time(context),
                         progress=context.log.info)


def _operator(context: dg.AssetExecutionContext, config: ProjectionConfig, spark: SparkResource, home: Home,
              views: Sequence[View], selected: list[View]) -> Iterator[dg.MaterializeResult]:
    """`inorder retry` or `skip`: record the action on the view's parked streams and project that view;
    its materialisation (when any stream was parked) lists the streams acted on."""
    if len(selected) != 1:
        raise dg.Failure(description=f"a {config.action} acts on the parked streams of one view: select one view, "
                                     f"not {len(selected)}")
    (view,) = selected
    streams = operator_action(spark.session, home, views, view, config.streams, config.action,
                              progress=context.log.info)
    if not streams:
        return
    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, [view], store.home.settings)
        yield dg.MaterializeResult(asset_key=view.name, metadata={
            **view_metadata(store, home, view, last_run_counts(store.con, view.name), len(streams)),
            **publication_metadata(positions, view.name, None), OPERATOR_STREAMS: dg.MetadataValue.json(streams)})


def _publish(config: ProjectionConfig, home: Home, selected: list[View]) -> Iterator[dg.MaterializeResult]:
    """`inorder publish`: bring the selected views' PostgreSQL side to DuckDB's newest commit (`full`: replace
    that view's tables first); the views published are materialised, in the order they were published."""
    by_name = {view.name: view for view in selected}
    if config.full is not None and config.full not in by_name:
        raise dg.Failure(description=f"publish --full {config.full}: select that view")
    done = publish(home, selected, by_name[config.full] if config.full else None)
    published = [by_name[p.view] for p in done]
    with Store.open_read_only(home) as store:
        positions = read_positions(store.con, published, store.home.settings)
        for publication, view in zip(done, published):
            yield dg.MaterializeResult(asset_key=view.name, metadata={
                **view_metadata(store, home, view, {}, 0), **publication_metadata(positions, view.name, None),
                **publish_metadata(publication), **result_metadata(publication)})
