"""A real, throwaway PostgreSQL server for the tests: `initdb` and `pg_ctl` in a temporary
folder, listening on a free loopback port, stopped (and the folder removed) at the end.

As root (CI), the server runs as the `postgres` user, since `initdb` refuses root. The binaries
come from INORDER_PG_BIN, `pg_config --bindir`, or Debian's /usr/lib/postgresql/<version>/bin;
`scripts/setup.sh` installs Debian's `postgresql` where it can.

    python -m tests.postgres_server COMMAND…  runs COMMAND with INORDER_TEST_POSTGRES naming a server of its own
(`make mutation`: one server for every mutant's test run, not one each).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def server_binaries() -> Path:
    candidates = [os.environ.get("INORDER_PG_BIN", "")]
    if shutil.which("initdb"):
        candidates.append(str(Path(shutil.which("initdb")).parent))
    if shutil.which("pg_config"):
        candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/setup.sh as root, "
                              "`apt-get install postgresql`, or set INORDER_PG_BIN")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """Start with `start()`, stop with `stop()`; `dsn` is a libpq connection string to its `postgres` database."""

    def __init__(self) -> None:
        self.bin = server_binaries()
        self.folder = Path(tempfile.mkdtemp(prefix="inorder-pg-"))
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root, and there is no `postgres` user to run the server "
                                          "(Debian's postgresql package creates it)") from None
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=10"

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as_user, *args], capture_output=True, text=True)
        if result.returncode:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise PostgresUnavailable(f"{' '.join(args[:2])} failed: {result.stderr.strip()}\n{tail}")

    def start(self) -> "PostgresServer":
        data = self.folder / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-instructions")
        # a test server need not survive a crash of the machine: no fsync, no synchronous commit
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c max_connections=50"
                   " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.folder / "server.log"), "-o", options,
                  "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    with PostgresServer() as server:
        sys.exit(subprocess.run(sys.argv[1:], env={**os.environ, "INORDER_TEST_POSTGRES": server.dsn}).returncode)
