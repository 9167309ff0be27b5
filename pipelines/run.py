"""The engine's entry points: run (ingest + project), ingest one batch, project, rebuild, retry/skip."""

from __future__ import annotations

import functools
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from pipelines.commit import commit_pass, pass_output
from pipelines.faults import crash_point
from pipelines.ingest import (IngestResult, LandingFile, check_logical_time, files_for_batch, ingest_landing,
                              new_landing_files, record_entry, tick_due)
from pipelines.inspect import SourceMapping
from pipelines.project import PassResult, pass_folder, plan_passes, run_pass, views_with_due_buffers
from pipelines.publish import Publication, Publisher, PublishError, Publishing, ServeTarget
from pipelines.spark import stage_progress
from pipelines.store import Home, Store, us_from_utc
from pipelines.view import View

Progress = Callable[[str], None]
# A session, or a function that makes one: Spark (and its JVM) starts only when there is work for it.
SparkSource = SparkSession | Callable[[], SparkSession]


def _quiet(message: str) -> None:
    pass


@dataclass
class ProjectionStats:
    passes: int = 0
    entries: int = 0
    selected: int = 0
    handler_calls: int = 0
    walk_seconds: float = 0.0  # time inside the ordering walk and handlers, summed over executors
    walk_cpu_seconds: float = 0.0  # the same walks' CPU time
    spark_start_seconds: float = 0.0  # getting the session: a JVM start, or a warm server's session
    spark_seconds: float = 0.0  # wall time of the Spark passes (load state, shuffle, sort, walk, write out)
    commit_seconds: float = 0.0
    by_view: dict[str, dict[str, int]] = field(default_factory=dict)  # outcome counts of this projection
    streams_touched: dict[str, int] = field(default_factory=dict)
    publications: list[Publication] = field(default_factory=list)  # to PostgreSQL, when it serves reads
    publish_seconds: float = 0.0
    publish_error: str | None = None  # publishing failed (DuckDB is committed; a later publication catches up)

    def add(self, out: pa.Table) -> None:
        metrics = out.filter(pc.equal(out["kind"], "metric"))
        for name, n in zip(metrics["name"].to_pylist(), metrics["n"].to_pylist()):
            if name == "walk_us":
                self.walk_seconds += n / 1e6
            elif name == "walk_cpu_us":
                self.walk_cpu_seconds += n / 1e6
        counts = out.filter(pc.equal(out["kind"], "count"))
        for view, name, n in zip(counts["view"].to_pylist(), counts["name"].to_pylist(), counts["n"].to_pylist()):
            per_view = self.by_view.setdefault(view, {})
            per_view[name] = per_view.get(name, 0) + n
            if name == "selected":
                self.selected += n
            elif name in ("applied", "handler_error"):
                self.handler_calls += n
        watermarks = out.filter(pc.equal(out["kind"], "watermark"))
        for view in watermarks["view"].to_pylist():
            self.streams_touched[view] = self.streams_touched.get(view, 0) + 1


@dataclass
class RunReport:
    ingested: list[IngestResult] = field(default_factory=list)
    tick_entry: int | None = None
    projection: ProjectionStats = field(default_factory=ProjectionStats)
    ingest_seconds: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True)
class RunPlan:
    """What a run does, decided in one place for `inorder run`, the engine's `run`, and Dagster's
    landing sensor and tick schedule."""

    landing: tuple[LandingFile, ...]  # new landing files, in the order they are ingested
    resumed: bool  # archived batches an earlier, interrupted run did not project
    tick: bool  # nothing new: record a tick at `t_us`, so gap timers fire
    due_views: tuple[str, ...]  # with a tick: the views with a buffered stream it walks
    t_us: int  # the run's logical time (a batch ingested later in the run takes its own wall-clock time)

    @property
    def batches(self) -> tuple[str, ...]:
        return tuple(f.batch_id for f in self.landing)


def plan_run(store: Store, home: Home, views: Sequence[View], now: datetime | None = None,
             min_idle_seconds: float = 0.0) -> RunPlan:
    """Ingest what is new; with nothing new, finish what an interrupted run archived; else tick, when
    logical time moved and either a gap timer is due or nothing was recorded for `min_idle_seconds`
    (the tick schedule's interval; `inorder run` ticks whenever time moved). A tick projects only the
    views with a timer due; its entry waits for the others' next projection and resumes nothing."""
    landing = tuple(new_landing_files(store, home))
    resumed = any(e["kind"] != "tick" for plan in plan_passes(store, views) for e in plan.entries)
    t_us = _logical_now(store, now)
    last = store.last_logical_time_us()
    tick, due = False, ()
    if not landing and not resumed and tick_due(store, t_us):
        due = tuple(views_with_due_buffers(store.con, views, t_us))
        tick = bool(due) or last is None or t_us - last >= min_idle_seconds * 1e6
    return RunPlan(landing, resumed, tick, due if tick else (), t_us)


