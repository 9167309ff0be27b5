"""The engine's entry points: run (ingest + project), ingest one batch, project, rebuild, retry/skip."""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from pyspark.sql import SparkSession

from pipelines.engine.commit import commit_pass, pass_output
from pipelines.faults import crash_point
from pipelines.engine.ingest import (IngestResult, LandingFile, check_logical_time, files_for_batch, ingest_landing,
                              landing_name, new_landing_files, record_entry, reingest, tick_due)
from pipelines.engine.sources import Source, load_source
from pipelines.engine.inputs import pass_folder, views_with_due_buffers
from pipelines.engine.outcomes import EntryKind
from pipelines.engine.output import PassResult
from pipelines.engine.planning import plan_passes, views_waiting
from pipelines.engine.spark_pass import run_pass
from pipelines.engine.stats import ProjectionStats
from pipelines.registry import RESERVED_VIEW_NAMES, ViewDeclarationError
from pipelines.serve.publish import Publication, Publisher, PublishError, Publishing, ServeTarget
from pipelines.spark.session import stage_progress, starting_line
from pipelines.store.layout import LIVE, Layout
from pipelines.engine.order import HandlerBugFailure, NotParked
from pipelines.store.rebuild import prepare_shadow, swap
from pipelines.store.database import Home, Store, take_lock, us_from_utc
from pipelines.store.versions import read_versions, rename_view as rename_stored_view
from pipelines.view import View

Progress = Callable[[str], None]
# A session, or a function that makes one: Spark (and its JVM) starts only when there is work for it.
SparkSource = SparkSession | Callable[[], SparkSession]


def _quiet(message: str) -> None:
    pass


@dataclass(frozen=True)
class RunPlan:
    """What a run does, decided in one place for `inorder run`, the engine's `run`, and Dagster's
    landing sensor and tick schedule."""

    landing: tuple[LandingFile, ...]  # new landing files, in the order they are ingested
    resumed: bool  # archived batches that views projected before have not projected (a run was interrupted)
    tick: bool  # nothing new: record a tick at the run's logical time, so gap timers fire
    projected: tuple[str, ...]  # the views the run projects: every one, but a tick leaves out the refused
    catching_up: tuple[str, ...] = ()  # views added to the store, that have never projected, to project the archive
    refused: dict[str, str] = field(default_factory=dict)  # view -> why runs do not project it (its tables changed)

    @property
    def batches(self) -> tuple[str, ...]:
        return tuple(f.batch_id for f in self.landing)


@dataclass
class RunReport:
    """What a run did: its plan, then the results of the steps of the Dagster run it becomes."""

    plan: RunPlan
    ingested: list[IngestResult] = field(default_factory=list)
    projection: ProjectionStats = field(default_factory=ProjectionStats)
    ingest_seconds: float = 0.0
    seconds: float = 0.0


@dataclass
class Reingested:
    """What `inorder reingest` did: the new entries, then the projection of every view."""

    entries: list[IngestResult]
    projection: ProjectionStats


def plan_run(store: Store, home: Home, views: Sequence[View], now: datetime | None = None,
             min_idle_seconds: float = 0.0) -> RunPlan:
    """Ingest what is new; with nothing new, finish what an interrupted run archived; else tick, when
    logical time moved and either a gap timer is due or nothing was recorded for `min_idle_seconds`
    (the tick schedule's interval; `inorder run` ticks whenever time moved). A tick projects every view
    but the refused ones (each waits for its rebuild, and a tick says nothing new of it); it walks only
    the buffers whose timer is due, and resumes nothing."""
    landing = tuple(new_landing_files(store, home, home_source(home)))
    versions = store.versions or read_versions(store.con, views)
    active = [v for v in views if not versions[v.name].refused]  # a refused view waits for its rebuild
    fresh = _never_projected(store, active)
    waiting = views_waiting(store, active)  # the passes are planned once, by `project`
    resumed = any(versions[v.name].rebuild_due for v in views) or bool(waiting - fresh)
    catching_up = tuple(sorted(waiting & fresh))
    t_us = _logical_now(store, now)
    last = store.last_logical_time_us()
    tick = not landing and not resumed and not catching_up and tick_due(store, t_us) and (
        bool(views_with_due_buffers(store.con, active, t_us)) or last is None or t_us - last >= min_idle_seconds * 1e6)
    projected = tuple(v.name for v in (active if tick else views))
    refused = {name: version.refusal() for name, version in versions.items() if version.refused}
    return RunPlan(landing, resumed, tick, projected, catching_up, refused)


