"""Ingest: inspect each new landing file, archive its normalised messages, register the entry.

The archive (Parquet, one folder per entry) is written and renamed into place before the entry is
registered, so a registered entry always has its archive. `received_at` is fixed here, once.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.faults import crash_point
from pipelines.engine.outcomes import EntryKind
from pipelines.engine.normalise import SUPPORTED_SUFFIXES, InspectedBatch, RejectedFile, SourceMapping, inspect_file
from pipelines.engine.planning import SKETCH_SQL
from pipelines.engine.sources import Source
from pipelines.store.database import Home, Store, utc_from_us
from pipelines.store.layout import mark_superseded_malformed


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
    stream_types: dict[str, int] = field(default_factory=dict)  # normalised messages per stream type
    reingest_of: int | None = None  # the entry whose undelivered lines this one re-inspected


def archive_path(home: Home, entry_idx: int) -> Path:
    return home.archived(entry_idx)


def landing_files(home: Home, source: Source) -> list[Path]:
    """Batch files waiting in the landing folder, in the order of their names under it; with several
    sources, its sub-folders' too (a folder source's files are there). Hidden files and folders are
    skipped, and a symlinked folder is not entered (nothing outside the landing folder is read).
    The one discovery of `inorder run`, `ingest_batch` and the landing sensor."""
    if not home.landing.is_dir():
        return []
    found = []
    for folder, subfolders, files in os.walk(home.landing):
        subfolders[:] = [d for d in subfolders if source.reads_subfolders and not d.startswith(".")]
        found += [Path(folder, f) for f in files if not f.startswith(".")]
    return sorted(found, key=lambda p: landing_name(home, p).as_posix())


def landing_name(home: Home, path: Path) -> PurePosixPath:
    """A landing file's name as the ingest log records it: its path under the landing folder (`trips/t1.jsonl`,
    or `t1.jsonl` for a file of the folder itself)."""
    return PurePosixPath(path.relative_to(home.landing).as_posix())


# what Dagster refuses in a partition key (a batch id is one); newlines and the like can be in file names
_NOT_IN_IDS = re.compile(r"[\x00-\x1f\x7f]|\.\.\.")


def id_name(name: PurePosixPath) -> str:
    """The file's name under landing/, as batch ids use it: `file-<hash of the name>` when the name has a
    control character or `...` (such a file is set aside, under an id every path can use)."""
    return f"file-{_name_hash(name)}" if _NOT_IN_IDS.search(str(name)) else str(name)


def batch_id_of(name: PurePosixPath) -> str:
    """A landing file's batch id: its name under landing/ without the extension (`t1`, `trips/t1`), so that
    the feeds of several folders may land files of the same name."""
    shown = id_name(name)
    if shown != str(name):
        return shown
    return str(name.with_suffix("")) if name.suffix.lower() in SUPPORTED_SUFFIXES else str(name)


def files_for_batch(home: Home, source: Source, batch_id: str) -> list[Path]:
    """The landing files a batch id (a partition key) can stand for: the file with that stem, the file
    with that whole name, or the file whose changed version it names (`<file name>@<hash>`)."""
    return [p for p in landing_files(home, source) for name in [landing_name(home, p)]
            if batch_id in (batch_id_of(name), str(name)) or batch_id.startswith(id_name(name) + "@")]


def known_batch_ids(store: Store) -> set[str]:
    return {r[0] for r in store.con.execute("SELECT batch_id FROM inorder.ingest_log").fetchall()}


def check_logical_time(store: Store, t_us: int) -> None:
    last = store.last_logical_time_us()
    if last is not None and t_us < last:
        raise LogicalTimeError(f"logical time {utc_from_us(t_us).isoformat()} is before the last recorded "
                               f"{utc_from_us(last).isoformat()}; logical time never runs backwards")


class Fingerprint(NamedTuple):
    """What the ingest log records of a file's content, to notice when it changes later."""

    sha256: str | None  # None: not read (the file resolves outside the landing folder)
    bytes: int
    mtime_ns: int


