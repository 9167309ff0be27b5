"""A warm Spark for the embedded default: `inorder spark start|stop|status`.

`start` runs a local Spark Connect server from pyspark's own distribution, bound to 127.0.0.1, so
that runs of this home connect to it (pipelines/spark/session.py) instead of starting a JVM each. It is a
small supervisor process, detached in its own session, whose child is the server's JVM; the
supervisor stops the JVM (and its Python workers) on SIGTERM, or once no run has used it for the
idle timeout, and removes the state file on its way out.

Files, in HOME/spark/:
- server.json: the ServerState, written once the port accepts connections; no file, no server;
- last-used: its mtime is when a run last opened a session or finished a pass;
- clients/inorder-client-<pid>: one per process with a session on the server. The same file is
  uploaded to the session as an artifact, so it lands in the working folder of the session's Python
  daemon: that is how the supervisor finds, and ends, the daemon of a process that has exited
  (Spark 4.3 keeps every Connect session's daemon and workers until the JVM stops);
- server.log: the supervisor's lines and the JVM's output.

Linux /proc is read to find the JVM's Python daemons; elsewhere they stay until the server stops.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pipelines.config import Settings
from pipelines.spark.class_archive import spark_home
from pipelines.spark.settings import (CONNECT_SESSION_CONF, DEFAULT_CONF, LOCAL_WORKERS_CONF, WORKERS_DAEMON,
                                      driver_java_options)

LOOPBACK = "127.0.0.1"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_WAIT_SECONDS = 180.0
STOP_WAIT_SECONDS = 60.0
CLIENT_PREFIX = "inorder-client-"
# a session's Python daemon runs ours (pipelines/spark/daemon.py), or pyspark's where INORDER_SPARK_CONF says so
PYTHON_DAEMONS = (WORKERS_DAEMON.encode(), b"pyspark.daemon")
# a session's Python workers outlive its last run this long: the next run of the same code finds them
# warm; a session of code that changed since is let go after it (Spark 4.3 would keep them to the end)
SESSION_KEEP_SECONDS = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def group_alive(pgid: int) -> bool:
    """Is any process of the group running? The leader is reaped first when it is our child:
    an exited but unreaped leader (a zombie) would still count as a member."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_alive(pid: int) -> bool:
    """A zombie (exited, not yet reaped by a parent that may never reap it) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    return True


@functools.cache
def this_build() -> str:
    """What a server shares with the processes it serves: this interpreter (its venv: the pyspark whose
    jars the server runs, the packages its Python workers import) and inorder's own code. A run
    never uses a server of another build: it is replaced."""
    digest = hashlib.sha256()
    for package in ("pipelines", "inorder"):
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            for path in sorted(Path(folder).rglob("*.py")):
                digest.update(path.read_bytes())
    return f"{Path(sys.executable).absolute()} {digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class ServerState:
    """What server.json holds about a running server."""

    pid: int  # the supervisor's, leader of the server's process group
    jvm_pid: int
    port: int
    started_at: float  # epoch seconds
    idle_timeout_seconds: float
    log: str
    build: str = ""  # this_build() of the process that started it ("": a server of an older inorder)

    @property
    def endpoint(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"


@dataclass(frozen=True)
class ServerFiles:
    folder: Path

    @classmethod
    def of(cls, home_root: Path) -> "ServerFiles":
        return cls(home_root / "spark")

    @property
    def state(self) -> Path:
        return self.folder / "server.json"

    @property
    def last_used(self) -> Path:
        return self.folder / "last-used"

    @property
    def clients(self) -> Path:
        return self.folder / "clients"

    @property
    def client(self) -> Path:
        """This process's client file."""
        return self.clients / f"{CLIENT_PREFIX}{os.getpid()}"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    @property
    def start_lock(self) -> Path:
        return self.folder / "start.lock"

    def read_state(self) -> ServerState | None:
        """The state of this folder's server; None for none, half of one (a killed supervisor's), or one copied
        with the home from another folder (that server is the other home's, never this one's to use or stop)."""
        try:
            state = ServerState(**json.loads(self.state.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return state if Path(state.log).resolve() == self.log.resolve() else None

    def write_state(self, state: ServerState) -> None:
        partial = self.state.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(state), indent=2))
        partial.replace(self.state)  # readers never see half of it

    def names(self, supervisor_pid: int) -> bool:
        """Is the state file this supervisor's? Not once the home was deleted or moved, or another server took the folder."""
        state = self.read_state()
        return state is not None and state.pid == supervisor_pid

    def idle_seconds(self) -> float:
        try:
            return max(0.0, time.time() - self.last_used.stat().st_mtime)
        except FileNotFoundError:
            return 0.0

    def mark_used(self) -> None:
        self.last_used.touch()