def plan(home: Home, views: Sequence[View], now: datetime | None = None) -> RunPlan:
    """`plan_run` on the store's writer, which makes the store on the first run (`inorder run`'s plan)."""
    with Store.open(home, views) as store:
        return plan_run(store, home, views, now)


def _never_projected(store: Store, views: Sequence[View]) -> set[str]:
    """The views with no ledger row: added to the store since its last run (`inorder run --add-views`)."""
    projected = {r[0] for r in store.con.execute("SELECT DISTINCT view FROM inorder.batches").fetchall()}
    return {v.name for v in views} - projected


def home_source(home: Home) -> Source:
    """The home's source.json: which mapping reads which landing file (pipelines/engine/sources.py)."""
    return load_source(home.root / "source.json")


def now_us(now: datetime | None) -> int:
    return us_from_utc(now or datetime.now(timezone.utc))


def project(spark: SparkSource, store: Store, home: Home, views: Sequence[View], selected: Sequence[View],
            source: Source, progress: Progress = _quiet, publish: bool = True, layout: Layout = LIVE,
            let_writers_in: bool = False) -> ProjectionStats:
    """Project every archived entry not yet committed for the `selected` views, pass by pass; with
    `publish` (and INORDER_SERVE_POSTGRES set), publish each commit to PostgreSQL, after catching up
    what an earlier run committed but did not publish.

    A live view whose stored tables are not its declared ones is refused (`stats.refused`), and one
    that asks to be rebuilt when its code changed is left to `rebuild_due` (`stats.rebuild_due`).
    `layout` and `let_writers_in`: see `rebuild`."""
    subscribed = {t for v in views for t in v.subscribes}
    stats = ProjectionStats()
    if layout.live:
        selected = _projectable(store, selected, stats, progress)
    plans = plan_passes(store, selected, layout=layout)
    crash_point("project.planned")
    stats.passes = len(plans)
    publishing = Publishing(progress, ServeTarget.of(home.settings)) if publish else None
    try:
        if publishing:
            publishing.publish(store.con, selected)
        _project_passes(spark, store, home, selected, plans, source.first_seq, subscribed, stats, publishing,
                        progress, layout, let_writers_in)
    finally:
        if publishing:
            publishing.close()
            stats.publications, stats.publish_seconds = publishing.publications, publishing.seconds
            stats.publish_error = publishing.error
    return stats


def _projectable(store: Store, selected: Sequence[View], stats: ProjectionStats, progress: Progress) -> list[View]:
    """The selected views the store's versions let project now (see pipelines/store/versions.py)."""
    versions = store.versions or read_versions(store.con, selected)
    projectable = []
    for view in selected:
        version = versions.get(view.name) or read_versions(store.con, [view])[view.name]
        if version.rebuild_due:
            stats.rebuild_due.append(view.name)
            progress(f"view {view.name}: {version.describe()}; rebuilding it (on_change='rebuild')")
        elif version.refused:
            stats.refused[view.name] = version.refusal()
        else:
            projectable.append(view)
    return projectable


