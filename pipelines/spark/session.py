"""The Spark session: local[*] by default, or any master / Spark Connect endpoint by configuration.

With no master configured, a run uses its home's warm Spark Connect server when one is up
(`inorder spark start`, pipelines/spark/server.py) and starts no JVM of its own.

Where driver and executors differ (a `spark://`, YARN or Kubernetes master, or any Spark Connect
endpoint), nothing assumes they share a process, a disk or an installed copy of inorder:
`ship_code` sends the engine's code with the session, and `archive_shared` says whether the
executors can read the archive's files themselves (pipelines/engine/spark_pass.py ships the messages
from the driver when they cannot).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import os
import re
import sys
import tempfile
import threading
import time
import uuid
import warnings
import weakref
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from pipelines import faults
from pipelines.config import Settings
from pipelines.spark.server import (ServerFiles, ServerState, running_state, server_for_run, start_notice,
                                    started_ahead, warm_choice)
from pipelines.spark.settings import CONNECT_SESSION_CONF, DEFAULT_CONF, LOCAL_WORKERS_CONF, driver_java_options
from pipelines.store.versions import own_modules

if TYPE_CHECKING:
    from pipelines.store.database import Home
    from pipelines.view import View

# the engine's package runs on executors (the walk), beside the view modules (their handlers; see
# pipelines/registry.py); nothing there imports Dagster
# the engine, and the package of the view author's one import (`from inorder import …`, inorder/__init__.py)
ENGINE_PACKAGES = ("pipelines", "inorder")
# what the JVM and Spark print on the JVM's stderr as it starts, whatever log4j says (INORDER_DEBUG=1 shows it)
JVM_START_NOTICE = re.compile(rb"^(WARNING: Using incubator modules|Setting default log level|To adjust logging level)")
# a local session's driver binds to loopback only (what SPARK_LOCAL_IP=127.0.0.1 did, without the environment)
LOCAL_DRIVER_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


class _Facts:
    """What this module knows of objects it does not own (sessions, Spark contexts), kept here rather than
    as attributes patched onto them: keyed by identity (pyspark's objects need not be hashable), and
    forgotten as the object goes."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref, object]] = {}

    def get(self, holder: object, default: object = None) -> object:
        item = self._items.get(id(holder))
        return item[1] if item is not None and item[0]() is holder else default

    def __contains__(self, holder: object) -> bool:
        return self.get(holder, self) is not self

    def __setitem__(self, holder: object, value: object) -> None:
        key = id(holder)
        self._items[key] = (weakref.ref(holder, lambda _, key=key: self._items.pop(key, None)), value)


_WARM = _Facts()  # a session on the home's warm server: that server's files
_SHIPPED = _Facts()  # a session (Connect) or Spark context (classic): the name of the code zip shipped to it
_INFERRED = _Facts()  # a session: the schema Spark inferred for each Parquet footer it read (read_parquet)


@contextlib.contextmanager
def pandas_notice_quiet() -> Iterator[None]:
    """pyspark warns about pandas 3 (a FutureWarning) whenever it checks pandas' version: on importing
    some of its modules, and on each `mapInArrow`. inorder exchanges Arrow, not pandas: the notice is
    dropped in the block only (the process's warning filters are left as they were)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
        yield


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None, home: "Home | None" = None,
                  views: Sequence["View"] = ()) -> SparkSession:
    """Get (or reuse) the session. `master` is `local[*]`, `spark://host:port`, `yarn`, `k8s://…` or `sc://…`.

    Read from the home's settings (INORDER_SPARK_MASTER) when not given; when that is unset too, the home's
    warm server, started when none is up (INORDER_SPARK_WARM=0: `local[*]` then). Settings: DEFAULT_CONF, then INORDER_SPARK_CONF, then `conf`. A Spark Connect session takes only the runtime SQL settings (`spark.sql.*`) of
    DEFAULT_CONF and INORDER_SPARK_CONF, and CONNECT_SESSION_CONF; the server's own configuration decides the rest.
    """
    settings = home.settings if home is not None else Settings()
    master = master or settings.spark_master
    warm_files = None if master or home is None else ServerFiles.of(home.root)
    warm = warm_files and server_for_run(warm_files, settings)
    master = master or (_code_version_session(warm, home, views) if warm else "local[*]")
    if master.startswith("sc://"):
        # the server's JVM started with the rest (the home's warm server with INORDER_SPARK_CONF): a session
        # asked to set it would warn on the terminal at every run that it cannot
        builder = SparkSession.builder.remote(master)
        defaults = {**_runtime_sql(DEFAULT_CONF), **CONNECT_SESSION_CONF}
        user_conf = _runtime_sql(settings.spark_conf)
    else:
        builder = SparkSession.builder.master(master).appName("inorder")
        defaults = DEFAULT_CONF
        if master.startswith("local"):
            defaults = {**DEFAULT_CONF, **LOCAL_WORKERS_CONF}
            if "SPARK_LOCAL_IP" not in os.environ:
                defaults = {**defaults, **LOCAL_DRIVER_CONF}
        user_conf = settings.spark_conf
    chosen = {**defaults, **user_conf, **(conf or {})}
    if faults.crash_pid() and not master.startswith("sc://"):  # a crash point on an executor kills this driver
        chosen["spark.executorEnv.INORDER_CRASH_PID"] = str(faults.crash_pid())
    from pipelines.registry import recorded_views_folder

    views_folder = recorded_views_folder(home) if home is not None else None
    if views_folder is not None and master.startswith("local"):  # the Python workers import the view modules
        chosen["spark.executorEnv.PYTHONPATH"] = str(views_folder)  # (a cluster and a warm server get the code zip)
    quiet = not master.startswith("sc://") and not settings.debug  # a Connect session starts no JVM here
    if not master.startswith("sc://"):  # a driver JVM starts here
        chosen["spark.driver.extraJavaOptions"] = driver_java_options(chosen.get("spark.driver.extraJavaOptions"), quiet)
    for key, value in chosen.items():
        builder = builder.config(key, value)
    with pandas_notice_quiet(), _jvm_start_notices_dropped() if quiet else contextlib.nullcontext():
        session = builder.getOrCreate()
    if not master.startswith("sc://"):
        session.sparkContext.setLogLevel("ERROR")
        _python_workers_run_this_python(session)
    if warm and session not in _WARM:
        # the session's Python daemon runs in the folder of its artifacts: this file there names the
        # process it serves, for the supervisor to end the daemon once the process has exited
        session.addArtifacts(str(warm_files.client), file=True)
        _WARM[session] = warm_files
    _set_shuffle_partitions(session)
    return session


def _runtime_sql(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of `conf` a Spark Connect session takes: the runtime SQL ones (`spark.sql.*`)."""
    return {k: v for k, v in conf.items() if k.startswith("spark.sql.")}


def _python_workers_run_this_python(session: SparkSession) -> None:
    """A classic session's Python workers (and a cluster's executors) run this interpreter unless
    PYSPARK_PYTHON names another. pyspark reads that variable once, into its context's `pythonExec`,
    which every function it sends to the workers carries: set there, not in the process's environment."""
    if not os.environ.get("PYSPARK_PYTHON"):
        session.sparkContext.pythonExec = sys.executable


LOCAL_SHUFFLE_PARTITIONS = 4  # one machine: a few tasks per core of a small one, each with a Python worker
TASKS_PER_CORE = 2  # Spark's tuning guide: 2-3 tasks per core, so a slow partition does not leave cores idle
# what says how many cores a cluster gives the application, read from the session's settings
CORES_SETTINGS = ("spark.sql.shuffle.partitions", "spark.default.parallelism", "spark.cores.max",
                  "spark.executor.instances", "spark.executor.cores", "spark.dynamicAllocation.enabled",
                  "spark.dynamicAllocation.maxExecutors")


def planned_shuffle_partitions(conf: Mapping[str, str | None], local: bool, live_cores: int | None = None) -> int:
    """How many partitions a session's shuffles (and the pass's walk) get. `conf` holds the settings of
    CORES_SETTINGS the user (or the cluster's spark-defaults.conf) set, None for the others; `live_cores`
    is the cores the cluster's executors hold now, where Spark says (a classic session).

    The user's `spark.sql.shuffle.partitions` wins. A local session keeps LOCAL_SHUFFLE_PARTITIONS. On
    a cluster: `spark.default.parallelism` when set, else TASKS_PER_CORE times the cores the settings
    give the application (`spark.cores.max`, or executors times `spark.executor.cores`; with dynamic
    allocation, its `maxExecutors`), else times `live_cores`, else LOCAL_SHUFFLE_PARTITIONS."""
    def number(key: str) -> int | None:
        value = conf.get(key)
        return int(value) if value not in (None, "") else None

    if number("spark.sql.shuffle.partitions"):
        return number("spark.sql.shuffle.partitions")
    if local:
        return LOCAL_SHUFFLE_PARTITIONS
    if number("spark.default.parallelism"):
        return number("spark.default.parallelism")
    dynamic = (conf.get("spark.dynamicAllocation.enabled") or "").strip().lower() == "true"
    executors = number("spark.dynamicAllocation.maxExecutors" if dynamic else "spark.executor.instances")
    cores = number("spark.cores.max") or (executors * (number("spark.executor.cores") or 1) if executors else None)
    cores = cores or live_cores
    return TASKS_PER_CORE * cores if cores else LOCAL_SHUFFLE_PARTITIONS


def _set_shuffle_partitions(spark: SparkSession) -> None:
    """Sets the session's `spark.sql.shuffle.partitions` to `planned_shuffle_partitions`, unless the user set it."""
    conf = {key: spark.conf.get(key, None) for key in CORES_SETTINGS}
    if conf["spark.sql.shuffle.partitions"]:
        return
    # a classic session's default parallelism is its executors' cores (at least 2), once they registered
    live = None if is_connect(spark) or is_local(spark) else spark.sparkContext.defaultParallelism
    spark.conf.set("spark.sql.shuffle.partitions", str(planned_shuffle_partitions(conf, is_local(spark), live)))


def _code_version_session(warm: ServerState, home: "Home", views: Sequence["View"]) -> str:
    """The warm server's endpoint, with the session of this code version: every run of the same engine
    and views (the code zip it ships) reattaches to one session, whose Python workers stay up with that
    code imported (a pass's second in a new session); edited code gets a session, and workers, of its own."""
    version = uuid.uuid5(uuid.NAMESPACE_URL, f"inorder:{warm.endpoint}:{warm.started_at}:{code_zip(home, views).name}")
    return f"{warm.endpoint}/;session_id={version}"


def starting_line(home: "Home") -> str | None:
    """The progress line while a session is being made (a JVM start takes seconds, or a warm server's
    session is opened), or None when this process has one already. Names what spark_session() uses
    when it is given no master."""
    if SparkSession.getActiveSession() is not None:
        return None
    settings = home.settings
    if settings.spark_master:
        return f"starting Spark ({settings.spark_master})…"
    warm = running_state(ServerFiles.of(home.root))
    choice = warm_choice(warm, settings)
    if choice == "use":
        return f"opening a session on the warm Spark server ({warm.endpoint})…"
    if choice == "local":
        return "starting Spark (local[*])…"
    if started_ahead(ServerFiles.of(home.root)):
        return "waiting for the Spark server this run is starting…"
    return start_notice(choice, settings)


def mark_used(spark: SparkSession) -> None:
    """After a pass: a warm server's idle time counts from now."""
    files = _WARM.get(spark)
    if files is not None:
        files.mark_used()


@contextlib.contextmanager
def _jvm_start_notices_dropped() -> Iterator[None]:
    """A JVM started in the block gets a pipe for its stderr instead of ours; a thread forwards what
    comes through it to our stderr, for the JVM's whole life, except JVM_START_NOTICE."""
    read_end, write_end = os.pipe()
    ours = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_end, 2)  # what the JVM inherits
    os.close(write_end)
    threading.Thread(target=_forward_jvm_stderr, args=(read_end, ours), daemon=True, name="inorder-jvm-stderr").start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(ours, 2)  # this process writes to its own stderr again; the JVM keeps the pipe