def _fingerprint(path: Path) -> Fingerprint:
    """sha256 and size of the content, with the mtime taken before reading (a later write changes it)."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return Fingerprint(digest.hexdigest(), size, mtime_ns)


def _read(path: Path) -> tuple[Fingerprint, bytes]:
    """The content and its fingerprint, from one read: what is inspected is what was hashed."""
    with path.open("rb") as f:
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
        data = f.read()
    return Fingerprint(hashlib.sha256(data).hexdigest(), len(data), mtime_ns), data


def _inside_landing(home: Home, path: Path) -> bool:
    return home.landing.resolve() in path.resolve().parents


def current_version(home: Home, path: Path) -> tuple[str, Fingerprint]:
    """(batch id, fingerprint) of a landing file's current content, for setting a changed file aside:
    `<file name>@<16 hex of its sha256>`. A file that resolves outside the landing folder is never
    read; its id hashes where it points instead."""
    name = id_name(landing_name(home, path))
    if _inside_landing(home, path):
        fingerprint = _fingerprint(path)
        return f"{name}@{fingerprint.sha256[:16]}", fingerprint
    target = hashlib.sha256(os.fsencode(path.resolve())).hexdigest()
    stat = path.stat()
    return f"{name}@{target[:16]}", Fingerprint(None, stat.st_size, stat.st_mtime_ns)


def _write_archive(home: Home, entry_idx: int, batch: InspectedBatch) -> None:
    target = archive_path(home, entry_idx)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".parquet.tmp")
    pq.write_table(batch.messages, tmp, compression="zstd")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    crash_point("ingest.archive_written")
    os.replace(tmp, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:  # the rename itself must survive a power cut before the entry is registered
        os.fsync(directory)
    finally:
        os.close(directory)
    crash_point("ingest.archive_in_place")


Inspected = tuple[InspectedBatch | None, Fingerprint | None, str | None]  # (batch, fingerprint, rejection reason)


def _inspect(home: Home, path: Path, batch_id: str, entry_idx: int, mapping: SourceMapping) -> Inspected:
    """(inspected batch or None, fingerprint, rejection reason). Pure: safe in a worker process."""
    fingerprint = None
    try:
        if not _inside_landing(home, path):
            raise RejectedFile("the file resolves outside the landing folder (symlink?)")
        fingerprint, data = _read(path)
        return inspect_file(path, batch_id, entry_idx, mapping, data), fingerprint, None
    except RejectedFile as exc:
        return None, fingerprint, str(exc)
    except OSError as exc:
        return None, fingerprint, f"file cannot be read: {exc}"


def _register(store: Store, home: Home, path: Path, batch_id: str, entry_idx: int, t_us: int,
              inspected: Inspected, reingest_of: int | None = None) -> IngestResult:
    """Archive an inspected file and register it as entry `entry_idx` (one transaction)."""
    batch, fingerprint, reason = inspected
    sha, size, mtime_ns = fingerprint or (None, 0, None)
    con = store.con
    if batch is None:
        con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, bytes, sha256, "
            "mtime_ns, status, reason) VALUES (?, ?, 'batch', ?, ?, ?, ?, ?, 'rejected', ?)",
            [entry_idx, batch_id, utc_from_us(t_us), str(landing_name(home, path)), fingerprint and size, sha,
             mtime_ns, reason])
        crash_point("ingest.rejected_registered")
        return IngestResult(entry_idx, batch_id, "rejected", bytes=size, reason=reason)
    _write_archive(home, entry_idx, batch)
    types = stream_type_counts(batch.messages)
    with store.transaction():
        con.execute(
            "INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, file_name, bytes, sha256, "
            "mtime_ns, records, malformed, normalised, status, stream_types, reingest_of) "
            "VALUES (?, ?, 'batch', ?, ?, ?, ?, ?, ?, ?, ?, 'archived', MAP(?::VARCHAR[], ?::BIGINT[]), ?)",
            [entry_idx, batch_id, utc_from_us(t_us), str(landing_name(home, path)), size, sha, mtime_ns, batch.records,
             len(batch.malformed), batch.messages.num_rows, list(types), list(types.values()), reingest_of])
        _record_streams(store, entry_idx, batch)
        crash_point("ingest.registering")
        if batch.malformed:
            con.executemany(
                "INSERT INTO inorder.errors (kind, batch_id, line, raw, reason, logged_at, entry_idx) "
                "VALUES ('malformed', ?, ?, ?, ?, ?, ?)",
                [[batch_id, line, raw, why, utc_from_us(t_us), entry_idx] for line, raw, why in batch.malformed])
        if reingest_of is not None:
            mark_superseded_malformed(con, entry_idx)
    crash_point("ingest.registered")
    return IngestResult(entry_idx, batch_id, "archived", batch.records, len(batch.malformed), bytes=size,
                        stream_types=types, reingest_of=reingest_of)


def stream_type_counts(messages: pa.Table) -> dict[str, int]:
    """Normalised messages per stream type (a message without one counts under '')."""
    counts = pc.value_counts(pc.fill_null(messages["stream_type"], "")) if messages.num_rows else []
    return {c["values"].as_py(): c["counts"].as_py() for c in counts}


def _record_streams(store: Store, entry_idx: int, batch: InspectedBatch) -> None:
    """The batch's distinct streams per stream type, with their sketch (pipelines/engine/planning.py), and
    each stream's seq range (where a pass looks for the copy walked at a resent seq, pipelines/engine/inputs.py)."""
    store.con.register("inorder_ingested", batch.messages.select(["stream_type", "stream_id", "seq"]))
    try:
        store.con.execute(
            f"INSERT INTO inorder.ingest_streams (entry_idx, stream_type, streams, sketch) "
            f"SELECT ?, stream_type, count(*), {SKETCH_SQL} "
            f"FROM (SELECT DISTINCT stream_type, stream_id FROM inorder_ingested) GROUP BY ALL", [entry_idx])
        store.con.execute(
            "INSERT INTO inorder.ingest_seq_ranges (entry_idx, stream_id, min_seq, max_seq) "
            "SELECT ?, stream_id, min(seq), max(seq) FROM inorder_ingested GROUP BY stream_id", [entry_idx])
    finally:
        store.con.unregister("inorder_ingested")


