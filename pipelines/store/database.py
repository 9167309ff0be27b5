"""The read store: one DuckDB file holding engine state (schema `inorder`) and the views' tables.

Only one process writes at a time: `Store.open` takes an exclusive lock file beside the database
and fails with a clear message when another run holds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import duckdb

from pipelines.config import Settings
from pipelines.faults import crash_point
from pipelines.store.layout import (ENGINE_DDL, KEYLESS_STATE_TABLES, STATE_TABLES, drop_primary_key,
                                    mark_superseded_malformed, transaction)
from pipelines.store.versions import ViewVersion, check_view_set, reconcile
from pipelines.view import View


# Names a view's table may not take: the engine's own tables, the temporary tables a pass creates on
# the same connection (they would shadow a view table of that name), and the PostgreSQL publication's.
ENGINE_TABLE_NAMES = frozenset({"ingest_log", "ingest_streams", "ingest_seq_ranges", *STATE_TABLES})
TEMP_TABLE_NAMES = frozenset({"pass_todo", "pass_subs", "pass_messages", "pass_limits", "pass_streams",
                              "pass_prev", "pass_out", "inorder_ingested", "pass_watermarks", "pass_skipped",
                              "pass_resent", "pass_resent_seqs", "pass_walked"})
RESERVED_TABLE_NAMES = ENGINE_TABLE_NAMES | TEMP_TABLE_NAMES | {"inorder_published"}


_FOLDER = "folder: "  # views.txt's line naming the folder of the view modules


class StoreBusy(RuntimeError):
    """Another process is writing this read store."""


def utc_from_us(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc)


def us_from_utc(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


DEFAULT_DUCKDB_MEMORY = "512MiB"
_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*", re.I)


def duckdb_memory_limit(text: str | None) -> str:
    """INORDER_DUCKDB_MEMORY (default 512MiB): DuckDB's `memory_limit` for the store's connections, a
    number and a unit (KB, MB, GB, KiB, MiB, GiB…)."""
    if text is None or not text.strip():
        return DEFAULT_DUCKDB_MEMORY
    size = _MEMORY.fullmatch(text)
    if not size:
        raise ValueError(f"INORDER_DUCKDB_MEMORY must be a size such as 512MiB or 2GB, not {text!r}")
    return "".join(size.groups())


@dataclass
class Home:
    """Where inorder keeps its files: INORDER_HOME, with optional separate landing, archive and database."""

    root: Path
    landing_dir: Path | None = None
    archive_dir: Path | None = None
    database_path: Path | None = None
    scratch_dir: Path | None = None  # INORDER_SCRATCH: where passes keep their inputs and output
    lock_wait_seconds: float = 0.0  # how long a writer waits for another to finish before failing
    # how long opening the DuckDB file waits while another process (a reader, say) holds it
    file_wait_seconds: float = Settings.lock_wait
    # what DuckDB may hold in memory before it spills to `<database>.tmp`: the driver's memory stays bounded
    memory_limit: str = DEFAULT_DUCKDB_MEMORY
    # the settings the command or run was given (pipelines/config.py), passed down with the home
    settings: Settings = field(default_factory=Settings, compare=False, repr=False)

    @classmethod
    def of(cls, settings: Settings, root: str | os.PathLike | None = None, landing: str | os.PathLike | None = None,
           archive: str | os.PathLike | None = None, database: str | os.PathLike | None = None) -> "Home":
        """The home the settings name (INORDER_HOME, INORDER_LANDING, …); explicit values win."""
        def path(value):
            return Path(value).resolve() if value else None

        return cls(Path(root or settings.home).resolve(), path(landing or settings.landing),
                   path(archive or settings.archive), path(database or settings.database),
                   scratch_dir=path(settings.scratch), file_wait_seconds=settings.lock_wait,
                   memory_limit=duckdb_memory_limit(settings.duckdb_memory), settings=settings)

    @property
    def landing(self) -> Path:
        return self.landing_dir or self.root / "landing"

    @property
    def archive(self) -> Path:
        return self.archive_dir or self.root / "archive"

    @property
    def database(self) -> Path:
        return self.database_path or self.root / "store.duckdb"

    @property
    def exists(self) -> bool:
        """A home has a landing folder or a store; a folder with neither (a mistyped INORDER_HOME, say)
        is not one, and the commands that read or write a home refuse it rather than start an empty store."""
        return self.landing.is_dir() or self.database.exists()

    @property
    def scratch(self) -> Path:
        """The passes' scratch folder: the home's own, or a folder of this home's inside INORDER_SCRATCH
        (storage a cluster's executors mount at the same path, for a pass that never passes its state and
        output through the driver), so homes that share INORDER_SCRATCH never meet there."""
        if self.scratch_dir is None:
            return self.root / "scratch"
        return self.scratch_dir / f"inorder-{hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]}"

    @property
    def views_file(self) -> Path:
        """Where a home records its INORDER_VIEWS (`inorder init --views`), so a new shell needs nothing exported
        but INORDER_HOME: the module names, and the folder Python found them in (a `folder: …` line)."""
        return self.root / "views.txt"

    def record_views(self, modules: str, folder: Path | None) -> None:
        self.views_file.write_text(
            f"# INORDER_VIEWS of this home (the environment variable wins when set)\n{modules}\n"
            + (f"# the folder they are in, put on Python's path when they are loaded from here\n{_FOLDER}{folder}\n"
               if folder is not None else ""), encoding="utf-8")

    def recorded_views(self) -> str | None:
        """The module names the home recorded (comma-separated), or None."""
        return next((line for line in self._views_record() if not line.startswith(_FOLDER)), None)

    def recorded_views_folder(self) -> Path | None:
        """The folder the home recorded its view modules in, or None."""
        return next((Path(line[len(_FOLDER):]) for line in self._views_record() if line.startswith(_FOLDER)), None)

    def _views_record(self) -> list[str]:
        try:
            lines = self.views_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]

    def archived(self, entry_idx: int) -> Path:
        """Where an entry's normalised messages are archived (Parquet)."""
        return self.archive / f"entry={entry_idx:09d}" / "messages.parquet"

    def ensure(self) -> "Home":
        for folder in (self.root, self.landing, self.archive, self.database.parent):
            folder.mkdir(parents=True, exist_ok=True)
        return self


