"""scripts/setup.sh installs only when the venv is not current: run on a copy of the repository's
files whose venv's python only records how it was called (nothing is installed anywhere)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_setup_installs_once_then_skips_until_the_lock_changes(tmp_path):
    for name in ("scripts/setup.sh", "requirements.lock", "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    calls = tmp_path / "calls.log"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("python", "inorder"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        (bin_dir / tool).chmod(stat.S_IRWXU)
    tools = tmp_path / "tools"  # a java that answers: the script never tries to install one here
    tools.mkdir()
    (tools / "java").write_text("#!/bin/sh\nexit 0\n")
    (tools / "java").chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
           "INORDER_PG_BIN": "/nonexistent"}  # no PostgreSQL lookup or install: not what this tests

    def setup() -> list[str]:
        calls.write_text("")
        done = subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
        return calls.read_text().splitlines()

    # every time: the project's bytecode (up-to-date files left as they are), Spark's classes (made when missing for
    # this Java and these jars)
    always = ["python -m compileall -q -j 0 pipelines inorder assets resources views demos shop tests",
              "python -m pipelines.spark.class_archive"]
    assert setup() == ["python -m pip install -q --upgrade pip==26.3",
                       "python -m pip install -q -r requirements.lock",
                       "python -m pip install -q --no-deps -e .", *always]
    assert setup() == always  # current: nothing installed, nothing printed
    with open(tmp_path / "requirements.lock", "a") as lock:
        lock.write("# a changed pin\n")
    assert len(setup()) == 5
    assert setup() == always
