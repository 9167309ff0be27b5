"""Case 3: the ordering core in DuckDB SQL next to inorder's, on the same archived messages.

inorder's side is a view with no handlers (`bench_ordering`): every message that comes in order
is `ignored`, a no-op that still moves the watermark, so projecting it is the engine's ordering
alone (load state, Spark shuffle and sort, the walk, commit). The peer does the same per batch,
in ingest order, in one DuckDB transaction each: dedupe against the watermark (duplicate, or late
inside a skipped range) and among the candidates (pending ∪ new; the first received is kept, a
differing copy is a conflict), the gap timer (a stream still blocked at the same seq for
`gap_timeout` skips to its smallest waiting seq), gaps and islands (the ready run is the rows
with seq - row_number() = start - 1), then the new watermark, blocked_at/blocked_since and the
pending buffer. Not modelled: `max_pending` capacity skips (the peer counts the streams that
would need one, which must be 0), and gap_timeout 0 (one skip per stream and entry at most).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import duckdb
from pyspark.sql import SparkSession

from bench.measure import RssSampler
from pipelines.engine.ingest import archive_path
from pipelines.facade import project_views
from pipelines.store.database import Home, Store
from pipelines.view import View
from bench.data import BANK_VIEWS

ORDERING_VIEW = View(name="bench_ordering", tables=(), subscribes=("account",))
COMPARED = ("selected", "processed", "duplicate", "late", "conflict", "gaps_skipped", "pending", "sum_last_seq")

PEER_DDL = """
CREATE TABLE wm (stream_id VARCHAR PRIMARY KEY, last_seq BIGINT NOT NULL, blocked_at BIGINT,
                 blocked_since TIMESTAMPTZ);
CREATE TABLE pend (stream_id VARCHAR, seq BIGINT, entry_idx BIGINT, line BIGINT, event_type VARCHAR,
                   payload VARCHAR, occurred_at VARCHAR, event_id VARCHAR);
CREATE TABLE gaps (stream_id VARCHAR, first_missing BIGINT, last_missing BIGINT, entry_idx BIGINT);
CREATE TABLE ledger (entry_idx BIGINT PRIMARY KEY, selected BIGINT, processed BIGINT, duplicate BIGINT,
                     late BIGINT, conflict BIGINT, gaps_skipped BIGINT, pending BIGINT, over_capacity BIGINT);