def _project_passes(spark: SparkSource, store: Store, home: Home, selected: Sequence[View], plans: list,
                    first_seq: int, subscribed: set[str], stats: ProjectionStats, publishing: Publishing | None,
                    progress: Progress, layout: Layout, let_writers_in: bool) -> None:
    # started by the first pass with something to walk (run_pass calls it with the store let go: a JVM
    # start takes seconds); a tick that walks nothing commits its ledger rows without Spark
    @functools.cache
    def session() -> SparkSession:
        started = time.perf_counter()
        line = starting_line(home) if callable(spark) else None
        if line:
            progress(line)
        got = spark(home=home, views=selected) if callable(spark) else spark
        stats.spark_start_seconds += time.perf_counter() - started
        return got

    for i, plan in enumerate(plans, start=1):
        started, label, starts_before = time.perf_counter(), f"pass {i}/{len(plans)}", stats.spark_start_seconds
        if plan.over_bounds:
            progress(f"{label}: batch {plan.entries[0]['batch_id']} alone brings about {plan.pairs:,} (view, stream) "
                     "pairs or more records than a pass takes (INORDER_PASS_STREAMS, INORDER_PASS_RECORDS); a batch "
                     "is never split, so this pass takes it whole")
        with stage_progress(label, progress):
            out = run_pass(session, store, home, list(selected), plan, first_seq, layout, let_writers_in)
        spark_done = time.perf_counter()
        refuse_failed_pass(out)
        crash_point("project.ordered")
        progress(f"{label}: committing")
        with pass_output(store, out):
            commit_pass(store, list(selected), plan, subscribed, layout)
            crash_point("project.committed")
            committed = time.perf_counter()
            if publishing:  # while the pass output is at hand: only what it changed travels
                publishing.publish(store.con, [v for v in selected if v.name in plan.by_view],
                                   pass_start={v: entries[0].entry_idx for v, entries in plan.by_view.items()})
        stats.add(out.summary)
        shutil.rmtree(pass_folder(home, layout), ignore_errors=True)
        stats.spark_seconds += spark_done - started - (stats.spark_start_seconds - starts_before)  # the pass alone
        stats.commit_seconds += committed - spark_done
        stats.entries += len(plan.entries)
        progress(f"{label}: {len(plan.entries)} entries for {', '.join(sorted(plan.by_view))} "
                 f"in {time.perf_counter() - started:.1f}s")


def refuse_failed_pass(out: PassResult) -> None:
    bugs = out.fatal()
    if bugs:
        raise HandlerBugFailure(bugs)


def run(spark: SparkSource, home: Home, views: Sequence[View], now: datetime | None = None,
        progress: Progress = _quiet, selected: Sequence[View] | None = None) -> RunReport:
    """`inorder run` without Dagster: the plan, then the steps of the Dagster run it becomes
    (assets/targets.py), in their order, each the function its step calls: `ingest_batches` (the
    `event_batches` asset), then `project_views` (the views' asset). `selected`: those views alone, as
    when their assets are materialised by themselves."""
    started = time.perf_counter()
    report = RunReport(plan(home, views, now))
    report.ingested = ingest_batches(home, views, report.plan.batches, now, progress)
    report.ingest_seconds = time.perf_counter() - started
    projected = selected or [v for v in views if v.name in report.plan.projected]
    report.projection = project_views(spark, home, views, projected, tick=report.plan.tick, now=now,
                                      progress=progress)
    report.seconds = time.perf_counter() - started
    return report


def ingest_batches(home: Home, views: Sequence[View], batch_ids: Sequence[str], now: datetime | None = None,
                   progress: Progress = _quiet) -> list[IngestResult]:
    """The ingest step: the landing file(s) of each batch id (a file's stem, a clashing file's whole name, or
    a changed file's `name@hash`), in order, at logical time `now`, on one open of the store (the files
    inspected in parallel when they are large: pipelines/engine/ingest.py `ingest_landing`).

    Idempotent: a batch already registered is returned as it was. Another file that claims the
    same batch id is set aside as a rejected batch on the way, never ignored. When a changed file's
    new content turns out to be recorded already (touched, or changed back), its newest entry is returned."""
    if not batch_ids:
        return []
    with Store.open(home, views) as store:
        source = home_source(home)
        paths = {batch_id: files_for_batch(home, source, batch_id) for batch_id in batch_ids}
        known = {r[0] for r in store.con.execute("SELECT batch_id FROM inorder.ingest_log WHERE kind = 'batch' "
                                                 "AND list_contains(?, batch_id)", [list(batch_ids)]).fetchall()}
        for batch_id in batch_ids:
            if batch_id not in known and not paths[batch_id]:
                raise FileNotFoundError(f"no landing file for batch {batch_id!r} in {home.landing}")
        landing = [path for batch_id in batch_ids for path in paths[batch_id]]
        if new_landing_files(store, home, source, only=landing):
            ingest_landing(store, home, source, _logical_now(store, now), progress, only=landing)
        return [_ingested(store, home, batch_id, paths[batch_id], batch_id in known) for batch_id in batch_ids]