def running_state(files: ServerFiles) -> ServerState | None:
    """The server's state when it is up: state file present, supervisor alive, port accepting."""
    state = files.read_state()
    if state is None or not process_alive(state.pid) or not port_open(state.port):
        return None
    return state


def register_client(files: ServerFiles) -> ServerState | None:
    """For a process about to open a session: the running server, with the process's client file
    made, or None (and no client file) when no server is up. The file is made before the server is
    checked, and the supervisor removes server.json before it checks for clients when it stops on
    idle, so a server is never stopped under a run that saw it up."""
    if not files.state.exists():
        return None
    files.clients.mkdir(parents=True, exist_ok=True)
    files.client.touch()
    state = running_state(files)
    if state is None:
        files.client.unlink(missing_ok=True)
        return None
    files.mark_used()
    return state


def warm_choice(running: ServerState | None, settings: Settings) -> str:
    """What a run about to open a session does, given the home's running server: "use" it (it is of this
    build), "start" one (none is up), "replace" it (it is of another inorder or venv), or "local" (none of
    this build is up and INORDER_SPARK_WARM is off: Spark of its own). The one decision the run and its
    progress line share."""
    if running is not None and running.build == this_build():
        return "use"
    if not settings.spark_warm:
        return "local"
    return "replace" if running is not None else "start"


def start_notice(choice: str, settings: Settings) -> str:
    """What a run says when it starts (or replaces) the home's server: the first run of a home says it once."""
    starting = {"replace": "replacing the Spark server of another inorder or venv", "start": "starting a Spark server"}
    return (f"{starting[choice]} for this home; it stops after {settings.spark_idle_minutes:g} minutes idle "
            "(INORDER_SPARK_IDLE_MINUTES; `inorder spark stop` stops it now)…")


_STARTING_AHEAD: set[Path] = set()  # the server folders this process is starting in a thread (start_ahead)


def start_ahead(files: ServerFiles, settings: Settings, refuse: Callable[[], object] = lambda: None) -> str | None:
    """For a run that will open a session on the home's server when none of its build is up: start it now, in a
    thread of this process, while the run imports Dagster and plans (a JVM start takes seconds, the imports and
    planning as long, on another core). The run's own server_for_run then queues on the start lock and finds the
    server up; a start that failed here is tried again, and reported, there. The notice to print, or None.
    `refuse` raises for a run that will be refused: it is called only when a server would start, so that a
    refused run leaves none idling, and a run that finds one up pays nothing for it."""
    choice = "local" if settings.spark_master else warm_choice(running_state(files), settings)
    if choice not in ("start", "replace"):
        return None
    refuse()

    def attempt() -> None:
        with contextlib.suppress(Exception):
            start(files, settings.spark_idle_minutes * 60)
        _STARTING_AHEAD.discard(files.folder)

    _STARTING_AHEAD.add(files.folder)
    threading.Thread(target=attempt, daemon=True, name="inorder-spark-start").start()
    return start_notice(choice, settings)


def started_ahead(files: ServerFiles) -> bool:
    return files.folder in _STARTING_AHEAD


def server_for_run(files: ServerFiles, settings: Settings) -> ServerState | None:
    """The home's warm server for a run about to open a session (warm_choice), with this process registered
    as its client; None when the run starts Spark of its own. A server of another build, or of a supervisor
    that died, is replaced."""
    state = register_client(files)
    choice = warm_choice(state, settings)
    if choice == "use":
        return state
    files.client.unlink(missing_ok=True)
    if choice == "local":
        return None
    start(files, settings.spark_idle_minutes * 60)
    state = register_client(files)
    if state is None:
        raise RuntimeError(f"the warm Spark server stopped as soon as it started (see {files.log})")
    return state