def source_mapping(home: Home) -> SourceMapping:
    return SourceMapping.load(home.root / "source.json")


def now_us(now: datetime | None) -> int:
    return us_from_utc(now or datetime.now(timezone.utc))


def project(spark: SparkSource, store: Store, home: Home, views: Sequence[View], selected: Sequence[View],
            mapping: SourceMapping, progress: Progress = _quiet, publish: bool = True) -> ProjectionStats:
    """Project every archived entry not yet committed for the `selected` views, pass by pass; with
    `publish` (and INORDER_SERVE_POSTGRES set), publish each commit to PostgreSQL, after catching up
    what an earlier run committed but did not publish."""
    subscribed = {t for v in views for t in v.subscribes}
    plans = plan_passes(store, selected)
    crash_point("project.planned")
    stats = ProjectionStats(passes=len(plans))
    publishing = Publishing(progress) if publish else None
    try:
        if publishing:
            publishing.publish(store.con, selected)
        _project_passes(spark, store, home, selected, plans, mapping.first_seq, subscribed, stats, publishing,
                        progress)
    finally:
        if publishing:
            publishing.close()
            stats.publications, stats.publish_seconds = publishing.publications, publishing.seconds
            stats.publish_error = publishing.error
    return stats


def _project_passes(spark: SparkSource, store: Store, home: Home, selected: Sequence[View], plans: list,
                    first_seq: int, subscribed: set[str], stats: ProjectionStats, publishing: Publishing | None,
                    progress: Progress) -> None:
    # started by the first pass with something to walk (run_pass calls it with the store let go: a JVM
    # start takes seconds); a tick that walks nothing commits its ledger rows without Spark
    @functools.cache
    def session() -> SparkSession:
        started = time.perf_counter()
        got = spark() if callable(spark) else spark
        stats.spark_start_seconds += time.perf_counter() - started
        return got

    for i, plan in enumerate(plans, start=1):
        started, label, starts_before = time.perf_counter(), f"pass {i}/{len(plans)}", stats.spark_start_seconds
        with stage_progress(label, progress):
            out = run_pass(session, store, home, list(selected), plan, first_seq)
        spark_done = time.perf_counter()
        summary = out.summary()
        refuse_failed_pass(out, summary)
        crash_point("project.ordered")
        progress(f"{label}: committing")
        with pass_output(store, out):
            commit_pass(store, list(selected), plan, subscribed)
            crash_point("project.committed")
            committed = time.perf_counter()
            if publishing:  # while the pass output is at hand: only what it changed travels
                publishing.publish(store.con, [v for v in selected if v.name in plan.by_view],
                                   pass_start={v: entries[0].entry_idx for v, entries in plan.by_view.items()})
        stats.add(summary)
        shutil.rmtree(pass_folder(home), ignore_errors=True)
        stats.spark_seconds += spark_done - started - (stats.spark_start_seconds - starts_before)  # the pass alone
        stats.commit_seconds += committed - spark_done
        stats.entries += len(plan.entries)
        progress(f"{label}: {len(plan.entries)} entries for {', '.join(sorted(plan.by_view))} "
                 f"in {time.perf_counter() - started:.1f}s")


class HandlerBugFailure(RuntimeError):
    """A handler of a view with on_bug="fail" raised: the pass is not committed."""


def refuse_failed_pass(out: PassResult, summary: pa.Table) -> None:
    failures = out.fatal(summary)
    if failures:
        first = failures[0]
        raise HandlerBugFailure(
            f"view {first['view']} (on_bug='fail'): handler bug on stream {first['stream_id']!r} seq {first['seq']}: "
            f"{first['data']['reason']}; nothing was committed"
            + (f" ({len(failures) - 1} more streams failed)" if len(failures) > 1 else ""))


def run(spark: SparkSource, home: Home, views: Sequence[View], now: datetime | None = None,
        progress: Progress = _quiet, selected: Sequence[View] | None = None) -> RunReport:
    """Ingest every new landing file at logical time `now` (a tick when there is none), then project."""
    started = time.perf_counter()
    report = RunReport()
    mapping = source_mapping(home)
    with Store.open(home, views) as store:
        plan = plan_run(store, home, views, now)
        report.ingested = ingest_landing(store, home, mapping, plan.t_us, progress)
        report.ingest_seconds = time.perf_counter() - started
        if plan.tick and not report.ingested:  # every view is projected below: the tick's entry is done for all
            report.tick_entry = record_entry(store, "tick", plan.t_us)
            progress(f"no new batch: tick at {datetime.fromtimestamp(plan.t_us / 1e6, timezone.utc).isoformat()}")
        report.projection = project(
            spark, store, home, views, selected or views, mapping, progress)
    report.seconds = time.perf_counter() - started
    return report