def take_lock(path: Path, wait_seconds: float, busy_message: str) -> int:
    """An exclusive lock on `path` (held until the returned fd is closed, or the process dies),
    waiting up to `wait_seconds`; StoreBusy(busy_message) when it stays taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreBusy(busy_message) from None
            time.sleep(0.2)


_HOLDER = re.compile(r"Conflicting lock is held in (.+?\(PID \d+\))", re.S)


def _stderr(message: str) -> None:
    print(f"inorder: {message}", file=sys.stderr, flush=True)


def connect(path: Path, read_only: bool, wait_seconds: float, say: Callable[[str], None] = _stderr,
            memory_limit: str = DEFAULT_DUCKDB_MEMORY) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file with `memory_limit`; while another process holds it (DuckDB's lock is per
    process: a reader blocks a writer and the other way round), retry with backoff up to `wait_seconds`,
    saying who holds it and for how long, then fail with one line (StoreBusy)."""
    started = time.monotonic()
    delay, said = 0.02, None
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config={"memory_limit": memory_limit})
            con.execute("SET TimeZone = 'UTC'")
            return con
        except duckdb.IOException as exc:
            if "Could not set lock" not in str(exc):
                raise
            match = _HOLDER.search(str(exc))
            holder = " ".join(match.group(1).split()) if match else "another process"
            waited = time.monotonic() - started
            if waited >= wait_seconds:
                raise StoreBusy(f"{path} is held by {holder}; gave up after {waited:.0f}s "
                                f"(INORDER_LOCK_WAIT={wait_seconds:g})") from None
            if said is None or waited - said >= 5:  # at the first refusal, then every 5 s
                say(f"waiting for {path.name}: held by {holder} ({waited:.1f}s so far)")
                said = waited
            time.sleep(min(delay, max(wait_seconds - waited, 0.0)))
            delay = min(delay * 2, 0.5)


def _fill_in_stream_types(con: duckdb.DuckDBPyConnection, home: Home) -> None:
    """A store made before `ingest_log.stream_types` was recorded gets it from the archive, once."""
    entries = [r[0] for r in con.execute(
        "SELECT entry_idx FROM inorder.ingest_log WHERE kind = 'batch' AND status = 'archived' "
        "AND stream_types IS NULL").fetchall()]
    files = [str(home.archived(i)) for i in entries if home.archived(i).exists()]
    if not files:
        return
    con.execute("""UPDATE inorder.ingest_log l SET stream_types = m.types
                   FROM (SELECT entry_idx, map(list(stream_type), list(n)) AS types
                         FROM (SELECT a.entry_idx, coalesce(a.stream_type, '') AS stream_type, count(*) AS n
                               FROM read_parquet(?) a GROUP BY ALL) GROUP BY entry_idx) m
                   WHERE l.entry_idx = m.entry_idx AND l.stream_types IS NULL""", [files])