def _ingested(store: Store, home: Home, batch_id: str, paths: list[Path], already: bool) -> IngestResult:
    """The newest entry of the batch (a tick's id is never a batch's)."""
    entry_idx, batch_id, status, records, malformed, size, reason, types = store.con.execute(
        "SELECT entry_idx, batch_id, status, records, malformed, bytes, reason, stream_types "
        "FROM inorder.ingest_log WHERE kind = 'batch' AND reingest_of IS NULL "
        "AND (batch_id = ? OR list_contains(?, file_name)) ORDER BY batch_id = ? DESC, entry_idx DESC LIMIT 1",
        [batch_id, [str(landing_name(home, p)) for p in paths], batch_id]).fetchone()
    return IngestResult(entry_idx, batch_id, status, records, malformed, bytes=size or 0, reason=reason,
                        already_ingested=already, stream_types=dict(types or {}))


def reingest_batches(spark: SparkSource, home: Home, views: Sequence[View], batch_ids: Sequence[str],
                     now: datetime | None = None, progress: Progress = _quiet) -> Reingested:
    """`inorder reingest`: inspect the batches' undelivered records again with today's `source.json`, as
    new entries at logical time `now` (pipelines/engine/ingest.py `reingest`), then project every view."""
    source = home_source(home)
    with Store.open(home, views) as store:
        results = reingest(store, home, source, {t for v in views for t in v.subscribes}, list(batch_ids),
                           _logical_now(store, now), progress)
        stats = project(spark, store, home, views, views, source, progress)
    rebuild_due(spark, home, views, stats, progress)
    return Reingested(results, stats)


def project_views(spark: SparkSource, home: Home, views: Sequence[View], selected: Sequence[View],
                  tick: bool = False, now: datetime | None = None, progress: Progress = _quiet) -> ProjectionStats:
    """Project the selected views; with `tick`, first record a tick so gap timers can fire."""
    with Store.open(home, views) as store:
        t_us = _logical_now(store, now) if tick else None
        if tick and tick_due(store, t_us):
            record_entry(store, EntryKind.TICK, t_us)
        stats = project(spark, store, home, views, selected, home_source(home), progress)
    rebuild_due(spark, home, views, stats, progress)
    return stats


def _logical_now(store: Store, now: datetime | None) -> int:
    """`now` as logical time; the wall clock by default, never before the last recorded time."""
    t_us = now_us(now)
    if now is None:
        t_us = max(t_us, store.last_logical_time_us() or t_us)
    check_logical_time(store, t_us)
    return t_us


def _rebuild_lock(home: Home, view_name: str, busy: str) -> int:
    """The lock a rebuild of the view holds from its start to its swap (StoreBusy(busy) while it is taken)."""
    return take_lock(home.root / f"rebuild-{view_name}.lock", 0, busy)


def rename_view(home: Home, old: str, new: str) -> dict[str, int]:
    """`inorder rename-view OLD NEW` (pipelines/store/versions.py: rename_view): engine table -> the view's rows,
    now under its new name. Refused while a rebuild of the view runs, whose swap would bring the old name back."""
    if new in RESERVED_VIEW_NAMES:
        raise ViewDeclarationError(f"a view cannot be named {new!r}, the name of an engine asset "
                                   f"({', '.join(sorted(RESERVED_VIEW_NAMES))})")
    lock = _rebuild_lock(home, old, f"a rebuild of view {old} is running: rename the view when it ends")
    try:
        with Store.open(home, ()) as store:  # no views: none is recorded or checked on the way
            return rename_stored_view(store.con, old, new)
    finally:
        os.close(lock)