def tick_due(store: Store, t_us: int) -> bool:
    """A tick records that logical time moved on. At a time already recorded it would change nothing
    (every pending buffer was looked at then), so none is recorded: re-running `inorder run --now T`
    changes nothing."""
    last = store.last_logical_time_us()
    return last is None or t_us > last


def record_entry(store: Store, kind: EntryKind, t_us: int, target_view: str | None = None,
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
    batch_id: str  # batch_id_of its name; its whole name when another file has that id; `name@hash` when changed
    set_aside: str | None = None  # why it is set aside (a rejected batch) instead of ingested
    fingerprint: Fingerprint | None = None  # of a changed file's new content
    mapping: SourceMapping | None = None  # the source mapping that reads it (source.json's, for its name)


@dataclass
class _Recorded:
    """What the ingest log holds of one file name: its first entry, every content hash, the newest stat."""

    batch_id: str
    status: str
    hashes: set[str] = field(default_factory=set)
    bytes: int | None = None
    mtime_ns: int | None = None


def _recorded_files(store: Store) -> dict[str, _Recorded]:
    recorded: dict[str, _Recorded] = {}
    for name, batch_id, status, sha, size, mtime_ns in store.con.execute(
            "SELECT file_name, batch_id, status, sha256, bytes, mtime_ns FROM inorder.ingest_log "
            "WHERE kind = 'batch' AND file_name IS NOT NULL ORDER BY entry_idx").fetchall():
        entry = recorded.setdefault(name, _Recorded(batch_id, status))
        entry.hashes.update([sha] if sha else [])
        entry.bytes, entry.mtime_ns = size, mtime_ns
    return recorded


def _changed(home: Home, path: Path, recorded: _Recorded) -> LandingFile | None:
    """The new version of an already recorded file, to be set aside; None when it has not changed.

    Cheap when nothing changed: the file is re-hashed only when its size or mtime differ from the
    newest recorded ones (a store from before mtimes were recorded compares the size alone)."""
    if not recorded.hashes:
        return None  # never read (e.g. it resolved outside the landing folder): nothing to compare with
    try:
        stat = path.stat()
        if stat.st_size == recorded.bytes and recorded.mtime_ns in (None, stat.st_mtime_ns):
            return None
        batch_id, fingerprint = current_version(home, path)
    except OSError:
        return None  # vanished or unreadable since it was listed: the next run looks again
    if fingerprint.sha256 in recorded.hashes:
        return None  # touched, same content
    was = "ingested as batch" if recorded.status == "archived" else "set aside as rejected batch"
    reason = (f"the file changed after it was {was} {recorded.batch_id!r} (same name, new content); "
              f"the recorded version stays the one that counts; give new content a new file name")
    return LandingFile(path, batch_id, reason, fingerprint)


_ENTRY_ID = re.compile(r"(tick|retry|skip)-[0-9]+")  # what record_entry names its entries


def new_landing_files(store: Store, home: Home, source: Source, only: list[Path] | None = None) -> list[LandingFile]:
    """Landing files (or `only` these) never ingested nor set aside, in the order of their names under
    the landing folder, each with the mapping of `source` (source.json) that reads it.

    A file whose batch id another file already has (b1.csv after b1.jsonl) is never ignored:
    it becomes a clash, registered under its whole file name as a rejected batch. A file that no source
    takes, or more than one, is registered as a rejected batch under its batch id, unread. A file whose
    content changed after it was recorded is set aside once per new content, as `<name>@<hash>`."""
    known_ids = known_batch_ids(store)
    recorded = _recorded_files(store)
    found = []
    for path in (landing_files(home, source) if only is None else only):
        name = landing_name(home, path)
        if str(name) in recorded:
            new = _changed(home, path, recorded[str(name)])
            if new is None or new.batch_id in known_ids:
                continue  # unchanged, or this content was set aside before
        elif _NOT_IN_IDS.search(str(name)):
            new = LandingFile(path, batch_id_of(name), f"the file name {str(name)!r} has a control character or "
                                                       "'...', which no batch id may hold; rename the file")
        else:
            new = _new_file(path, name, source, known_ids)
        known_ids.add(new.batch_id)
        found.append(new)
    return found


def _new_file(path: Path, name: PurePosixPath, source: Source, known_ids: set[str]) -> LandingFile:
    """A file the ingest log has no row of: read with its source's mapping, or set aside under a free id."""
    batch_id = batch_id_of(name)
    taken, reserved = batch_id in known_ids, bool(_ENTRY_ID.fullmatch(batch_id))
    if taken or reserved:
        free = (str(name) if str(name) not in known_ids and not _ENTRY_ID.fullmatch(str(name))
                else f"{id_name(name)}@{_name_hash(name)}")
        why = ("is already taken by another file or entry" if taken else
               "has the form of a tick's or an operator action's id")
        return LandingFile(path, free, f"batch id {batch_id!r} {why}; rename this one")
    try:
        return LandingFile(path, batch_id, mapping=source.mapping_for(name))
    except RejectedFile as exc:  # no source takes it, or several: never read with a mapping not meant for it
        return LandingFile(path, batch_id, str(exc))


def _name_hash(name: PurePosixPath) -> str:
    return hashlib.sha256(os.fsencode(str(name))).hexdigest()[:16]


def ingest_landing(store: Store, home: Home, source: Source, t_us: int,
                   progress=lambda message: None, only: list[Path] | None = None) -> list[IngestResult]:
    """Ingest every new landing file (or `only` these), in the order of their names, at logical time `t_us`,
    each read with the mapping of `source` (source.json) that takes it.

    Files are inspected in parallel worker processes when there is enough data to pay for them;
    they are archived and registered one by one, in order."""
    new = new_landing_files(store, home, source, only)
    if not new:
        return []
    check_logical_time(store, t_us)
    crash_point("ingest.listed")
    first_idx = store.next_entry_idx()
    jobs = [(home, f.path, f.batch_id, first_idx + i, f.mapping) for i, f in enumerate(new) if f.set_aside is None]
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
            if f.set_aside:
                result = (None, f.fingerprint, f.set_aside)
            else:
                with store.released():  # readers may open the store while a file is inspected and archived
                    result = next(inspected)
            crash_point("ingest.inspected")
            registered = _register(store, home, f.path, f.batch_id, first_idx + i, t_us, result)
            progress(f"ingest {len(results) + 1}/{len(new)} {landing_name(home, f.path)}: {registered.status}, "
                     f"{registered.records} records, {registered.malformed} malformed"
                     + (f" ({registered.reason})" if registered.reason else ""))
            results.append(registered)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return results


class ReingestRefused(ValueError):
    """A batch cannot be re-ingested (unknown, or its landing file is gone or changed)."""


REINGEST_MARK = "@reingest-"  # a re-ingest's batch id: <batch id>@reingest-<its entry>


def reingest(store: Store, home: Home, source: Source, subscribed: set[str], batch_ids: list[str],
             t_us: int, progress=lambda message: None) -> list[IngestResult]:
    """Inspect archived batches again with today's source mapping of their file (after `source.json` was
    fixed: `source`), as new
    entries at logical time `t_us`. A new entry carries only the lines its batch's newest entry left
    undelivered: the records of stream types no view subscribes to (`subscribed`), and the malformed
    ones. Lines some view received are not carried again, so nothing is selected twice; the old entry
    stays in the log as it was, and the new one names it (`reingest_of`). Reads the landing file as it
    was ingested (its recorded sha256), or refuses."""
    check_logical_time(store, t_us)
    results = []
    for asked in batch_ids:
        root = asked.split(REINGEST_MARK)[0]
        row = store.con.execute(
            "SELECT entry_idx, file_name, sha256 FROM inorder.ingest_log WHERE kind = 'batch' AND status = 'archived' "
            "AND (batch_id = ? OR starts_with(batch_id, ?)) ORDER BY entry_idx DESC LIMIT 1",
            [root, root + REINGEST_MARK]).fetchone()
        if row is None:
            raise ReingestRefused(f"no archived batch {root!r} to re-ingest (`inorder status` lists the batches)")
        newest, file_name, sha = row
        path = home.landing / file_name
        if not path.is_file() or not _inside_landing(home, path):
            raise ReingestRefused(f"batch {root!r}: its landing file {path} is gone; re-ingesting reads it again")
        fingerprint, data = _read(path)
        if fingerprint.sha256 != sha:
            raise ReingestRefused(f"batch {root!r}: {path} changed since it was ingested; re-ingesting reads the "
                                  "file as it was ingested (give new content a new file name)")
        carried = {line for (line,) in store.con.execute(
            "SELECT line FROM read_parquet(?) WHERE stream_type IS NULL OR NOT list_contains(?, stream_type) "
            "UNION SELECT line FROM inorder.errors WHERE kind = 'malformed' AND entry_idx = ?",
            [str(home.archived(newest)), sorted(subscribed), newest]).fetchall()}
        if not carried:
            progress(f"reingest {root}: every record of entry {newest} reached a view or was already delivered; "
                     "nothing to re-ingest")
            continue
        entry_idx = store.next_entry_idx()
        batch_id = f"{root}{REINGEST_MARK}{entry_idx}"
        try:
            inspected = inspect_file(path, batch_id, entry_idx, source.mapping_for(PurePosixPath(file_name)), data)
        except RejectedFile as exc:
            raise ReingestRefused(f"batch {root!r} cannot be read with the new mapping: {exc}") from None
        lines = pa.array(sorted(carried), pa.int64())
        kept = InspectedBatch(inspected.messages.filter(pc.is_in(inspected.messages["line"], lines)),
                              [m for m in inspected.malformed if m[0] in carried])
        types = stream_type_counts(kept.messages)
        if not set(types) & subscribed:
            progress(f"reingest {root}: with today's source mapping, entry {newest}'s {len(carried)} undelivered "
                     f"records still reach no view ({len(kept.malformed)} malformed, stream types {types}); "
                     "nothing re-ingested")
            continue
        result = _register(store, home, path, batch_id, entry_idx, t_us, (kept, fingerprint, None), reingest_of=newest)
        progress(f"reingest {root}: entry {newest}'s {len(carried)} undelivered records as {batch_id}: "
                 f"{kept.messages.num_rows} normalised, {len(kept.malformed)} malformed")
        results.append(result)
    return results