def _fill_in_seq_ranges(con: duckdb.DuckDBPyConnection, home: Home) -> None:
    """Archived batches without `ingest_seq_ranges` rows (a store made before they were recorded) get them
    from the archive, once: the copies of a message they hold must be found like any other batch's."""
    entries = [r[0] for r in con.execute(
        "SELECT l.entry_idx FROM inorder.ingest_log l WHERE l.kind = 'batch' AND l.status = 'archived' "
        "AND l.normalised > 0 AND l.entry_idx NOT IN (SELECT r.entry_idx FROM inorder.ingest_seq_ranges r)"
    ).fetchall()]
    files = [str(home.archived(i)) for i in entries if home.archived(i).exists()]
    if files:
        con.execute("INSERT INTO inorder.ingest_seq_ranges (entry_idx, stream_id, min_seq, max_seq) "
                    "SELECT a.entry_idx, a.stream_id, min(a.seq), max(a.seq) FROM read_parquet(?) a GROUP BY ALL",
                    [files])


class Store:
    """A connection to the read store, holding the writer lock for its lifetime."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lock_fd: int | None, home: Home, read_only: bool) -> None:
        self.con = con
        self._lock_fd = lock_fd
        self._home = home
        self._read_only = read_only
        self.versions: dict[str, ViewVersion] = {}  # the views' code against what built their rows (a writer's)

    @property
    def home(self) -> Home:
        """The home whose store this is (its archive, for a check that reads archived messages)."""
        return self._home

    @classmethod
    def open(cls, home: Home, views: Iterable[View], adding: Iterable[str] = ()) -> "Store":
        """Take the writer lock (waiting up to `home.lock_wait_seconds`) and open the store. Views the store
        does not hold are refused (ViewSetMismatch) before anything is written, unless `adding` names them."""
        views = list(views)
        home.ensure()
        lock_fd = take_lock(home.database.with_suffix(".lock"), home.lock_wait_seconds,
                            f"another inorder run is writing {home.database}; try again when it ends")
        try:
            con = connect(home.database, read_only=False, wait_seconds=home.file_wait_seconds,
                          memory_limit=home.memory_limit)
            try:
                check_view_set(con, views, tuple(adding))
            except BaseException:
                con.close()
                raise
            con.execute(ENGINE_DDL)
            for table in KEYLESS_STATE_TABLES:  # made with a PRIMARY KEY by older code
                drop_primary_key(con, "inorder", table)
            versions = reconcile(con, views)
            _fill_in_stream_types(con, home)
            _fill_in_seq_ranges(con, home)
            mark_superseded_malformed(con)  # a store whose re-ingests predate the marks
        except BaseException:
            os.close(lock_fd)
            raise
        store = cls(con, lock_fd, home, False)
        store.versions = versions
        return store

    @classmethod
    def open_read_only(cls, home: Home, views: Iterable[View] | None = None) -> "Store":
        """A reader's connection: no writer lock, and it never writes (checks, logs, metadata). With
        `views`, loaded views the store does not hold are refused (ViewSetMismatch), as `open` does."""
        if not home.database.exists():
            raise FileNotFoundError(f"no read store at {home.database}: run `inorder run` first")
        con = connect(home.database, read_only=True, wait_seconds=home.file_wait_seconds,
                      memory_limit=home.memory_limit)
        if views is not None:
            try:
                check_view_set(con, list(views))
            except BaseException:
                con.close()
                raise
        return cls(con, None, home, True)

    @contextmanager
    def released(self, writer: bool = False) -> Iterator[None]:
        """Let go of the DuckDB file for the block (the Spark work of a pass), keeping the writer lock,
        so readers can open the store meanwhile; then open it again (waiting for them if need be).
        With `writer`, let go of the writer lock too, and take it back after the block (waiting for the
        run that took it meanwhile to end). Nothing may be uncommitted: temporary tables do not survive."""
        self.con.close()
        let_go = writer and self._lock_fd is not None
        if let_go:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        try:
            yield
        finally:
            if let_go:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self.con = connect(self._home.database, read_only=self._read_only,
                               wait_seconds=self._home.file_wait_seconds, memory_limit=self._home.memory_limit)

    def close(self) -> None:
        crash_point("store.close")  # closing checkpoints the WAL into the database file
        self.con.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All or nothing: commit when the block ends, roll back when it raises."""
        with transaction(self.con, crash="store.commit") as con:
            yield con

    def last_logical_time_us(self) -> int | None:
        row = self.con.execute("SELECT max(received_at) FROM inorder.ingest_log").fetchone()
        return us_from_utc(row[0])

    def next_entry_idx(self) -> int:
        return self.con.execute("SELECT coalesce(max(entry_idx), 0) + 1 FROM inorder.ingest_log").fetchone()[0]
