"""The `inorder` command as the CLI tests run it: in a clean environment, and through one runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INORDER = str(Path(sys.executable).with_name("inorder"))
REPO = Path(__file__).resolve().parents[1]


# the test run's own settings (tests/conftest.py): a quick-starting JVM, no warm Spark server started by a run (its
# pytest process may hold the classic `spark` session), and an idle server's stop soon after its test
RUN_DEFAULTS = ("INORDER_SPARK_CONF", "INORDER_SPARK_WARM", "INORDER_SPARK_IDLE_MINUTES")


def clean_environment(home: str | os.PathLike | None = None, views: str | None = None, *,
                      path: tuple[str | os.PathLike, ...] = (), as_a_user: bool = False,
                      **variables: str | None) -> dict[str, str]:
    """This process's environment without the INORDER_* and DAGSTER_* settings a developer's shell may hold
    (debugging, PostgreSQL, a Dagster instance), but with the test run's defaults of tests/conftest.py (RUN_DEFAULTS);
    `as_a_user`, with only its quick-starting JVM: a user's defaults (warm by default, a server's idle stop). Then
    INORDER_HOME, INORDER_VIEWS, `path` ahead on Python's path, and `variables`, where given (None: unset)."""
    kept = ("INORDER_SPARK_CONF",) if as_a_user else RUN_DEFAULTS
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INORDER_", "DAGSTER_")) or k in kept}
    if home is not None:
        env["INORDER_HOME"] = str(home)
    if views is not None:
        env["INORDER_VIEWS"] = views
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {k: v for k, v in {**env, **variables}.items() if v is not None}


def clean_os_environ(monkeypatch, *, as_a_user: bool = False) -> None:
    """This process's os.environ made clean_environment(as_a_user=...) for the test: for commands run in process."""
    for name in set(os.environ) - set(clean_environment(as_a_user=as_a_user)):
        monkeypatch.delenv(name)


def inorder(env: dict[str, str], *args: str, code: int = 0, cwd: str | os.PathLike | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """`inorder ARGS` run to its end; it must exit with `code`, or the test fails showing what it printed."""
    done = subprocess.run([INORDER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == code, \
        f"`inorder {' '.join(args)}` exited {done.returncode}, not {code}\n{done.stdout}\n{done.stderr}"
    return done


def assert_started_no_server(home: str | os.PathLike, done: subprocess.CompletedProcess) -> None:
    """A command refused before its run began: no Spark server notice on the terminal, and none recorded for the
    home (a refused run must not leave one idling)."""
    from pipelines.spark.server import ServerFiles

    assert "Spark server" not in done.stderr and ServerFiles.of(Path(home)).read_state() is None, done.stderr
