"""Ingest: inspect each new landing file, archive its normalised messages, register the entry.

The archive (Parquet, one folder per entry) is written and renamed into place before the entry is
registered, so a registered entry always has its archive. `received_at` is fixed here, once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.inspect import SUPPORTED_SUFFIXES, InspectedBatch, RejectedFile, SourceMapping, inspect_file
from pipelines.store import Home, Store, utc_from_us


class LogicalTimeError(ValueError):
    """Logical time would run backwards."""


@dataclass
class IngestResult:
    entry_idx: int
    batch_id: str
    status: str  # archived | rejected
    records: int = 0
    malformed: int = 0
    streams: int = 0
    min_seq: int | None = None
    max_seq: int | None = None
    bytes: int = 0
    reason: str | None = None


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
    os.replace(tmp, target)


def ingest_file(store: Store, home: Home, path: Path, mapping: SourceMapping, t_us: int) -> IngestResult:
    """Inspect, archive and register one landing file as the next entry."""
    entry_idx = store.next_entry_idx()
    batch_id = batch_id_of(path)
    try:
        if home.landing.resolve() not in path.resolve().parents:
            raise RejectedFile("the file resolves outside the landing folder (symlink?)")
        sha, size = _sha256(path)
        batch = inspect_file(path, batch_id, entry_idx, mapping)
    except (RejectedFile, OSError) as exc:
        reason = str(exc) if isinstance(exc, RejectedFile) else f"file cannot be read: {exc}"
        store.con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, status, reason) "
            "VALUES (?, ?, 'batch', ?, ?, 'rejected', ?)", [entry_idx, batch_id, utc_from_us(t_us), path.name, reason])
        return IngestResult(entry_idx, batch_id, "rejected", reason=reason)
    _write_archive(home, entry_idx, batch)
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, bytes, sha256, "
            "records, malformed, normalised, status) VALUES (?, ?, 'batch', ?, ?, ?, ?, ?, ?, ?, 'archived')",
            [entry_idx, batch_id, utc_from_us(t_us), path.name, size, sha, batch.records, len(batch.malformed),
             batch.messages.num_rows])
        if batch.malformed:
            con.executemany(
                "INSERT INTO inorder.errors (kind, batch_id, line, raw, reason, logged_at, entry_idx) "
                "VALUES ('malformed', ?, ?, ?, ?, ?, ?)",
                [[batch_id, line, raw, reason, utc_from_us(t_us), entry_idx] for line, raw, reason in batch.malformed])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return IngestResult(entry_idx, batch_id, "archived", batch.records, len(batch.malformed), batch.streams,
                        batch.min_seq, batch.max_seq, size)


def record_entry(store: Store, kind: str, t_us: int, target_view: str | None = None,
                 target_stream: str | None = None) -> int:
    """Register a tick or an operator action as the next entry; returns its index."""
    entry_idx = store.next_entry_idx()
    store.con.execute(
        "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, status, target_view, target_stream) "
        "VALUES (?, ?, ?, ?, 'archived', ?, ?)",
        [entry_idx, f"{kind}-{entry_idx}", kind, utc_from_us(t_us), target_view, target_stream])
    return entry_idx


def ingest_landing(store: Store, home: Home, mapping: SourceMapping, t_us: int,
                   progress=lambda message: None) -> list[IngestResult]:
    """Ingest every landing file not yet known, in file-name order, all at logical time `t_us`."""
    known = known_batch_ids(store)
    new = [p for p in landing_files(home) if batch_id_of(p) not in known]
    if new:
        check_logical_time(store, t_us)
    results = []
    for i, path in enumerate(new, start=1):
        result = ingest_file(store, home, path, mapping, t_us)
        progress(f"ingest {i}/{len(new)} {path.name}: {result.status}, {result.records} records, "
                 f"{result.malformed} malformed" + (f" ({result.reason})" if result.reason else ""))
        results.append(result)
    return results