def start(files: ServerFiles, idle_timeout_seconds: float, wait_seconds: float = START_WAIT_SECONDS,
          build: str | None = None) -> tuple[ServerState, bool]:
    """Start the supervisor and wait until the server accepts connections; (state, False) when one of
    `build` (default this_build()) is running already: one of another build is stopped first.
    Concurrent starts queue on a lock file."""
    from pipelines.store.database import take_lock

    files.folder.mkdir(parents=True, exist_ok=True)
    lock = take_lock(files.start_lock, wait_seconds, f"another `inorder spark start` is running for {files.folder}")
    try:
        build = build or this_build()
        state = running_state(files)
        if state is not None and state.build == build:
            return state, False
        stop(files)  # of another build, or a killed supervisor's state file

        with open(files.log, "ab") as log:  # the supervisor keeps its own descriptor
            supervisor = subprocess.Popen(
                [sys.executable, "-m", "pipelines.spark.server", str(files.folder), str(idle_timeout_seconds), build],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)  # no terminal's Ctrl-C or hang-up reaches it, and `stop` ends the group
        deadline = time.monotonic() + wait_seconds
        while True:
            state = files.read_state()
            if state is not None and state.pid == supervisor.pid:
                return state, True
            if supervisor.poll() is not None:
                raise RuntimeError(f"the Spark Connect server did not start (exit {supervisor.returncode}): "
                                   f"{_last_line(files.log)} (see {files.log})")
            if time.monotonic() > deadline:
                os.killpg(supervisor.pid, signal.SIGTERM)
                raise TimeoutError(f"the Spark Connect server did not accept connections in {wait_seconds:.0f}s "
                                   f"(see {files.log})")
            time.sleep(0.1)
    finally:
        os.close(lock)


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else "no output"


def stop(files: ServerFiles, wait_seconds: float = STOP_WAIT_SECONDS) -> ServerState | None:
    """SIGTERM to the supervisor, which stops the JVM; waits until the group and the JVM's Python
    workers are gone (SIGKILL after `wait_seconds`). Returns the stopped server's state, or None."""
    state = files.read_state()
    if state is None or not process_alive(state.pid):
        files.state.unlink(missing_ok=True)
        return None
    end_groups([state.pid], wait_seconds)
    files.state.unlink(missing_ok=True)
    return state


