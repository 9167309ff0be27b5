"""A loopback Spark cluster from pyspark's own distribution: a standalone master, workers and a
Spark Connect server on 127.0.0.1, for running inorder (and its cluster test) on real executors.

    python scripts/cluster.py start|stop|status      (scripts/cluster.sh does the same)

Every daemon runs in its own process group; its group id is recorded in
`$INORDER_CLUSTER_DIR/cluster.json` (default `.inorder/cluster`), and `stop` ends exactly those
groups (executors and Python workers are in their worker's group). Beside it: `logs/`, the
executors' `work/` folders and `events/`, the Connect server's Spark event log.

The Connect server is an application on the standalone master, with dynamic allocation from
zero executors: while idle it holds no cores, so a `spark://` application started after it
gets the workers, and an `sc://` query gets executors on the same workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.spark.class_archive import spark_home
from pipelines.spark.server import LOOPBACK as HOST
from pipelines.spark.server import end_groups, free_port, group_alive, port_open

SPARK_HOME = spark_home()
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Short-lived JVMs on a small machine: C1 only and the serial collector halve start-up CPU
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Connect server: no executors while idle, executors released a while after the last query
CONNECT_CONF = {
    "spark.executor.extraJavaOptions": QUICK_JVM,
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.shuffleTracking.enabled": "true",
    "spark.dynamicAllocation.minExecutors": "0",
    "spark.dynamicAllocation.executorIdleTimeout": "20s",
    "spark.dynamicAllocation.shuffleTracking.timeout": "20s",
    "spark.executor.cores": "1",
    "spark.executor.memory": "1g",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
}


def event_log_conf(folder: Path) -> dict[str, str]:
    """Spark event logs (plain JSON lines, one file per application) in `folder`: what ran, and where."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": folder.resolve().as_uri(),
            "spark.eventLog.compress": "false"}


@dataclass
class Cluster:
    """Master, workers and Connect server under `folder` (logs, work dirs, cluster.json)."""

    folder: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1536m"
    python: str = sys.executable
    state: dict = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> "Cluster":
        folder = Path(os.environ.get("INORDER_CLUSTER_DIR") or ".inorder/cluster").resolve()
        cluster = cls(folder)
        cluster.load()
        return cluster

    @property
    def state_file(self) -> Path:
        return self.folder / "cluster.json"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.state['master_port']}"

    @property
    def connect_url(self) -> str:
        return f"sc://{HOST}:{self.state['connect_port']}"

    def load(self) -> None:
        self.state = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    def _save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=2))

    def alive(self) -> dict[str, bool]:
        return {name: group_alive(pgid) for name, pgid in self.state.get("pids", {}).items()}

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=HOST, SPARK_LOG_DIR=str(self.folder / "logs"),
                   SPARK_PID_DIR=str(self.folder), SPARK_DAEMON_MEMORY="512m", PYSPARK_PYTHON=self.python,
                   PYSPARK_DRIVER_PYTHON=self.python, SPARK_CONF_DIR=str(self.folder / "conf"),
                   SPARK_DAEMON_JAVA_OPTS=QUICK_JVM)
        for name in ("SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY"):
            env.pop(name, None)
        return env

    def _launch(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / "logs" / f"{name}.log", "ab")
        with log:  # the child keeps its own descriptor
            process = subprocess.Popen(argv, cwd=self.folder, env=self._env(), stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.state.setdefault("pids", {})[name] = process.pid  # its own group: pgid == pid
        self._save()

    def start(self, timeout: float = 120.0) -> None:
        if any(self.alive().values()):
            raise RuntimeError(f"a cluster is already running from {self.folder} (stop it first)")
        for sub in ("logs", "conf", "work", "events"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        ports = {"master_port": free_port(), "master_ui_port": free_port(), "connect_port": free_port()}
        self.state = {**ports, "pids": {}, "python": self.python}
        self._save()
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        try:
            self._launch("master", [spark_class, MASTER_CLASS, "--host", HOST, "--port", str(ports["master_port"]),
                                    "--webui-port", str(ports["master_ui_port"])])
            self._wait(lambda: port_open(ports["master_port"]), timeout, "the master to listen")
            for i in range(1, self.workers + 1):
                self._launch(f"worker-{i}", [
                    spark_class, WORKER_CLASS, "--host", HOST, "--cores", str(self.worker_cores),
                    "--memory", self.worker_memory, "--webui-port", str(free_port()),
                    "--work-dir", str(self.folder / "work" / f"worker-{i}"), self.master_url])
            self._wait(lambda: self.alive_workers() >= self.workers, timeout, f"{self.workers} workers to register")
            conf = {**CONNECT_CONF, "spark.connect.grpc.binding.address": HOST,
                    "spark.connect.grpc.binding.port": str(ports["connect_port"]),
                    **event_log_conf(self.folder / "events")}
            argv = [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", self.master_url,
                    "--driver-memory", "1g", "--driver-java-options", QUICK_JVM]
            for key, value in conf.items():
                argv += ["--conf", f"{key}={value}"]
            self._launch("connect", argv)
            self._wait(lambda: port_open(ports["connect_port"]), timeout, "the Connect server to listen")
        except BaseException:
            self.stop()
            raise

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [name for name, up in self.alive().items() if not up]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}; see {self.folder / 'logs'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}; see {self.folder / 'logs'}")
            time.sleep(0.3)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.state['master_ui_port']}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self, timeout: float = 20.0) -> list[str]:
        """SIGTERM every recorded process group, SIGKILL what is left after `timeout`; returns their names."""
        pids = self.state.get("pids", {})
        stopped = {name: pgid for name, pgid in pids.items() if group_alive(pgid)}
        end_groups(list(stopped.values()), timeout)
        if self.state_file.exists():
            self.state_file.unlink()
        self.state = {}
        return list(stopped)

    def describe(self) -> str:
        if not self.state:
            return f"no cluster in {self.folder}"
        alive = self.alive()
        lines = [f"spark master:   {self.master_url}   (UI http://{HOST}:{self.state['master_ui_port']}, "
                 f"{self.alive_workers()} alive workers)",
                 f"spark connect:  {self.connect_url}",
                 f"python:         {self.state.get('python')}",
                 f"logs:           {self.folder / 'logs'}"]
        lines += [f"  {name:<10} pid {pid:<8} {'running' if alive[name] else 'exited'}"
                  for name, pid in self.state.get("pids", {}).items()]
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    cluster = Cluster.from_env()
    if command == "start":
        started = time.perf_counter()
        cluster.start()
        print(f"started in {time.perf_counter() - started:.1f}s\n{cluster.describe()}")
        print(f"\nexport INORDER_SPARK_MASTER={cluster.master_url}   # or {cluster.connect_url}")
    elif command == "stop":
        stopped = cluster.stop()
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    elif command == "status":
        print(cluster.describe())
        return 0 if cluster.state and all(cluster.alive().values()) else 1
    else:
        print("usage: cluster.py start|stop|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
