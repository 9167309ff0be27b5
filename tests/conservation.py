"""DESIGN §3, computed from the raw tables of a store with SQL of its own: the tests' check of the
engine's conservation, independent of what the engine reports (pipelines/observe/status.py, the checks).

For every view: sum(selected) over its ledger = the sum of its outcomes + the messages its buffer
holds now (rows of inorder.pending), and the ledger's newest `pending` is that count; every late and
conflict outcome has its error row. For every batch: records = malformed + normalised, and as many
malformed rows as it counts."""

from __future__ import annotations

from pathlib import Path

import duckdb

OUTCOMES = ("applied", "ignored", "handler_error", "duplicate", "late", "conflict")


def violations(con: duckdb.DuckDBPyConnection, views: list[str]) -> list[str]:
    """What breaks conservation, in words (empty: it holds)."""
    found = []
    for view in views:
        ledger = con.execute(
            f"SELECT coalesce(sum(selected), 0), {', '.join(f'coalesce(sum({o}), 0)' for o in OUTCOMES)} "
            "FROM inorder.batches WHERE view = ?", [view]).fetchone()
        selected, outcomes = ledger[0], dict(zip(OUTCOMES, ledger[1:]))
        buffered = con.execute("SELECT count(*) FROM inorder.pending WHERE view = ?", [view]).fetchone()[0]
        if selected != sum(outcomes.values()) + buffered:
            found.append(f"{view}: selected {selected} != outcomes {sum(outcomes.values())} + buffered {buffered}")
        newest = con.execute("SELECT pending FROM inorder.batches WHERE view = ? ORDER BY entry_idx DESC LIMIT 1",
                             [view]).fetchone()
        if newest is not None and newest[0] != buffered:
            found.append(f"{view}: the ledger's newest pending {newest[0]} != {buffered} buffered messages")
        for kind in ("late", "conflict"):
            rows = con.execute("SELECT count(*) FROM inorder.errors WHERE view = ? AND kind = ?", [view, kind]).fetchone()[0]
            if rows != outcomes[kind]:
                found.append(f"{view}: {outcomes[kind]} {kind} outcomes but {rows} {kind} error rows")
    for batch_id, records, malformed, normalised, rows in con.execute(
            "SELECT l.batch_id, l.records, l.malformed, l.normalised, "
            "(SELECT count(*) FROM inorder.errors e WHERE e.kind = 'malformed' AND e.batch_id = l.batch_id) "
            "FROM inorder.ingest_log l WHERE l.kind = 'batch' AND l.status = 'archived'").fetchall():
        if records != malformed + normalised or rows != malformed:
            found.append(f"batch {batch_id}: records {records}, malformed {malformed} ({rows} rows), "
                         f"normalised {normalised}")
    return found


def store_violations(database: Path, views: list[str]) -> list[str]:
    con = duckdb.connect(str(database), read_only=True)
    try:
        return violations(con, views)
    finally:
        con.close()
