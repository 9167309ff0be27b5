"""Case 4: the per-message method the ordering patent replaces, on DuckDB.

For each message, in arrival order, and for each view subscribed to its stream type: take a lock on
(stream, view), read the last seq from a table, compare; process it (then every deferred message
that is now next) or defer it; write the seq; release. One read-store transaction per message and
view. "Process" here is the ordering decision only: no handler runs, so the method gets the
benefit of the doubt against inorder, whose figure includes the handlers and the view tables.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from bench.peer import ordering_entries
from pipelines.engine.ingest import archive_path
from pipelines.store.database import Home
from pipelines.view import View

DDL = """
CREATE TABLE wm (view VARCHAR, stream_id VARCHAR, last_seq BIGINT NOT NULL, PRIMARY KEY (view, stream_id));
CREATE TABLE deferred (view VARCHAR, stream_id VARCHAR, seq BIGINT, event_type VARCHAR, payload VARCHAR,
                       occurred_at VARCHAR, event_id VARCHAR, PRIMARY KEY (view, stream_id, seq));
"""


def messages(home: Home) -> list[tuple]:
    """The archived messages of `home`, in arrival order (entry, line)."""
    rows: list[tuple] = []
    for entry_idx, kind, _ in ordering_entries(home):
        if kind != "batch":
            continue
        t = pq.read_table(archive_path(home, entry_idx)).sort_by("line")
        cols = [t[c].to_pylist() for c in ("stream_id", "stream_type", "seq", "event_type", "payload",
                                           "occurred_at", "event_id")]
        rows.extend(zip(*cols))
    return rows


def per_message(home: Home, database: Path, views: tuple[View, ...], first_seq: int = 1) -> dict:
    msgs = messages(home)
    for suffix in ("", ".wal"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    con = duckdb.connect(str(database))
    con.execute(DDL)
    locks: dict[tuple[str, str], threading.Lock] = {}
    counts = {v.name: {"selected": 0, "processed": 0, "duplicate": 0, "conflict": 0} for v in views}
    started = time.perf_counter()
    for stream_id, stream_type, seq, event_type, payload, occurred_at, event_id in msgs:
        for view in views:
            if stream_type not in view.subscribes:
                continue
            c = counts[view.name]
            c["selected"] += 1
            lock = locks.setdefault((stream_id, view.name), threading.Lock())
            with lock:
                con.execute("BEGIN TRANSACTION")
                row = con.execute("SELECT last_seq FROM wm WHERE view = ? AND stream_id = ?",
                                  [view.name, stream_id]).fetchone()
                last = row[0] if row else first_seq - 1
                if seq <= last:
                    c["duplicate"] += 1
                elif seq == last + 1:
                    c["processed"] += 1
                    last = seq
                    while con.execute("DELETE FROM deferred WHERE view = ? AND stream_id = ? AND seq = ? "
                                      "RETURNING seq", [view.name, stream_id, last + 1]).fetchone():
                        c["processed"] += 1
                        last += 1
                    con.execute("INSERT OR REPLACE INTO wm VALUES (?, ?, ?)", [view.name, stream_id, last])
                else:
                    first = con.execute("SELECT event_type, payload, occurred_at, event_id FROM deferred "
                                        "WHERE view = ? AND stream_id = ? AND seq = ?",
                                        [view.name, stream_id, seq]).fetchone()
                    if first is None:
                        con.execute("INSERT INTO deferred VALUES (?, ?, ?, ?, ?, ?, ?)",
                                    [view.name, stream_id, seq, event_type, payload, occurred_at, event_id])
                    elif first == (event_type, payload, occurred_at, event_id):
                        c["duplicate"] += 1
                    else:
                        c["conflict"] += 1
                con.execute("COMMIT")
    seconds = time.perf_counter() - started
    for view_name, n in con.execute("SELECT view, count(*) FROM deferred GROUP BY view").fetchall():
        counts[view_name]["pending"] = n
    for c in counts.values():
        c.setdefault("pending", 0)
    con.close()
    return {"events": len(msgs), "wall_s": seconds, "events_per_s": len(msgs) / seconds, "views": counts}


def check_against(engine_views: dict, prior_views: dict) -> dict:
    """Per view: processed (applied + ignored + handler_error), duplicate + conflict + late, and pending
    must agree. The split between duplicate and conflict may not: a differing copy that arrives after
    the first was processed is a `duplicate` for both, but inside one batch inorder sees both copies
    before walking (a `conflict`) while the per-message method has processed the first already."""
    out = {}
    for name, p in prior_views.items():
        e = engine_views[name]
        mine = {"processed": e["applied"] + e["ignored"] + e["handler_error"],
                "duplicate_or_conflict": e["duplicate"] + e["conflict"] + e["late"], "pending": e["pending"]}
        theirs = {"processed": p["processed"], "duplicate_or_conflict": p["duplicate"] + p["conflict"],
                  "pending": p["pending"]}
        out[name] = {"inorder": mine, "prior_art": theirs, "match": mine == theirs}
    return out