def _forward_jvm_stderr(read_end: int, ours: int) -> None:
    with os.fdopen(read_end, "rb") as jvm, os.fdopen(ours, "wb", buffering=0) as stderr:
        for line in jvm:
            if not JVM_START_NOTICE.match(line):
                stderr.write(line)


STAGE_POLLER_JOIN_SECONDS = 2.0  # a poller wakes every 0.5 s to see it should stop


@contextlib.contextmanager
def stage_progress(label: str, say: Callable[[str], None], every_seconds: float = 2.0) -> Iterator[None]:
    """While the block runs, say where Spark's newest job is (`label: stage 3/5 (120/200 tasks)`), when
    it changed and at most every `every_seconds`. Only a classic session has a status tracker: with
    Spark Connect (or while no session has started) nothing is said. The block is a pass's Spark work."""
    stop = threading.Event()

    def poll() -> None:
        said, said_at = None, time.monotonic()
        while not stop.wait(0.5):
            if time.monotonic() - said_at < every_seconds:
                continue
            try:
                line = _stage_line()
            except Exception:  # a progress line is never worth a failed run (the JVM may be going away)
                continue
            if line and line != said:
                say(f"{label}: {line}")
                said, said_at = line, time.monotonic()

    thread = threading.Thread(target=poll, daemon=True, name="inorder-spark-stages")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        # not joined for good: a Ctrl-C that lands while this thread is inside logging's lock leaves the lock held,
        # and a poller saying a line then waits on it forever; a daemon left behind ends with the process
        thread.join(timeout=STAGE_POLLER_JOIN_SECONDS)