def ingest_batch(home: Home, views: Sequence[View], batch_id: str, now: datetime | None = None) -> IngestResult:
    """Ingest the landing file(s) of one batch id (a file's stem, a clashing file's whole name, or a
    changed file's `name@hash`).

    Idempotent: a batch already registered is returned as it was. Another file that claims the
    same batch id is set aside as a rejected batch on the way, never ignored. When a changed file's
    new content turns out to be recorded already (touched, or changed back), its newest entry is returned."""
    with Store.open(home, views) as store:
        paths = files_for_batch(home, batch_id)
        already = store.con.execute("SELECT count(*) FROM inorder.ingest_log WHERE batch_id = ? AND kind = 'batch'",
                                    [batch_id]).fetchone()[0] > 0  # a tick's id is never a batch's
        if not already and not paths:
            raise FileNotFoundError(f"no landing file for batch {batch_id!r} in {home.landing}")
        if new_landing_files(store, home, only=paths):
            ingest_landing(store, home, source_mapping(home), _logical_now(store, now), only=paths)
        entry_idx, batch_id, status, records, malformed, size, reason = store.con.execute(
            "SELECT entry_idx, batch_id, status, records, malformed, bytes, reason FROM inorder.ingest_log "
            "WHERE kind = 'batch' AND (batch_id = ? OR list_contains(?, file_name)) "
            "ORDER BY batch_id = ? DESC, entry_idx DESC LIMIT 1",
            [batch_id, [p.name for p in paths], batch_id]).fetchone()
        return IngestResult(entry_idx, batch_id, status, records, malformed, bytes=size or 0, reason=reason,
                            already_ingested=already)


def project_views(spark: SparkSource, home: Home, views: Sequence[View], selected: Sequence[View],
                  tick: bool = False, now: datetime | None = None, progress: Progress = _quiet) -> ProjectionStats:
    """Project the selected views; with `tick`, first record a tick so gap timers can fire."""
    with Store.open(home, views) as store:
        t_us = _logical_now(store, now) if tick else None
        if tick and tick_due(store, t_us):
            record_entry(store, "tick", t_us)
        return project(spark, store, home, views, selected, source_mapping(home), progress)


def _logical_now(store: Store, now: datetime | None) -> int:
    """`now` as logical time; the wall clock by default, never before the last recorded time."""
    t_us = now_us(now)
    if now is None:
        t_us = max(t_us, store.last_logical_time_us() or t_us)
    check_logical_time(store, t_us)
    return t_us


def rebuild(spark: SparkSource, home: Home, views: Sequence[View], view: View,
            progress: Progress = _quiet) -> ProjectionStats:
    """Truncate `view` and its state, then replay the archive with the recorded logical times.

    PostgreSQL keeps showing the old view meanwhile (marked unpublished, so nothing partial is ever
    published over it); the rebuilt view replaces it in one transaction at the end."""
    mapping = source_mapping(home)
    publishing = Publishing(progress)
    try:
        with Store.open(home, views) as store:
            con = store.con
            publishing.forget(view)
            with store.transaction():
                for table in view.tables:
                    con.execute(f'DELETE FROM "{table.name}"')
                for engine_table in ("watermarks", "pending", "errors", "gaps", "batches"):
                    con.execute(f"DELETE FROM inorder.{engine_table} WHERE view = ?", [view.name])
            progress(f"rebuild {view.name}: truncated; replaying the archive")
            stats = project(spark, store, home, views, [view], mapping, progress, publish=False)
            publishing.publish(store.con, [view], full=True)  # project() reopened the connection
    finally:
        publishing.close()
    stats.publications, stats.publish_seconds, stats.publish_error = (
        publishing.publications, publishing.seconds, publishing.error)
    return stats


def publish(home: Home, views: Sequence[View], full: View | None = None) -> list[Publication]:
    """`inorder publish`: bring every view's PostgreSQL side to DuckDB's newest commit (what a crash
    after a commit, or PostgreSQL being down, left behind); with `full`, replace that view's
    PostgreSQL tables with DuckDB's in one transaction (and recreate them if their shape changed)."""
    target = ServeTarget.from_env()
    if target is None:
        raise PublishError("INORDER_SERVE_POSTGRES is not set: there is no PostgreSQL to publish to")
    with Store.open(home, views) as store, Publisher(target) as publisher:
        done = publisher.publish(store.con, [full], full=True) if full else []
        done += publisher.publish(store.con, views)
    if publisher.refused:  # the other views were published
        raise PublishError(next(iter(publisher.refused.values())))
    return done


class NotParked(ValueError):
    """retry/skip was asked for a stream that is not parked."""


def operator_action(spark: SparkSource, home: Home, views: Sequence[View], view: View, streams: Sequence[str] | None,
                    action: str, progress: Progress = _quiet) -> list[str]:
    """Record a retry or skip of parked streams of `view` as entries (so rebuild replays them), then
    project that view alone. `streams` None means every parked stream of the view (after a fix is
    deployed). Returns the streams acted on."""
    mapping = source_mapping(home)
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
            record_entry(store, action, t_us, view.name, stream_id)
        if streams:
            project(spark, store, home, views, [view], mapping, progress)
    return list(streams)
