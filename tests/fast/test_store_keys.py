"""Which read-store tables carry a PRIMARY KEY (docs/STORE.md): the ledger, the ingest log and aggregate
tables (their commit upserts on it); not watermarks, pending, keyed and append tables, which the commit
keeps unique by construction (and the `keys_unique` asset check watches). A store made when they had one
loses it at the writer's open, its rows kept."""

from __future__ import annotations

import duckdb

from pipelines.store.database import Store
from tests.domains import BANK_VIEWS
from tests.harness import fresh_home

# how c8cd829 made the engine's buffers and watermarks (before `attempts` was added)
KEYED_STATE = """
CREATE SCHEMA inorder;
CREATE TABLE inorder.watermarks (
    view VARCHAR NOT NULL, stream_id VARCHAR NOT NULL, stream_type VARCHAR, last_seq BIGINT NOT NULL,
    blocked_at BIGINT, blocked_since TIMESTAMPTZ, parked BOOLEAN NOT NULL DEFAULT false,
    pending_count BIGINT NOT NULL DEFAULT 0, updated_entry BIGINT, prev_last_seq BIGINT,
    PRIMARY KEY (view, stream_id));
CREATE TABLE inorder.pending (
    view VARCHAR NOT NULL, stream_id VARCHAR NOT NULL, seq BIGINT NOT NULL, stream_type VARCHAR,
    event_type VARCHAR, payload VARCHAR, occurred_at VARCHAR, event_id VARCHAR, batch_id VARCHAR,
    line BIGINT, entry_idx BIGINT, PRIMARY KEY (view, stream_id, seq));
INSERT INTO inorder.watermarks (view, stream_id, stream_type, last_seq, pending_count)
    VALUES ('accounts', 'a-1', 'account', 3, 1);
INSERT INTO inorder.pending (view, stream_id, seq, stream_type, event_type, payload)
    VALUES ('accounts', 'a-1', 5, 'account', 'Deposited', '{"amount":1}');
"""


def primary_keys(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    return set(con.execute("SELECT schema_name, table_name FROM duckdb_constraints() "
                           "WHERE constraint_type = 'PRIMARY KEY'").fetchall())


def test_a_store_made_with_primary_keys_loses_the_unneeded_ones_at_the_writers_open_and_keeps_its_rows(tmp_path):
    home = fresh_home(tmp_path)
    con = duckdb.connect(str(home.database))
    con.execute(KEYED_STATE)
    for view in BANK_VIEWS:  # the view tables as older code declared them: every one with its key
        for table in view.tables:
            columns = ", ".join(f'"{c}" {t}' for c, t in table.sql_types.items())
            key = ", ".join(f'"{c}"' for c in table.primary_key)
            con.execute(f'CREATE TABLE "{table.name}" ({columns}, PRIMARY KEY ({key}))')
    con.execute("INSERT INTO accounts (account_id, owner, balance, status, version, event_count) "
                "VALUES ('a-1', 'ada', 1.50, 'open', 3, 3)")
    con.close()

    with Store.open(home, BANK_VIEWS) as store:
        con = store.con
        keys = primary_keys(con)
        assert not keys & {("inorder", "watermarks"), ("inorder", "pending"), ("main", "accounts"),
                           ("main", "account_activity")}
        assert {("inorder", "batches"), ("inorder", "ingest_log"), ("main", "daily_totals")} <= keys
        assert con.execute("SELECT view, stream_id, last_seq, pending_count, attempts FROM inorder.watermarks"
                           ).fetchall() == [("accounts", "a-1", 3, 1, 0)]
        assert con.execute("SELECT stream_id, seq FROM inorder.pending").fetchall() == [("a-1", 5)]
        assert con.execute("SELECT account_id, owner, version FROM accounts").fetchall() == [("a-1", "ada", 3)]
        not_null = set(con.execute("SELECT table_name, constraint_column_names[1] FROM duckdb_constraints() "
                                   "WHERE constraint_type = 'NOT NULL'").fetchall())
        assert {("watermarks", "view"), ("watermarks", "stream_id"), ("pending", "seq"),
                ("accounts", "account_id")} <= not_null
    with Store.open(home, BANK_VIEWS) as store:  # a second open finds nothing to do
        assert primary_keys(store.con) == keys
