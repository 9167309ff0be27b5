"""Every `INORDER_*` variable a user sets, in one typed `Settings`. It is read from the environment at the edges
only (the `inorder` command's entry, the Dagster resources, the scripts and the benchmark suite) and passed
down, mostly with the home (`Home.settings`); nothing below reads the environment for one of these.

docs/OPERATIONS.md's table of variables is this class's fields (tests/fast/test_settings.py holds them equal).
The crash sweep's test hooks (`INORDER_CRASH_*`, pipelines/faults.py) are not settings: Spark's Python workers
read them, where no argument reaches.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

DEFAULT_MAX_RECORDS = 6_000_000
DEFAULT_MAX_PAIRS = 4_000_000
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _text(name: str, text: str) -> str:
    return text


def _positive(name: str, text: str) -> int:
    digits = text.replace("_", "")
    if not digits.isdigit() or int(digits) < 1:
        raise ValueError(f"{name} must be a positive whole number, not {text!r}")
    return int(digits)


def _duration(unit: str, positive: bool = False) -> Callable[[str, str], float]:
    """The parser of a number of `unit`s (seconds, minutes): 0 or more, or more than 0 when `positive`."""
    def parse(name: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value > 0 if positive else value >= 0):
            raise ValueError(f"{name} must be a {'positive ' if positive else ''}number of {unit}, not {text!r}")
        return value
    return parse


def _switch(name: str, text: str) -> bool:
    value = text.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be 1 or 0, not {text!r}")


def _flag(name: str, text: str) -> bool | None:
    if text.lower() == "auto":
        return None
    if text.lower() not in _TRUE + _FALSE:
        raise ValueError(f"{name} must be 1, 0 or auto, not {text!r}")
    return text.lower() in _TRUE


def _on(name: str, text: str) -> bool:
    return True


def _spark_conf(name: str, text: str) -> Mapping[str, str]:
    try:
        conf = json.loads(text)
    except json.JSONDecodeError:
        conf = None
    if not isinstance(conf, dict):
        raise ValueError(f"{name} must be a JSON object of Spark settings, e.g. '{{\"spark.executor.memory\": \"4g\"}}'")
    return {str(k): str(v) for k, v in conf.items()}


def _setting(variable: str, default: Any, doc: str, parse: Callable[[str, str], Any] = _text) -> Any:
    factory = (lambda: dict(default)) if isinstance(default, dict) else None
    extra = {"default_factory": factory} if factory else {"default": default}
    return field(metadata={"variable": variable, "doc": doc, "parse": parse}, **extra)


@dataclass(frozen=True)
class Settings:
    """What the environment's `INORDER_*` variables say (`from_env`); a field's default is an unset variable's."""

    home: str = _setting("INORDER_HOME", ".inorder", "the home: its landing/, archive/, store.duckdb and scratch/")
    views: str | None = _setting("INORDER_VIEWS", None, "the view modules, comma-separated (default: what "
                                 "`inorder init --views` recorded in the home's views.txt, else `views`)")
    landing: str | None = _setting("INORDER_LANDING", None, "the landing folder, if not the home's landing/")
    archive: str | None = _setting("INORDER_ARCHIVE", None, "the archive folder, if not the home's archive/")
    database: str | None = _setting("INORDER_DATABASE", None, "the DuckDB file, if not the home's store.duckdb")
    scratch: str | None = _setting("INORDER_SCRATCH", None, "where passes keep their state and output files (a "
                                   "folder per home inside it); default the home's scratch/")
    archive_shared: bool | None = _setting("INORDER_ARCHIVE_SHARED", None, "1: every executor reads the archive "
                                           "(and INORDER_SCRATCH) at the driver's paths; 0: ship them; unset or "
                                           "auto: only a local session reads them", _flag)
    ship_limit_mb: int = _setting("INORDER_SHIP_LIMIT_MB", 256, "what a pass may ship through the driver, MiB",
                                  _positive)
    ship_code: bool | None = _setting("INORDER_SHIP_CODE", None, "1: ship pipelines/ and the views' code to the "
                                      "executors even in a local session; 0: never (installed there); unset or "
                                      "auto: every session but a classic local one", _flag)
    spark_master: str | None = _setting("INORDER_SPARK_MASTER", None, "the home's warm Spark server when unset "
                                        "(INORDER_SPARK_WARM), or local[*], spark://…, yarn, k8s://… or sc://…")
    spark_warm: bool = _setting("INORDER_SPARK_WARM", True, "1 (default): with no master set, runs share the "
                                "home's warm Spark server and start one when none is up; 0: a run with no "
                                "server up starts Spark local[*] of its own", _switch)
    spark_idle_minutes: float = _setting("INORDER_SPARK_IDLE_MINUTES", 15.0, "a warm Spark server stops after this "
                                         "many minutes with no run", _duration("minutes", positive=True))
    spark_conf: Mapping[str, str] = _setting("INORDER_SPARK_CONF", {}, "extra Spark settings, a JSON object",
                                             _spark_conf)
    pass_records: int = _setting("INORDER_PASS_RECORDS", DEFAULT_MAX_RECORDS, "the most records a pass takes",
                                 _positive)
    pass_streams: int = _setting("INORDER_PASS_STREAMS", DEFAULT_MAX_PAIRS, "about the most (view, stream) pairs "
                                 "a pass takes", _positive)
    duckdb_memory: str | None = _setting("INORDER_DUCKDB_MEMORY", None, "what DuckDB holds in memory before it "
                                         "spills to disk, e.g. 512MiB (the default) or 2GB")
    lock_wait: float = _setting("INORDER_LOCK_WAIT", 120.0, "seconds opening the DuckDB file waits while another "
                                "process holds it", _duration("seconds"))
    serve_postgres: str | None = _setting("INORDER_SERVE_POSTGRES", None, "a libpq connection string: each commit "
                                          "is published to PostgreSQL (unset: none is)")
    serve_schema: str = _setting("INORDER_SERVE_SCHEMA", "public", "the PostgreSQL schema the views are published to")
    debug: bool = _setting("INORDER_DEBUG", False, "tracebacks, Dagster's own log and the JVM's start-up lines on "
                           "the terminal", _on)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """The settings the environment gives (an unset or blank variable is its default); a bad value is
        refused in one line naming its variable."""
        environ = os.environ if environ is None else environ
        given = {}
        for f in fields(cls):
            text = environ.get(f.metadata["variable"], "").strip()
            if text:
                given[f.name] = f.metadata["parse"](f.metadata["variable"], text)
        return cls(**given)