def _stage_line() -> str | None:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context  # the classic session's, once one has started
    if context is None:
        return None
    tracker = context.statusTracker()
    jobs = tracker.getActiveJobsIds()
    job = tracker.getJobInfo(max(jobs)) if jobs else None
    if job is None:
        return None
    stages = sorted(job.stageIds)
    active = [info for info in map(tracker.getStageInfo, tracker.getActiveStageIds())
              if info is not None and info.stageId in stages]
    if not active:
        return None
    done, tasks = sum(info.numCompletedTasks for info in active), sum(info.numTasks for info in active)
    return f"stage {stages.index(min(info.stageId for info in active)) + 1}/{len(stages)} ({done}/{tasks} tasks)"


def read_parquet(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """`spark.read.parquet(*paths)`, given the schema Spark inferred the last time this session read a file with
    the same footer (the first path's columns and key-value metadata, read here in a millisecond). Spark infers a
    schema with a job of its own, from that footer alone: 0.15 s on a warm JVM and a second on a fresh one, for
    each of a pass's two reads (its state and its archived messages), whose footers repeat from pass to pass.
    A footer seen for the first time is inferred once: the frame read with its schema is not inferred again when
    it runs (a Spark Connect plan would be, once per analysis)."""
    footer = pq.ParquetFile(paths[0]).metadata
    columns = str(footer.schema).partition("\n")[2]  # the schema's text; its first line names the Python object
    key = (columns, tuple(sorted((footer.metadata or {}).items())))
    known = _INFERRED.get(spark)
    if known is None:
        known = _INFERRED[spark] = {}
    if key not in known:
        known[key] = spark.read.parquet(*paths).schema
    return spark.read.schema(known[key]).parquet(*paths)


def shuffle_partitions(spark: SparkSession) -> int:
    """The session's shuffle partitions (`planned_shuffle_partitions` for a session of `spark_session`)."""
    return int(spark.conf.get("spark.sql.shuffle.partitions") or LOCAL_SHUFFLE_PARTITIONS)


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def is_local(spark: SparkSession) -> bool:
    """Do driver and executors share this machine's files? A classic session on a `local[…]` master
    (its executors are threads of this process), or a session of the home's warm server (on loopback)."""
    if is_connect(spark):
        return spark in _WARM
    return spark.sparkContext.master.startswith("local")


def archive_shared(spark: SparkSession, settings: Settings) -> bool:
    """Can the executors read the archive's files at the driver's paths?

    INORDER_ARCHIVE_SHARED=1 says so (the archive is on storage every executor mounts at the same
    path), 0 says not; unset (or `auto`), only a local session can."""
    return is_local(spark) if settings.archive_shared is None else settings.archive_shared


def files_shared(spark: SparkSession, home: "Home") -> bool:
    """Do the executors read and write a pass's scratch files at the driver's paths? A local session's
    do; a cluster's, when INORDER_ARCHIVE_SHARED=1 and the scratch folder was set (`scratch_set`:
    INORDER_SCRATCH) to storage they all mount at the same paths, the archive's, say. Then no state,
    message or output row passes through the driver."""
    return is_local(spark) or (archive_shared(spark, home.settings) and home.scratch_dir is not None)


def executor_sources(home: "Home", views: Sequence["View"] = ()) -> list[Path]:
    """The engine's package folders and the top-level packages (or single files) of the home's view modules and
    of the modules that decide `views`' rows (views a caller made itself, not loaded by the registry)."""
    from pipelines.registry import module_sources, top_level_sources

    engine = [Path(importlib.import_module(name).__file__).resolve().parent for name in ENGINE_PACKAGES]
    own = [name for view in views for name in own_modules(view)]
    return list(dict.fromkeys([*engine, *module_sources(home=home), *top_level_sources(own)]))


def code_zip(home: "Home", views: Sequence["View"] = ()) -> Path:
    """The executors' Python files (`executor_sources`) in one zip, named by its content (written once)."""
    files = [(source, path) for source in executor_sources(home, views)
             for path in (sorted(source.rglob("*.py")) if source.is_dir() else [source])]
    # zipped again only when a file changed: a run asks twice (its session's code version, then shipping)
    return _zipped(tuple((source, path, path.stat().st_mtime_ns, path.stat().st_size) for source, path in files))


@functools.lru_cache(maxsize=4)
def _zipped(files: tuple[tuple[Path, Path, int, int], ...]) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for source, path, _, _ in files:
            info = zipfile.ZipInfo(path.relative_to(source.parent).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    target = Path(tempfile.gettempdir()) / f"inorder-code-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(data)
        partial.replace(target)
    return target


def ship_code(spark: SparkSession, home: "Home", views: Sequence["View"] = ()) -> Path | None:
    """Send this process's copy of `pipelines/` and of the view modules to the executors, once per session.

    Executors then run the same handlers as the driver whether or not inorder is installed there.
    Skipped for classic local sessions (executors share this process), and when INORDER_SHIP_CODE=0
    (inorder is installed on every executor at the driver's version). A warm server gets the code:
    its Python workers were started for another process, with its INORDER_VIEWS and sys.path, and
    must run this process's copy of the views, edited or not since the server started (each Connect
    session has Python workers of its own, with its artifacts first on their path)."""
    ship = home.settings.ship_code
    if ship is False or (ship is None and not is_connect(spark) and is_local(spark)):
        return None
    holder = spark if is_connect(spark) else spark.sparkContext
    path = code_zip(home, views)
    if _SHIPPED.get(holder) != path.name:
        if is_connect(spark):
            spark.addArtifacts(str(path), pyfile=True)
        else:
            spark.sparkContext.addPyFile(str(path))
        _SHIPPED[holder] = path.name
    return path