def end_groups(pgids: list[int], wait_seconds: float) -> None:
    """SIGTERM to each process group; SIGKILL to what is left of them after `wait_seconds`."""
    for pgid in pgids:
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + wait_seconds
    while any(group_alive(pgid) for pgid in pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in filter(group_alive, pgids):
        os.killpg(pgid, signal.SIGKILL)


# --- the supervisor (python -m pipelines.spark.server FOLDER IDLE_SECONDS) ---------------------------


def _server_command(port: int, settings: Settings) -> list[str]:
    conf = {**DEFAULT_CONF, **LOCAL_WORKERS_CONF, **CONNECT_SESSION_CONF, **settings.spark_conf,
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
            # runs reattach to their code version's session (pipelines/spark/session.py): it lives as long as the server
            "spark.connect.session.manager.defaultSessionTimeout": "7d"}
    conf["spark.driver.extraJavaOptions"] = driver_java_options(conf.get("spark.driver.extraJavaOptions"),
                                                                quiet=not settings.debug)
    argv = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--name", "inorder-warm"]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def _server_env() -> dict[str, str]:
    # the Python workers run this interpreter: the venv inorder is installed in
    return {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": LOOPBACK}


def process_parents() -> dict[int, int]:
    """pid → parent pid of every process, from /proc (empty where there is none). A JVM's children are
    forked by many threads: no single thread's `children` list has them all."""
    parents = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    return parents


def _children(pid: int) -> list[int]:
    return [child for child, parent in process_parents().items() if parent == pid]


def own_children() -> set[int]:
    """This process's child processes."""
    return set(_children(os.getpid()))


def end_processes(pids: Iterable[int]) -> None:
    """SIGTERM to each of `pids` that is still there. Ctrl-C reaches a local Spark's JVM too, which pyspark
    starts ignoring SIGINT; one interrupted while it starts outlives the command unless it is ended."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def descendants(pid: int) -> list[int]:
    """Child processes, recursively (Spark's JVM and its Python workers), from one read of /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in process_parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _session_daemons(jvm_pid: int) -> Iterator[tuple[int, list[int], float]]:
    """(daemon pid, client pids, newest client mark time) for each Python daemon of the JVM serving
    a session inorder processes opened (their client files are in the session's artifact folder)."""
    for child in _children(jvm_pid):
        with contextlib.suppress(OSError, ValueError):
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            if not any(name in command for name in PYTHON_DAEMONS):
                continue
            folder = Path(f"/proc/{child}/cwd")  # the session's artifact folder
            marks = [path for path in folder.iterdir() if path.name.startswith(CLIENT_PREFIX)]
            if marks:
                yield (child, [int(m.name.removeprefix(CLIENT_PREFIX)) for m in marks],
                       max(m.stat().st_mtime for m in marks))


def _live_clients(files: ServerFiles, jvm_pid: int) -> int:
    """Ends the Python daemons (with their workers) of sessions no live client uses and none has
    opened for SESSION_KEEP_SECONDS (a session per code version: runs of the same code reuse its warm
    workers), and forgets clients that have exited; counts the live ones. A client's exit counts as
    its last use."""
    for daemon, clients, newest in _session_daemons(jvm_pid):
        if not any(map(process_alive, clients)) and time.time() - newest >= SESSION_KEEP_SECONDS:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon, signal.SIGTERM)  # the daemon leads its workers' group
    live = 0
    for path in files.clients.glob(f"{CLIENT_PREFIX}*") if files.clients.is_dir() else ():
        if process_alive(int(path.name.removeprefix(CLIENT_PREFIX))):
            live += 1
        else:
            path.unlink(missing_ok=True)
            files.mark_used()
    return live


def _say(message: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] supervisor {os.getpid()}: {message}", flush=True)


def serve(files: ServerFiles, idle_timeout_seconds: float, build: str, settings: Settings) -> int:
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: stopping.append(received))
    port = free_port()
    jvm = subprocess.Popen(_server_command(port, settings), env=_server_env(), stdin=subprocess.DEVNULL)  # our group, our log
    _say(f"started the JVM {jvm.pid} for sc://{LOOPBACK}:{port}, idle timeout {idle_timeout_seconds:g}s")
    tick = min(1.0, idle_timeout_seconds / 4)
    try:
        while not port_open(port):
            if stopping or jvm.poll() is not None:
                _say(f"the JVM exited ({jvm.returncode}) before accepting connections" if not stopping else "stopped")
                return 1
            time.sleep(0.1)
        _live_clients(files, jvm.pid)  # forget the clients of an earlier server
        files.mark_used()
        state = ServerState(os.getpid(), jvm.pid, port, time.time(), idle_timeout_seconds, str(files.log), build)
        files.write_state(state)
        _say("accepting connections")
        while True:
            time.sleep(tick)
            if stopping:
                _say(f"stopping on signal {signal.Signals(stopping[0]).name}")
                break
            if jvm.poll() is not None:
                _say(f"the JVM exited ({jvm.returncode})")
                return 1
            if not files.names(os.getpid()):  # no run would find it again, nor measure its idle time
                _say("stopping: its state file is gone (the home was deleted or moved) or names another server")
                break
            if _live_clients(files, jvm.pid) == 0 and files.idle_seconds() >= idle_timeout_seconds:
                files.state.unlink(missing_ok=True)  # first, so no new run picks the server (register_client)
                if _live_clients(files, jvm.pid) == 0:
                    _say(f"stopping: idle for {files.idle_seconds():.0f}s")
                    break
                files.write_state(state)  # a run registered meanwhile: serve it
        return 0
    finally:
        if files.names(os.getpid()):
            files.state.unlink(missing_ok=True)
        _stop_jvm(jvm)


def _stop_jvm(jvm: subprocess.Popen) -> None:
    """SIGTERM (Spark's shutdown hooks stop the Python daemons), SIGKILL after 30 s; then any of its
    Python daemons and workers still there (they lead process groups of their own)."""
    python_workers = descendants(jvm.pid)
    if jvm.poll() is None:
        jvm.terminate()
        try:
            jvm.wait(30)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
    for pid in python_workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _say("the JVM and its Python workers are gone")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the warm Spark server's supervisor (`inorder spark start` runs it)")
    p.add_argument("folder", type=Path)
    p.add_argument("idle_timeout_seconds", type=float)
    p.add_argument("build", help="this_build() of the process that starts it")
    args = p.parse_args(argv)
    return serve(ServerFiles(args.folder), args.idle_timeout_seconds, args.build, Settings.from_env())  # an edge


if __name__ == "__main__":
    sys.exit(main())
