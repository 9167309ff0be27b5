"""A class-data archive of Spark's driver JVM (Java's AppCDS), so that a JVM starts in about half the time.

A cold `inorder run` starts a JVM that loads and verifies some 20,000 classes before its first pass: about a
third of its CPU (docs/BENCHMARKS.md). `python -m pipelines.spark.class_archive` (scripts/setup.sh runs it) records
the classes a small real run loads into an archive; every later driver JVM of this Java and these Spark jars
maps them from it (session.py's local sessions, the warm server). The archive's name is a hash of the Java
binary and the jars, so a JVM is only ever given an archive made for it; a missing one costs nothing but the
speed, and Java ignores one that does not fit, silently (its `cds` log is off).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# quiet: a stale archive (Java or a jar updated in place) only costs the speed, never a line on the terminal
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def spark_home() -> Path:
    """The installed pyspark package folder: a whole Spark distribution (bin/, jars/), without importing it."""
    return Path(importlib.util.find_spec("pyspark").submodule_search_locations[0]).resolve()


def _java() -> Path | None:
    """The `java` that Spark's launcher runs (bin/spark-class: $JAVA_HOME/bin/java, else the one on PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home, "bin", "java")) if java_home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inorder"


def archive_path() -> Path | None:
    """Where the archive for this Java and these jars is kept (made or not), or None when there is no Java."""
    java, jars = _java(), spark_home() / "jars"
    if java is None:
        return None
    # Java refuses an archive whose class path files changed (size or time): so does the name
    facts = [(str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in [java, *sorted(jars.glob("*.jar"))]]
    return cache_dir() / f"spark-classes-{hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]}.jsa"


def java_options() -> str:
    """The driver JVM's options that map the archive, when it was made; else none (never an error: a JVM
    starts without it, say where there is no home folder to look in)."""
    try:
        path = archive_path()
        made = path is not None and path.exists()
    except (OSError, RuntimeError):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET_CDS}" if made else ""


def _wait_for_group(group: int, timeout_seconds: float) -> None:
    """Until every process of the group has exited."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the JVM recording Spark's classes was still running after {timeout_seconds:.0f}s")


def make(timeout_seconds: float = 300) -> Path | None:
    """Make the archive unless it is there: a small demo run in a throwaway home, with a cold local JVM that
    records the classes it loaded as it exits. Returns its path (None: no Java)."""
    target = archive_path()
    if target is None or target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="inorder-class-archive-") as folder:
            env = {name: value for name, value in os.environ.items() if not name.startswith("INORDER_")}
            env.update(INORDER_HOME=str(Path(folder, "home")), INORDER_SPARK_WARM="0", INORDER_SPARK_CONF=json.dumps(
                {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial} {QUIET_CDS}"}))
            for command in (["init"], ["generate", "--out", str(Path(folder, "home", "landing")), "--events", "300",
                                       "--batches", "1"], ["run"]):
                _run_to_its_end([sys.executable, "-m", "inorder.cli", *command], env, folder, timeout_seconds)
        if not partial.exists():
            raise RuntimeError("the JVM wrote no class archive")
        partial.replace(target)  # kept beside the archives of other venvs (their jars are other files)
    finally:  # a failed or timed-out attempt leaves no partial file in the cache
        partial.unlink(missing_ok=True)
    return target


def _run_to_its_end(argv: list[str], env: dict[str, str], cwd: str, timeout_seconds: float) -> None:
    """Run `argv` in a process group of its own and wait for the whole group (the JVM writes its archive as it
    exits, after the command); a group still running at the timeout is killed."""
    process = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        _, errors = process.communicate(timeout=timeout_seconds)
        _wait_for_group(process.pid, timeout_seconds)
    except (subprocess.TimeoutExpired, TimeoutError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    if process.returncode != 0:
        raise RuntimeError(f"inorder {argv[3]} failed: {errors.decode(errors='replace').strip()[-500:]}")


if __name__ == "__main__":
    started = time.monotonic()
    try:
        made = make()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # a slower start, not a broken install
        print(f"warning: no class archive for Spark's JVM ({error}); Spark starts without it", file=sys.stderr)
    else:
        if made is not None and time.monotonic() - started > 1:
            print(f"recorded Spark's classes for faster starts: {made}")
