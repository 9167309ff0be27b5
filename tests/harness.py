"""Runs the real engine over reference-model entries and reads its store back in the model's shape."""

from __future__ import annotations

import shutil
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import duckdb

from pipelines.engine.order import NotParked
from pipelines.facade import operator_action, run
from pipelines.spark.session import is_connect
from pipelines.store.database import Home, Store, us_from_utc
from pipelines.view import View
from tests.conservation import store_violations
from tests.reference_model import Entry, last_line, split_lines


def entry_time(entry: Entry) -> datetime:
    return datetime.fromtimestamp(entry.T, tz=timezone.utc)


def write_batch(home: Home, entry: Entry) -> Path:
    lines = split_lines(entry.lines) if isinstance(entry.lines, (str, bytes)) else (entry.lines or [])
    data = b"".join((line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")) + b"\n"
                    for line in lines)
    path = home.landing / f"{entry.batch_id}.jsonl"
    path.write_bytes(data)
    return path


def run_entries(spark, home: Home, views: Sequence[View], entries: Sequence[Entry],
                check_conservation: bool = True, refused: list | None = None) -> None:
    """One engine run per entry, at the entry's logical time; a retry/skip the engine refuses (the
    stream is not parked) is appended to `refused` as (view, stream)."""
    Store.open(home, views).close()
    for entry in entries:
        as_a_new_process(spark)
        if entry.kind == "batch":
            write_batch(home, entry)
            run(spark, home, views, now=entry_time(entry))
        elif entry.kind == "tick":
            run(spark, home, views, now=entry_time(entry))
        else:
            view = next(v for v in views if v.name == entry.target_view)
            try:
                operator_action(spark, home, views, view, [entry.target_stream], entry.kind)
            except NotParked:
                if refused is None:
                    raise
                refused.append((view.name, entry.target_stream))
        if check_conservation:
            assert_conserved(home, views)


def as_a_new_process(spark) -> None:
    """Before each run on a Spark Connect session: the plan ids a new `inorder` process would draw.

    Every `inorder` command is a process of its own that reattaches to its code version's session on the
    warm server, and a process numbers its plans from 0: the server saw the same ids, for other plans,
    from each command (issue 32: its plan cache gave a pass an earlier pass's file schema)."""
    if is_connect(spark):
        from pyspark.sql.connect.plan import LogicalPlan

        with LogicalPlan._lock:
            LogicalPlan._nextPlanId = 0


def assert_conserved(home: Home, views: Sequence[View]) -> None:
    """DESIGN §3 holds, computed from the raw tables (tests/conservation.py), not by the engine's status."""
    broken = store_violations(home.database, [v.name for v in views])
    assert not broken, broken


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return us_from_utc(value) / 1e6
    if isinstance(value, date):
        return value.isoformat()
    return value


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [{n: _plain(v) for n, v in zip(names, row)} for row in cursor.fetchall()]


# Every column of the engine tables is compared with the model's but these, each for its reason:
# - errors.error_id: a sequence's value, in whatever order concurrent inserts drew it;
# - batches.committed_at: the wall clock at the commit;
# - errors.traceback: only its last line (the exception and its message): the frames above it are the
#   engine's own call path, which the model does not share;
# - a malformed row's reason: its wording is inspection's; tests/fast/test_inspect.py and tests/engine/test_hostile.py
#   hold each kind's, and tests/fast/test_inspect_differential.py holds them all byte for byte;
# - gaps.waited and batches.pending_now: generated columns, the same values as waited_seconds and pending;
# - watermarks.updated_entry and prev_last_seq where entries were projected several to a pass (`across_passes`).
def read_store(home: Home, views: Sequence[View]) -> dict[str, list[dict]]:
    """The engine's store in the reference model's shape (see tests/reference_model.py)."""
    con = duckdb.connect(str(home.database), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    try:
        out: dict[str, list[dict]] = {}
        for view in views:
            for table in view.tables:
                keys = ", ".join(f'"{c}"' for c in table.primary_key)
                out[table.name] = _rows(con, f'SELECT * FROM "{table.name}" ORDER BY {keys}')
        out["watermarks"] = _rows(con, """
            SELECT view, stream_id, stream_type, last_seq, blocked_at, blocked_since, parked, pending_count, attempts,
                   updated_entry, prev_last_seq
            FROM inorder.watermarks ORDER BY view, stream_id""")
        out["pending"] = _rows(con, """
            SELECT view, stream_id, seq, stream_type, event_type, payload, occurred_at, event_id, batch_id, line,
                   entry_idx
            FROM inorder.pending ORDER BY view, stream_id, seq""")
        out["errors"] = [{**row, "traceback": last_line(row["traceback"])} for row in _rows(con, """
            SELECT view, stream_id, seq, kind, event_type, payload, occurred_at, event_id, batch_id, line,
                   error_class, attempt, raw, reason, exception_type, message, traceback, logged_at, entry_idx
            FROM inorder.errors ORDER BY error_id""")]
        out["gaps"] = _rows(con, """
            SELECT view, stream_id, first_missing, last_missing, waited_seconds, reason, batch_id,
                   skipped_at, entry_idx FROM inorder.gaps""")
        out["batches"] = _rows(con, """
            SELECT batch_id, view, kind, entry_idx, received_at, records, malformed, normalised, selected, unrouted,
                   applied, ignored, handler_error, duplicate, late, conflict, pending, gaps_skipped
            FROM inorder.batches ORDER BY entry_idx, view""")
        return out
    finally:
        con.close()


PASS_BOOKKEEPING = ("updated_entry", "prev_last_seq")


def without(store: dict[str, list[dict]], *columns: str) -> dict[str, list[dict]]:
    """The store with these columns left out of every table."""
    return {name: [{k: v for k, v in row.items() if k not in columns} for row in rows] for name, rows in store.items()}


def across_passes(store: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The store without the watermarks' pass bookkeeping (the last entry whose pass walked each stream,
    and its last_seq before that pass): how entries were grouped into passes decides those two, so
    they are compared only between stores projected one entry per run (the model's way)."""
    return without(store, *PASS_BOOKKEEPING)


ENGINE_TABLES = ("watermarks", "pending", "errors", "gaps", "batches")


def _key(row: dict) -> str:
    return repr(sorted((k, str(v)) for k, v in row.items()))


def assert_same_store(engine: dict[str, list[dict]], model: dict[str, list[dict]]) -> None:
    """Row for row; engine tables compared as multisets (their row order is not part of the contract)."""
    assert engine.keys() == model.keys()
    for name in engine:
        got, want = engine[name], model[name]
        if name in ENGINE_TABLES:
            got, want = sorted(got, key=_key), sorted(want, key=_key)
        for i, (g, w) in enumerate(zip(got, want)):
            assert {k: g.get(k) for k in w} == w, f"{name} row {i} differs:\n engine {g}\n model  {w}"
        assert len(got) == len(want), f"{name}: engine has {len(got)} rows, model {len(want)}"


def fresh_home(tmp_path: Path, name: str = "home") -> Home:
    root = tmp_path / name
    shutil.rmtree(root, ignore_errors=True)
    return Home(root).ensure()
