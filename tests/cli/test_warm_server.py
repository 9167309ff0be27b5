"""Exactly once on the warm Spark server (issue 32): the path the UI and `inorder spark start` take.

Every `inorder` command is a process of its own that reattaches to its code version's session on the
home's warm server. A pass there once read its state with an earlier pass's columns (Spark Connect's
plan cache, keyed by plan ids that restart in every process, served the previous command's resolved read
of the same path) and committed a view's rows as if its streams had none. These tests run what users
run: the operator's sequence through the CLI on one warm server, held table by table to the same
sequence cold (`local[*]`), and the engine's model properties in a pytest process whose session is on
a warm server (tests/conftest.py, INORDER_TEST_SPARK=warm).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.command import REPO, clean_environment, inorder


# "release 1": a bug on chosen events parks their streams; "release 2" fixes the first, in the helper module only
RULES = {1: 'BROKEN = ("e4", "e6")\n', 2: 'BROKEN = ("e6",)\n'}
RULES_CHECK = '''

def check(name: str) -> None:
    if name in BROKEN:
        raise RuntimeError(f"bug on {name}")
'''
VIEWS = '''
from inorder import Column, Table, View

import pk_rules

TEXT = Table.per_stream("pk_park_text", key="stream", columns={"text": Column(str, not_null=True)})
PK_PARK = View(name="pk_park", tables=(TEXT,), subscribes=("park",), on_error="park")

STEPS = Table.per_stream("pk_dlq_steps", key="stream", columns={"n": Column(int, not_null=True)})
PK_DLQ = View(name="pk_dlq", tables=(STEPS,), subscribes=("dlq",), on_error="park")


@PK_PARK.on("Step")
def append(event, tables) -> None:
    name = event.payload["name"]
    pk_rules.check(name)
    row = tables.pk_park_text.row
    tables.pk_park_text.save(text=f"{row['text']}|{name}" if row else name)


@PK_DLQ.on("Step")
def count(event, tables) -> None:
    pk_rules.check(event.payload["name"])
    row = tables.pk_dlq_steps.row
    tables.pk_dlq_steps.save(n=row["n"] + 1 if row else 1)
'''
# every stream keeps e1|e2|e3 (or 3 steps) and parks at e4 under release 1, then at e6 under release 2
STREAMS = {"park": ("ak-ras", "ak-raf", "es-s1"), "dlq": ("ax-ord", "ax-b00", "ax-b01")}


def _release(code: Path, n: int) -> None:
    code.mkdir(exist_ok=True)
    (code / "pk_views.py").write_text(VIEWS)
    (code / "pk_rules.py").write_text(RULES[n] + RULES_CHECK)


def _land(home: Path, n: int, seqs: range) -> None:
    lines = [json.dumps({"stream_id": stream, "stream_type": kind, "seq": seq, "type": "Step",
                         "payload": {"name": f"e{seq}"}})
             for kind, streams in STREAMS.items() for stream in streams for seq in seqs]
    (home / "landing" / f"batch-{n}.jsonl").write_text("\n".join(lines) + "\n")


def operator_sequence(home: Path, code: Path, **settings: str) -> tuple[dict[str, list[tuple]], list[str]]:
    """A run that parks streams in both views, release 2, then the operator's retries one view at a time (each
    a pass that walks its view alone, on the same code version's session), and a run of both views: the
    store's view and engine tables, and what the retries said."""
    env = clean_environment(home, "pk_views", path=(code, REPO), as_a_user=True, **settings)
    _release(code, 1)
    inorder(env, "init", str(home))
    _land(home, 1, range(1, 7))
    inorder(env, "run", "--now", "2026-03-01T09:00:00Z")
    _release(code, 2)
    said = [inorder(env, "retry", "--view", view, "--all").stdout.strip() for view in ("pk_dlq", "pk_park")]
    _land(home, 2, range(7, 8))
    inorder(env, "run", "--now", "2026-03-01T09:01:00Z")
    return _tables(home), said


def _tables(home: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        return {table: con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in (
            "pk_park_text", "pk_dlq_steps", "inorder.watermarks", "inorder.pending", "inorder.gaps")}
    finally:
        con.close()


def test_the_operators_sequence_on_one_warm_server_keeps_every_row_and_equals_a_cold_run(tmp_path):
    warm, cold, code = tmp_path / "warm", tmp_path / "cold", tmp_path / "code"
    env = clean_environment(warm, "pk_views", path=(code, REPO), as_a_user=True)
    _release(code, 1)
    inorder(env, "init", str(warm))
    inorder(env, "spark", "start", "--idle-timeout", "20")
    try:
        on_warm, said = operator_sequence(warm, code)
    finally:
        inorder(env, "spark", "stop")
    # every stream applied e4 and e5 on its retry, then parked anew at e6 (e7 waits behind it)
    assert on_warm["pk_park_text"] == [(stream, "e1|e2|e3|e4|e5") for stream in sorted(STREAMS["park"])]
    assert on_warm["pk_dlq_steps"] == [(stream, 5) for stream in sorted(STREAMS["dlq"])]
    assert said[1] == (
        "retry of 3 parked streams of pk_park committed: 3 streams parked anew on a later message (the retried "
        "message applied, then ak-raf seq 4 to 5, parked at seq 6, attempt 1, ak-ras seq 4 to 5, parked at seq 6, "
        "attempt 1, es-s1 seq 4 to 5, parked at seq 6, attempt 1; `inorder errors --view pk_park --kind "
        "handler_error` says why)")
    assert (on_warm, said) == operator_sequence(cold, code, INORDER_SPARK_WARM="0")  # local[*], a JVM per command


# the modules of the views those tests run: what a warm server's Python workers get shipped, as `inorder` ships
# INORDER_VIEWS (the test process's own modules are not on the server's path)
WARM_TEST_VIEWS = "views,tests.holds_views"


def test_the_engines_model_properties_hold_on_a_warm_server():
    """The engine-vs-model properties over several passes (operator actions on one view between runs of all
    views, passes of different view sets), with every pass on a warm server's session as a new process."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/engine/test_engine_vs_model.py",
         "-k", "operator"],
        cwd=REPO, env={**os.environ, "INORDER_TEST_SPARK": "warm", "INORDER_VIEWS": WARM_TEST_VIEWS},
        capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]