def rebuild(spark: SparkSource, home: Home, views: Sequence[View], view: View,
            progress: Progress = _quiet) -> ProjectionStats:
    """Build `view` anew from the archive beside the live one, then swap it in at once: readers see the
    old view, whole, until the swap's commit, and the new one, whole, after it (pipelines/store/rebuild.py).

    1. Fresh shadow tables and state for the view, in a schema of its own.
    2. The replay: every archived entry, with its recorded logical time, into the shadow. The writer
       lock is let go during each pass's Spark work, so runs go on ingesting and projecting meanwhile.
    3. The catch-up, holding the writer lock to the end: what those runs archived meanwhile, so the
       swapped-in view is at least as current as the one it replaces.
    4. The swap, in one transaction; then PostgreSQL (when it serves reads) gets the view in full.
    Killed at any point before the swap's commit, it leaves the live view as it was; run again, it
    starts afresh."""
    source = home_source(home)
    shadow = Layout.shadow(view.name)
    home.ensure()
    lock = _rebuild_lock(home, view.name, f"a rebuild of view {view.name} is already running")
    publishing = Publishing(progress, ServeTarget.of(home.settings))
    try:
        with Store.open(home, views) as store:
            prepare_shadow(store, view, shadow)
            crash_point("rebuild.prepared")
            progress(f"rebuild {view.name}: replaying the archive beside the live view")
            stats = project(spark, store, home, views, [view], source, progress, publish=False, layout=shadow,
                            let_writers_in=True)
            crash_point("rebuild.replayed")
            stats.merge(project(spark, store, home, views, [view], source, progress, publish=False, layout=shadow))
            crash_point("rebuild.caught_up")
            swap(store, view, shadow)
            progress(f"rebuild {view.name}: swapped in ({stats.entries} entries replayed)")
            crash_point("rebuild.swapped")
            publishing.publish(store.con, [view], full=True)
    finally:
        publishing.close()
        os.close(lock)
    stats.publications, stats.publish_seconds, stats.publish_error = (
        publishing.publications, publishing.seconds, publishing.error)
    stats.rebuilt.append(view.name)
    return stats


def rebuild_due(spark: SparkSource, home: Home, views: Sequence[View], stats: ProjectionStats,
                progress: Progress = _quiet) -> None:
    """Rebuild the views a projection left to it (on_change="rebuild"), adding to its `stats`."""
    for name in stats.rebuild_due:
        stats.merge(rebuild(spark, home, views, next(v for v in views if v.name == name), progress))


def publish(home: Home, views: Sequence[View], full: View | None = None) -> list[Publication]:
    """`inorder publish`: bring every view's PostgreSQL side to DuckDB's newest commit (what a crash
    after a commit, or PostgreSQL being down, left behind); with `full`, replace that view's
    PostgreSQL tables with DuckDB's in one transaction (and recreate them if their shape changed)."""
    target = ServeTarget.of(home.settings)
    if target is None:
        raise PublishError("INORDER_SERVE_POSTGRES is not set: there is no PostgreSQL to publish to")
    with Store.open(home, views) as store, Publisher(target) as publisher:
        done = publisher.publish(store.con, [full], full=True) if full else []
        done += publisher.publish(store.con, views)
    if publisher.refused:  # the other views were published
        raise PublishError(next(iter(publisher.refused.values())))
    return done


def operator_action(spark: SparkSource, home: Home, views: Sequence[View], view: View, streams: Sequence[str] | None,
                    action: str, progress: Progress = _quiet) -> list[str]:
    """Record a retry or skip of parked streams of `view` as entries (so rebuild replays them), then
    project that view alone. `streams` None means every parked stream of the view (after a fix is
    deployed). Returns the streams acted on."""
    source = home_source(home)
    with Store.open(home, views) as store:
        parked = [r[0] for r in store.con.execute(
            "SELECT stream_id FROM inorder.watermarks WHERE view = ? AND parked ORDER BY stream_id",
            [view.name]).fetchall()]
        if streams is None:
            streams = parked
        for stream_id in streams:
            if stream_id not in parked:
                raise NotParked(f"stream {stream_id!r} of view {view.name} is not parked")
        t_us = store.last_logical_time_us()
        for stream_id in streams:
            record_entry(store, EntryKind(action), t_us, view.name, stream_id)
        if streams:
            project(spark, store, home, views, [view], source, progress)
    return list(streams)