"""

# named parameters: files (the entry's archive), entry, now (logical time), timeout_us, types (subscribed
# stream types), first_seq, max_pending
STEP = [
    """CREATE OR REPLACE TEMP TABLE new AS
       SELECT n.entry_idx, n.line, n.stream_id, n.seq, n.event_type, n.payload, n.occurred_at, n.event_id,
              coalesce(w.last_seq, $first_seq - 1) AS last_seq,
              CASE WHEN n.seq > coalesce(w.last_seq, $first_seq - 1) THEN NULL
                   WHEN EXISTS (SELECT 1 FROM gaps g WHERE g.stream_id = n.stream_id
                                AND n.seq BETWEEN g.first_missing AND g.last_missing) THEN 'late'
                   ELSE 'duplicate' END AS old_outcome
       FROM read_parquet($files) n LEFT JOIN wm w USING (stream_id)
       WHERE list_contains($types, n.stream_type)""",
    """CREATE OR REPLACE TEMP TABLE cand AS
       SELECT *, row_number() OVER w AS copy,
              struct_pack(event_type, payload, occurred_at, event_id)
                IS NOT DISTINCT FROM first_value(struct_pack(event_type, payload, occurred_at, event_id)) OVER w
                AS same_as_first
       FROM (SELECT stream_id, seq, entry_idx, line, event_type, payload, occurred_at, event_id FROM pend
             UNION ALL
             SELECT stream_id, seq, entry_idx, line, event_type, payload, occurred_at, event_id FROM new
             WHERE old_outcome IS NULL)
       WINDOW w AS (PARTITION BY stream_id, seq ORDER BY entry_idx, line)""",
    """CREATE OR REPLACE TEMP TABLE starts AS
       SELECT *, CASE WHEN skip THEN min_seq ELSE last_seq + 1 END AS start FROM (
         SELECT c.stream_id, min(c.seq) AS min_seq, count(*) AS kept,
                coalesce(any_value(w.last_seq), $first_seq - 1) AS last_seq,
                any_value(w.blocked_at) AS blocked_at, any_value(w.blocked_since) AS blocked_since,
                NOT bool_or(c.seq = coalesce(w.last_seq, $first_seq - 1) + 1)
                  AND coalesce(any_value(w.blocked_at) = coalesce(any_value(w.last_seq), $first_seq - 1) + 1
                               AND epoch_us($now::TIMESTAMPTZ) - epoch_us(any_value(w.blocked_since)) >= $timeout_us, false)
                  AS skip
         FROM cand c LEFT JOIN wm w USING (stream_id) WHERE c.copy = 1 GROUP BY c.stream_id)""",
    # every kept seq is > last_seq, so each is >= start: the ready run is seq - row_number() = start - 1
    """CREATE OR REPLACE TEMP TABLE walked AS
       SELECT c.*, s.start, c.seq - row_number() OVER (PARTITION BY c.stream_id ORDER BY c.seq) = s.start - 1
              AS ready
       FROM cand c JOIN starts s USING (stream_id) WHERE c.copy = 1""",
    """CREATE OR REPLACE TEMP TABLE marks AS
       SELECT s.stream_id, s.start - 1 + coalesce(r.n_ready, 0) AS last_seq, s.kept - coalesce(r.n_ready, 0)
              AS waiting, s.blocked_at AS old_blocked_at, s.blocked_since AS old_blocked_since, s.skip,
              s.last_seq AS old_last_seq, s.start
       FROM starts s LEFT JOIN (SELECT stream_id, count(*) AS n_ready FROM walked WHERE ready GROUP BY ALL) r
       USING (stream_id)""",
    """INSERT INTO gaps SELECT stream_id, old_last_seq + 1, start - 1, $entry FROM marks WHERE skip""",
    """INSERT OR REPLACE INTO wm
       SELECT stream_id, last_seq,
              CASE WHEN waiting > 0 THEN last_seq + 1 END,
              CASE WHEN waiting = 0 THEN NULL
                   WHEN last_seq + 1 = old_blocked_at AND NOT skip THEN old_blocked_since
                   ELSE $now::TIMESTAMPTZ END
       FROM marks""",
    """DELETE FROM pend""",
    """INSERT INTO pend SELECT stream_id, seq, entry_idx, line, event_type, payload, occurred_at, event_id
       FROM walked WHERE NOT ready""",
    """INSERT INTO ledger SELECT $entry,
         (SELECT count(*) FROM new),
         (SELECT count(*) FROM walked WHERE ready),
         (SELECT count(*) FROM new WHERE old_outcome = 'duplicate')
           + (SELECT count(*) FROM cand WHERE copy > 1 AND same_as_first),
         (SELECT count(*) FROM new WHERE old_outcome = 'late'),
         (SELECT count(*) FROM cand WHERE copy > 1 AND NOT same_as_first),
         (SELECT count(*) FROM marks WHERE skip),
         (SELECT count(*) FROM pend),
         (SELECT count(*) FROM marks WHERE waiting > $max_pending)""",
]


def ordering_entries(home: Home) -> list[tuple[int, str, object]]:
    """(entry_idx, kind, received_at) of every archived entry, in ingest order."""
    with Store.open_read_only(home) as store:
        return store.con.execute("SELECT entry_idx, kind, received_at FROM inorder.ingest_log "
                                 "WHERE status = 'archived' ORDER BY entry_idx").fetchall()


def duckdb_ordering(home: Home, database: Path, view: View = ORDERING_VIEW, first_seq: int = 1) -> dict:
    """The peer over every archived batch/tick of `home`, in ingest order; returns its totals and time."""
    entries = ordering_entries(home)
    for suffix in ("", ".wal"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    con = duckdb.connect(str(database))
    con.execute("SET TimeZone = 'UTC'")
    con.execute(PEER_DDL)
    empty = str(database.with_suffix(".empty.parquet"))
    con.execute("COPY (SELECT NULL::BIGINT AS entry_idx, NULL::BIGINT AS line, NULL::VARCHAR AS stream_id, "
                "NULL::VARCHAR AS stream_type, NULL::BIGINT AS seq, NULL::VARCHAR AS event_type, "
                "NULL::VARCHAR AS payload, NULL::VARCHAR AS occurred_at, NULL::VARCHAR AS event_id LIMIT 0) "
                f"TO '{empty}' (FORMAT parquet)")
    for entry_idx, kind, received_at in entries:
        files = [str(archive_path(home, entry_idx))] if kind == "batch" else [empty]  # a tick brings nothing
        params = {"files": files, "entry": entry_idx, "now": received_at,
                  "timeout_us": view.gap_timeout_us, "types": list(view.subscribes),
                  "first_seq": first_seq, "max_pending": view.max_pending}
        con.execute("BEGIN TRANSACTION")
        for sql in STEP:
            _run(con, sql, params)
        con.execute("COMMIT")
    seconds = time.perf_counter() - started
    totals = con.execute("SELECT sum(selected), sum(processed), sum(duplicate), sum(late), sum(conflict), "
                         "sum(gaps_skipped), (SELECT count(*) FROM pend), (SELECT sum(last_seq) FROM wm), "
                         "sum(over_capacity) FROM ledger").fetchone()
    con.close()
    return {"wall_s": seconds, "entries": len(entries), "counts": dict(zip(COMPARED, (int(v or 0) for v in totals[:8]))),
            "over_capacity": int(totals[8] or 0)}  # streams past max_pending: must be 0 (see the module's doc)


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: dict) -> None:
    """Bind the named parameters the statement uses (DuckDB refuses unused ones)."""
    used = {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql)}
    con.execute(sql, used or None)


def inorder_ordering(spark: SparkSession, home: Home, sampler: RssSampler, view: View = ORDERING_VIEW) -> dict:
    """Project every archived entry of `home` for a handler-less view: the engine's ordering alone."""
    views = (*BANK_VIEWS, view)
    Store.open(home, views, adding=[view.name]).close()  # an explicit act, as `inorder run --add-views` is
    started = time.perf_counter()
    with sampler.phase("ordering"):
        stats = project_views(spark, home, views, [view])
    seconds = time.perf_counter() - started
    with Store.open_read_only(home) as store:
        row = store.con.execute(
            """SELECT sum(selected), sum(applied + ignored + handler_error), sum(duplicate), sum(late), sum(conflict),
                      sum(gaps_skipped),
                      (SELECT count(*) FROM inorder.pending WHERE view = $1),
                      (SELECT sum(last_seq) FROM inorder.watermarks WHERE view = $1)
               FROM inorder.batches WHERE view = $1""", [view.name]).fetchone()
    return {"wall_s": seconds, "spark_s": stats.spark_seconds, "commit_s": stats.commit_seconds,
            "counts": dict(zip(COMPARED, (int(v or 0) for v in row)))}


def compare(home: Home, work: Path, spark: SparkSession, sampler: RssSampler) -> dict:
    mine = inorder_ordering(spark, home, sampler)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    peer = duckdb_ordering(home, work / "peer.duckdb")
    shutil.rmtree(work, ignore_errors=True)
    return {"inorder": mine, "duckdb": peer, "ratio": mine["wall_s"] / peer["wall_s"],
            "counts_match": mine["counts"] == peer["counts"] and peer["over_capacity"] == 0}
