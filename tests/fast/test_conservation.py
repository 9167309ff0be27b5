"""The tests' own conservation check (tests/conservation.py) finds each kind of imbalance."""

from datetime import datetime, timezone

import duckdb
import pytest

from pipelines.store.database import ENGINE_DDL
from tests.conservation import violations

AT = datetime(2026, 11, 2, tzinfo=timezone.utc)


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute(ENGINE_DDL)
    con.execute("INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, records, malformed, "
                "normalised, status) VALUES (1, 'b1', 'batch', ?, 5, 1, 4, 'archived')", [AT])
    con.execute("INSERT INTO inorder.errors (kind, batch_id, line) VALUES ('malformed', 'b1', 3)")
    con.execute("INSERT INTO inorder.errors (view, kind, batch_id, stream_id, seq) VALUES ('v', 'late', 'b1', 's', 1)")
    # 4 selected: 1 applied, 1 late, 2 buffered
    con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at, selected, applied, "
                "ignored, handler_error, duplicate, late, conflict, pending) "
                "VALUES ('b1', 'v', 1, 'batch', ?, 4, 1, 0, 0, 0, 1, 0, 2)", [AT])
    for seq in (5, 6):
        con.execute("INSERT INTO inorder.pending (view, stream_id, seq) VALUES ('v', 's', ?)", [seq])
    return con


def test_a_balanced_store_has_no_violation(con):
    assert violations(con, ["v"]) == []


@pytest.mark.parametrize("breakage, words", [
    ("DELETE FROM inorder.pending WHERE seq = 6", "selected 4 != outcomes 2 + buffered 1"),
    ("UPDATE inorder.batches SET applied = 2", "selected 4 != outcomes 3 + buffered 2"),
    ("UPDATE inorder.batches SET pending = 3", "the ledger's newest pending 3 != 2 buffered messages"),
    ("DELETE FROM inorder.errors WHERE kind = 'late'", "1 late outcomes but 0 late error rows"),
    ("UPDATE inorder.ingest_log SET normalised = 3", "batch b1: records 5, malformed 1 (1 rows), normalised 3"),
    ("DELETE FROM inorder.errors WHERE kind = 'malformed'", "batch b1: records 5, malformed 1 (0 rows)"),
])
def test_each_imbalance_is_found(con, breakage, words):
    con.execute(breakage)
    found = violations(con, ["v"])
    assert found and words in found[0], found
