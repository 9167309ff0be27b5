"""Ingest: inspect each new landing file, archive its normalised messages, register the entry.

The archive (Parquet, one folder per entry) is written and renamed into place before the entry is
registered, so a registered entry always has its archive. `received_at` is fixed here, once.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.faults import crash_point
from pipelines.inspect import SUPPORTED_SUFFIXES, InspectedBatch, RejectedFile, SourceMapping, inspect_file
from pipelines.store import Home, Store, utc_from_us


_PARALLEL_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves


class LogicalTimeError(ValueError):
    """Logical time would run backwards."""


@dataclass
class IngestResult:
    entry_idx: int
    batch_id: str
    status: str  # archived | rejected
    records: int = 0
    malformed: int = 0
    bytes: int = 0
    reason: str | None = None
    already_ingested: bool = False


def archive_path(home: Home, entry_idx: int) -> Path:
    return home.archive / f"entry={entry_idx:09d}" / "messages.parquet"


def landing_files(home: Home) -> list[Path]:
    """Batch files waiting in the landing folder, in file-name order (hidden files are skipped)."""
    if not home.landing.is_dir():
        return []
    return sorted((p for p in home.landing.iterdir() if not p.name.startswith(".") and not p.is_dir()),
                  key=lambda p: p.name)


def batch_id_of(path: Path) -> str:
    return path.stem if path.suffix.lower() in SUPPORTED_SUFFIXES else path.name


def known_batch_ids(store: Store) -> set[str]:
    return {r[0] for r in store.con.execute("SELECT batch_id FROM inorder.ingest_log").fetchall()}


def check_logical_time(store: Store, t_us: int) -> None:
    last = store.last_logical_time_us()
    if last is not None and t_us < last:
        raise LogicalTimeError(f"logical time {utc_from_us(t_us).isoformat()} is before the last recorded "
                               f"{utc_from_us(last).isoformat()}; logical time never runs backwards")


def _sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _write_archive(home: Home, entry_idx: int, batch: InspectedBatch) -> None:
    target = archive_path(home, entry_idx)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".parquet.tmp")
    pq.write_table(batch.messages, tmp, compression="zstd")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    crash_point("ingest.archive_written")
    os.replace(tmp, target)
    crash_point("ingest.archive_in_place")


def _inspect(home: Home, path: Path, batch_id: str, entry_idx: int,
             mapping: SourceMapping) -> tuple[InspectedBatch | None, str | None, int, str | None]:
    """(inspected batch or None, sha256, bytes, rejection reason). Pure: safe in a worker process."""
    try:
        if home.landing.resolve() not in path.resolve().parents:
            raise RejectedFile("the file resolves outside the landing folder (symlink?)")
        sha, size = _sha256(path)
        return inspect_file(path, batch_id, entry_idx, mapping), sha, size, None
    except RejectedFile as exc:
        return None, None, 0, str(exc)
    except OSError as exc:
        return None, None, 0, f"file cannot be read: {exc}"


def _register(store: Store, home: Home, path: Path, batch_id: str, entry_idx: int, t_us: int,
              inspected: tuple[InspectedBatch | None, str | None, int, str | None]) -> IngestResult:
    """Archive an inspected file and register it as entry `entry_idx` (one transaction)."""
    batch, sha, size, reason = inspected
    con = store.con
    if batch is None:
        con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, status, reason) "
            "VALUES (?, ?, 'batch', ?, ?, 'rejected', ?)", [entry_idx, batch_id, utc_from_us(t_us), path.name, reason])
        crash_point("ingest.rejected_registered")
        return IngestResult(entry_idx, batch_id, "rejected", reason=reason)
    _write_archive(home, entry_idx, batch)
    with store.transaction():
        con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, bytes, sha256, "
            "records, malformed, normalised, status) VALUES (?, ?, 'batch', ?, ?, ?, ?, ?, ?, ?, 'archived')",
            [entry_idx, batch_id, utc_from_us(t_us), path.name, size, sha, batch.records, len(batch.malformed),
             batch.messages.num_rows])
        crash_point("ingest.registering")
        if batch.malformed:
            con.executemany(
                "INSERT INTO inorder.errors (kind, batch_id, line, raw, reason, logged_at, entry_idx) "
                "VALUES ('malformed', ?, ?, ?, ?, ?, ?)",
                [[batch_id, line, raw, why, utc_from_us(t_us), entry_idx] for line, raw, why in batch.malformed])
    crash_point("ingest.registered")
    return IngestResult(entry_idx, batch_id, "archived", batch.records, len(batch.malformed), bytes=size)


def record_entry(store: Store, kind: str, t_us: int, target_view: str | None = None,
                 target_stream: str | None = None) -> int:
    """Register a tick or an operator action as the next entry; returns its index."""
    entry_idx = store.next_entry_idx()
    store.con.execute(
        "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, status, target_view, target_stream) "
        "VALUES (?, ?, ?, ?, 'archived', ?, ?)",
        [entry_idx, f"{kind}-{entry_idx}", kind, utc_from_us(t_us), target_view, target_stream])
    crash_point(f"{kind}.recorded")
    return entry_idx


@dataclass(frozen=True)
class LandingFile:
    path: Path
    batch_id: str  # the file's stem, or its whole name when another file already has that stem
    clash: str | None = None  # why it is set aside instead of ingested


def new_landing_files(store: Store, home: Home, only: list[Path] | None = None) -> list[LandingFile]:
    """Landing files (or `only` these) never ingested nor set aside, in file-name order.

    A file whose batch id another file already has (b1.csv after b1.jsonl) is never ignored:
    it becomes a clash, registered under its whole file name as a rejected batch."""
    known_ids = known_batch_ids(store)
    known_files = {r[0] for r in store.con.execute(
        "SELECT file_name FROM inorder.ingest_log WHERE kind = 'batch'").fetchall()}
    found = []
    for path in (landing_files(home) if only is None else only):
        batch_id, clash = batch_id_of(path), None
        if path.name in known_files or path.name in known_ids:
            continue  # this very file was ingested (or set aside) before
        if batch_id in known_ids:
            clash = f"batch id {batch_id!r} is already taken by another file; rename this one"
            batch_id = path.name
        known_ids.add(batch_id)
        found.append(LandingFile(path, batch_id, clash))
    return found


def ingest_landing(store: Store, home: Home, mapping: SourceMapping, t_us: int,
                   progress=lambda message: None, only: list[Path] | None = None) -> list[IngestResult]:
    """Ingest every new landing file (or `only` these), in file-name order, at logical time `t_us`.

    Files are inspected in parallel worker processes when there is enough data to pay for them;
    they are archived and registered one by one, in order."""
    new = new_landing_files(store, home, only)
    if not new:
        return []
    check_logical_time(store, t_us)
    crash_point("ingest.listed")
    first_idx = store.next_entry_idx()
    jobs = [(home, f.path, f.batch_id, first_idx + i, mapping) for i, f in enumerate(new) if f.clash is None]
    total_bytes = sum(job[1].stat().st_size for job in jobs if job[1].is_file())
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1 and total_bytes > _PARALLEL_BYTES:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        inspected = iter(pool.map(_inspect, *zip(*jobs)))
    else:
        pool, inspected = None, (_inspect(*job) for job in jobs)
    results = []
    try:
        for i, f in enumerate(new):
            result = (None, None, 0, f.clash) if f.clash else next(inspected)
            crash_point("ingest.inspected")
            registered = _register(store, home, f.path, f.batch_id, first_idx + i, t_us, result)
            progress(f"ingest {len(results) + 1}/{len(new)} {f.path.name}: {registered.status}, "
                     f"{registered.records} records, {registered.malformed} malformed"
                     + (f" ({registered.reason})" if registered.reason else ""))
            results.append(registered)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return results
