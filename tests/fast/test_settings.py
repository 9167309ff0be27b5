"""Every INORDER_* variable is one field of `Settings` (pipelines/config.py), parsed in one place and refused in one
line naming its variable; docs/OPERATIONS.md's table of variables is that class; and nothing outside the edges
reads one from the environment."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

from pipelines.config import DEFAULT_MAX_PAIRS, DEFAULT_MAX_RECORDS, Settings
from pipelines.engine.planning import PassBounds
from pipelines.store.database import DEFAULT_DUCKDB_MEMORY, Home

ROOT = Path(__file__).resolve().parents[2]
# where a process starts and reads its settings once: the command, the code location and its resources, the
# warm server's supervisor (a process of its own), and the crash sweep's hooks read inside Spark's workers
EDGES = {"inorder/cli.py", "inorder/definitions.py", "resources/__init__.py", "pipelines/config.py",
         "pipelines/spark/server.py", "pipelines/faults.py",
         "pipelines/spark/class_archive.py"}  # the set-up's step: its throwaway run drops the user's INORDER_*


def shown_default(value) -> str:
    return "unset" if value in (None, False, {}) else str(value)


def test_docs_table_of_variables_is_the_settings_class():
    text = (ROOT / "docs/OPERATIONS.md").read_text()
    table = text[text.index("## Every variable"):]
    rows = re.findall(r"^\| `(INORDER_[A-Z_]+)` \| (.*?) \| (.*?) \|$", table, re.M)
    defaults = Settings()
    assert rows == [(f.metadata["variable"], shown_default(getattr(defaults, f.name)), f.metadata["doc"])
                    for f in fields(Settings)]


def test_unset_or_blank_variables_are_the_defaults():
    assert Settings.from_env({}) == Settings() == Settings.from_env({f.metadata["variable"]: "  "
                                                                     for f in fields(Settings)})
    assert PassBounds.of(Settings()) == PassBounds(DEFAULT_MAX_RECORDS, DEFAULT_MAX_PAIRS)


def test_each_variable_is_read_into_its_field():
    settings = Settings.from_env({
        "INORDER_HOME": "/srv/home", "INORDER_VIEWS": "shop.views", "INORDER_PASS_STREAMS": "1_000_000",
        "INORDER_PASS_RECORDS": " 2000 ", "INORDER_SHIP_LIMIT_MB": "1024", "INORDER_ARCHIVE_SHARED": "YES",
        "INORDER_SHIP_CODE": "0", "INORDER_SPARK_CONF": '{"spark.executor.memory": "4g", "spark.cores.max": 8}',
        "INORDER_LOCK_WAIT": "2.5", "INORDER_DEBUG": "1", "INORDER_SERVE_POSTGRES": "host=db",
        "INORDER_SERVE_SCHEMA": "reads", "INORDER_DUCKDB_MEMORY": " 2 GB ", "INORDER_SCRATCH": "/mnt/scratch"})
    assert PassBounds.of(settings) == PassBounds(2000, 1_000_000)
    assert (settings.ship_limit_mb, settings.archive_shared, settings.ship_code, settings.lock_wait, settings.debug) \
        == (1024, True, False, 2.5, True)
    assert settings.spark_conf == {"spark.executor.memory": "4g", "spark.cores.max": "8"}
    assert Settings.from_env({"INORDER_ARCHIVE_SHARED": "auto"}).archive_shared is None
    home = Home.of(settings)
    assert (home.root, home.scratch_dir, home.file_wait_seconds, home.memory_limit, home.settings) == \
        (Path("/srv/home"), Path("/mnt/scratch"), 2.5, "2GB", settings)
    assert Home.of(Settings()).memory_limit == DEFAULT_DUCKDB_MEMORY
    assert Home.of(settings, "/elsewhere").root == Path("/elsewhere")  # an explicit value wins


@pytest.mark.parametrize("variable, value, words", [
    ("INORDER_PASS_STREAMS", "0", "INORDER_PASS_STREAMS must be a positive whole number, not '0'"),
    ("INORDER_PASS_RECORDS", "many", "INORDER_PASS_RECORDS must be a positive whole number"),
    ("INORDER_SHIP_LIMIT_MB", "-5", "INORDER_SHIP_LIMIT_MB must be a positive whole number"),
    ("INORDER_SHIP_LIMIT_MB", "1.5", "INORDER_SHIP_LIMIT_MB must be a positive whole number"),
    ("INORDER_ARCHIVE_SHARED", "maybe", "INORDER_ARCHIVE_SHARED must be 1, 0 or auto, not 'maybe'"),
    ("INORDER_SHIP_CODE", "sometimes", "INORDER_SHIP_CODE must be 1, 0 or auto"),
    ("INORDER_SPARK_CONF", '["spark.executor.memory=4g"]', "INORDER_SPARK_CONF must be a JSON object"),
    ("INORDER_SPARK_CONF", "{oops", "INORDER_SPARK_CONF must be a JSON object"),
    ("INORDER_LOCK_WAIT", "soon", "INORDER_LOCK_WAIT must be a number of seconds, not 'soon'"),
    ("INORDER_LOCK_WAIT", "-1", "INORDER_LOCK_WAIT must be a number of seconds"),
    ("INORDER_SPARK_IDLE_MINUTES", "0", "INORDER_SPARK_IDLE_MINUTES must be a positive number of minutes, not '0'"),
    ("INORDER_SPARK_IDLE_MINUTES", "soon", "INORDER_SPARK_IDLE_MINUTES must be a positive number of minutes"),
    ("INORDER_SPARK_WARM", "maybe", "INORDER_SPARK_WARM must be 1 or 0, not 'maybe'"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_variable(variable, value, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Settings.from_env({variable: value})


@pytest.mark.parametrize("text", ["lots", "12", "2 GBs"])
def test_a_bad_duckdb_memory_size_is_refused_when_the_home_is_made(text):
    with pytest.raises(ValueError, match="INORDER_DUCKDB_MEMORY must be a size such as 512MiB or 2GB"):
        Home.of(Settings.from_env({"INORDER_DUCKDB_MEMORY": text}))


def environment_reads(path: Path) -> list[int]:
    """Lines of `path` that read the process environment (os.environ, os.getenv) for an INORDER_ variable."""
    tree, found = ast.parse(path.read_text()), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            found.append(node.lineno)
    lines = path.read_text().splitlines()
    return [n for n in found if "INORDER_" in lines[n - 1] or "VARIABLE" in lines[n - 1]]


def test_no_module_below_the_edges_reads_an_inorder_variable():
    readers = {str(path.relative_to(ROOT)): environment_reads(path)
               for folder in ("pipelines", "inorder", "assets", "resources")
               for path in sorted((ROOT / folder).rglob("*.py"))}
    assert {path: lines for path, lines in readers.items() if lines and path not in EDGES} == {}
