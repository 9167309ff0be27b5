"""Where the read store keeps things: the engine's schemas and tables, and a projection's `Layout`
(the live views', or a rebuild's shadow beside them)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

import duckdb

from pipelines.faults import crash_point
from pipelines.message import Message
from pipelines.records import STORED_WATERMARK, WatermarkRecord, ddl_columns

# The log of what arrived: shared by the live views and by a rebuild's shadow.
INGEST_DDL = """
CREATE SCHEMA IF NOT EXISTS inorder;
CREATE TABLE IF NOT EXISTS inorder.ingest_log (
    entry_idx BIGINT PRIMARY KEY, batch_id VARCHAR NOT NULL UNIQUE, kind VARCHAR NOT NULL,
    received_at TIMESTAMPTZ NOT NULL, file_name VARCHAR, bytes BIGINT, sha256 VARCHAR,
    records BIGINT NOT NULL DEFAULT 0, malformed BIGINT NOT NULL DEFAULT 0, normalised BIGINT NOT NULL DEFAULT 0,
    status VARCHAR NOT NULL, reason VARCHAR, target_view VARCHAR, target_stream VARCHAR);
-- added later (stores made before it get it on open): the file's mtime when it was hashed at ingest
ALTER TABLE inorder.ingest_log ADD COLUMN IF NOT EXISTS mtime_ns BIGINT;
-- added later: a batch's normalised messages per stream type (what `unrouted` is reported by; stores made
-- before it are filled in from the archive at a writer's open), and the entry a re-ingest supersedes
ALTER TABLE inorder.ingest_log ADD COLUMN IF NOT EXISTS stream_types MAP(VARCHAR, BIGINT);
ALTER TABLE inorder.ingest_log ADD COLUMN IF NOT EXISTS reingest_of BIGINT;
CREATE SEQUENCE IF NOT EXISTS inorder.error_ids;
-- added later (stores made before it get it on open, empty): each archived batch's distinct streams per
-- stream type, and a sketch of them, for planning passes without reading the archive (pipelines/engine/planning.py)
CREATE TABLE IF NOT EXISTS inorder.ingest_streams (
    entry_idx BIGINT NOT NULL, stream_type VARCHAR NOT NULL, streams BIGINT NOT NULL, sketch UBIGINT[] NOT NULL,
    PRIMARY KEY (entry_idx, stream_type));
-- added later (stores made before it are filled in from the archive at a writer's open): each archived batch's
-- seq range per stream, so that a pass finds the copy walked at a seq its messages resend by reading only the
-- archived batches that hold it (pipelines/engine/inputs.py, `pass_walked`)
CREATE TABLE IF NOT EXISTS inorder.ingest_seq_ranges (
    entry_idx BIGINT NOT NULL, stream_id VARCHAR NOT NULL, min_seq BIGINT NOT NULL, max_seq BIGINT NOT NULL);
"""

# The views' projection state, per view (watermarks and pending carry no PRIMARY KEY: a commit deletes
# each walked (view, stream) before it inserts it, so they are unique by construction, and DuckDB's index
# upkeep made most of a large commit's cost; the `keys_unique` asset check watches it, docs/STORE.md): in schema `inorder` for the live views, and in a schema of
# its own for a view being rebuilt (its shadow; error ids come from the one sequence, so they stay unique).
_STATE_DDL = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.watermarks ({watermarks});
CREATE TABLE IF NOT EXISTS {schema}.pending ({pending});
{logs}CREATE TABLE IF NOT EXISTS {schema}.batches (
    batch_id VARCHAR NOT NULL, view VARCHAR NOT NULL, entry_idx BIGINT NOT NULL, kind VARCHAR NOT NULL,
    received_at TIMESTAMPTZ NOT NULL, records BIGINT, malformed BIGINT, normalised BIGINT,
    selected BIGINT, unrouted BIGINT, applied BIGINT, ignored BIGINT, handler_error BIGINT,
    duplicate BIGINT, late BIGINT, conflict BIGINT, pending BIGINT, gaps_skipped BIGINT,
    committed_at TIMESTAMPTZ,
    pending_now BIGINT GENERATED ALWAYS AS (pending) VIRTUAL,  -- the name CONCEPTS §3 uses
    PRIMARY KEY (batch_id, view));
-- added later (stores made before it get it on open): a parked message's failed attempts so far (its column
-- comes last there, and where a new store has it: the engine reads and writes the state tables by name)
ALTER TABLE {schema}.watermarks ADD COLUMN IF NOT EXISTS attempts BIGINT DEFAULT 0;
-- which code built each view's rows (pipelines/store/versions.py)
CREATE TABLE IF NOT EXISTS {schema}.view_versions (
    view VARCHAR PRIMARY KEY, fingerprint VARCHAR NOT NULL, version VARCHAR, tables VARCHAR NOT NULL,
    code VARCHAR, recorded_at TIMESTAMPTZ NOT NULL, newer_fingerprint VARCHAR, newer_since_entry BIGINT,
    newer_since_batch VARCHAR);
-- added later: the INORDER_VIEWS module that loaded the view, so a refusal can name the module to load
ALTER TABLE {schema}.view_versions ADD COLUMN IF NOT EXISTS module VARCHAR;
"""


class LogColumn(NamedTuple):
    """A column of a log table (`inorder.errors`, `inorder.gaps`), described once for both the store's DDL
    and the Dagster asset's column schema (assets/logs.py): its name, SQL type, what it holds, the rest of
    its DDL (`clause`: constraint, default, generation) and whether it was `added` after the table was first
    made (stores made before get it on open, with ALTER TABLE … ADD COLUMN, at the table's end)."""

    name: str
    sql_type: str
    description: str
    clause: str = ""
    added: bool = False


ERRORS_COLUMNS = (
    LogColumn("error_id", "BIGINT", "row id, in the order rows were logged",
              "PRIMARY KEY DEFAULT nextval('inorder.error_ids')"),
    LogColumn("view", "VARCHAR", "the view (NULL for malformed records, which no view saw)"),
    LogColumn("stream_id", "VARCHAR", "the message's stream"),
    LogColumn("seq", "BIGINT", "the message's seq"),
    LogColumn("kind", "VARCHAR", "malformed, handler_error, late or conflict", "NOT NULL"),
    LogColumn("event_type", "VARCHAR", "the message's event type"),
    LogColumn("payload", "VARCHAR", "the message's payload (JSON)"),
    LogColumn("occurred_at", "VARCHAR", "the message's occurred_at"),
    LogColumn("event_id", "VARCHAR", "the message's event id"),
    LogColumn("batch_id", "VARCHAR", "the batch the message (or record) came in"),
    LogColumn("line", "BIGINT", "its line in that batch"),
    LogColumn("raw", "VARCHAR", "a malformed record's text, truncated to 4 KiB"),
    LogColumn("reason", "VARCHAR", "why: the malformation, the handler's message, the skipped gap, the first copy"),
    LogColumn("exception_type", "VARCHAR", "a handler error's exception class"),
    LogColumn("message", "VARCHAR", "a handler error's message"),
    LogColumn("traceback", "VARCHAR", "a handler error's traceback"),
    LogColumn("logged_at", "TIMESTAMPTZ", "logical time of the entry that logged it"),
    LogColumn("entry_idx", "BIGINT", "that entry"),
    # each handler_error row's class (reject: the handler refused the message; bug: any other exception) and attempt
    LogColumn("error_class", "VARCHAR", "reject (business refusal) or bug", added=True),
    LogColumn("attempt", "BIGINT", "1, 2, … for a parked message retried", added=True),
    # a malformed row stops counting once a re-ingest inspected its line again (pipelines/engine/ingest.py)
    LogColumn("superseded_by", "VARCHAR", "a malformed row: the re-ingest (its batch id) that inspected the line "
              "again; the line counts there, delivered or malformed anew", added=True),
)
GAPS_COLUMNS = (
    LogColumn("view", "VARCHAR", "the view", "NOT NULL"),
    LogColumn("stream_id", "VARCHAR", "the stream", "NOT NULL"),
    LogColumn("first_missing", "BIGINT", "first seq skipped", "NOT NULL"),
    LogColumn("last_missing", "BIGINT", "last seq skipped", "NOT NULL"),
    LogColumn("waited_seconds", "DOUBLE", "logical seconds the stream waited for them", "NOT NULL"),
    LogColumn("reason", "VARCHAR", "timeout (gap_timeout passed) or capacity (over max_pending)", "NOT NULL"),
    LogColumn("batch_id", "VARCHAR", "the entry whose walk skipped them"),
    LogColumn("skipped_at", "TIMESTAMPTZ", "logical time of that entry"),
    LogColumn("entry_idx", "BIGINT", "that entry"),
    LogColumn("waited", "DOUBLE", "waited_seconds, under the name CONCEPTS §2 uses",
              "GENERATED ALWAYS AS (waited_seconds) VIRTUAL"),
)
LOG_COLUMNS = {"errors": ERRORS_COLUMNS, "gaps": GAPS_COLUMNS}


def mark_superseded_malformed(con: Any, reingest_entry: int | None = None) -> None:
    """Mark the malformed rows of each entry a re-ingest superseded (of the re-ingest `reingest_entry`, or of
    every re-ingest: a store made before rows were marked) with the re-ingest's batch id. The re-ingest
    inspected those lines again, so they count there: `status` counts a batch's newest entry, and
    `inorder errors` and the `errors` asset leave marked rows out."""
    con.execute("UPDATE inorder.errors e SET superseded_by = r.batch_id FROM inorder.ingest_log r "
                "WHERE r.reingest_of = e.entry_idx AND e.kind = 'malformed' AND e.superseded_by IS NULL "
                "AND (?::BIGINT IS NULL OR r.entry_idx = ?)", [reingest_entry, reingest_entry])


def log_ddl(table: str, columns: tuple[LogColumn, ...]) -> str:
    """The DDL of a log table in schema `{schema}` (a template, as STATE_DDL): its CREATE TABLE, then an
    ALTER TABLE for each column added later."""
    def column(c: LogColumn) -> str:
        return " ".join(filter(None, (c.name, c.sql_type, c.clause)))

    created = ",\n    ".join(column(c) for c in columns if not c.added)
    return "".join([f"CREATE TABLE IF NOT EXISTS {{schema}}.{table} (\n    {created});\n",
                    *(f"ALTER TABLE {{schema}}.{table} ADD COLUMN IF NOT EXISTS {column(c)};\n"
                      for c in columns if c.added)])


# a walked stream's watermark (its prev_last_seq: the last_seq it moved from) and a buffered message, as stored
_WATERMARKS = [*ddl_columns(WatermarkRecord, WatermarkRecord._fields, {
    "view": "NOT NULL", "stream_id": "NOT NULL", "last_seq": "NOT NULL", "parked": "NOT NULL DEFAULT false",
    "pending_count": "NOT NULL DEFAULT 0", "attempts": "DEFAULT 0"}, STORED_WATERMARK), "prev_last_seq BIGINT"]
_PENDING = ["view VARCHAR NOT NULL", "stream_id VARCHAR NOT NULL", *ddl_columns(Message, Message._fields,
                                                                               {"seq": "NOT NULL"})]
STATE_DDL = (_STATE_DDL.replace("{logs}", "".join(log_ddl(t, c) for t, c in LOG_COLUMNS.items()))
             .replace("{watermarks}", ", ".join(_WATERMARKS)).replace("{pending}", ", ".join(_PENDING)))
KEYLESS_STATE_TABLES = ("watermarks", "pending")  # with a PRIMARY KEY in stores made before
STATE_TABLES = ("watermarks", "pending", "errors", "gaps", "batches", "view_versions")
ENGINE_DDL = INGEST_DDL + STATE_DDL.format(schema="inorder")


@dataclass(frozen=True)
class Layout:
    """Where a projection reads and writes a view's state and tables: the live view's (schema
    `inorder`, and the default schema for its tables), or a rebuild's shadow (`Layout.shadow`)."""

    state: str = "inorder"
    tables: str = "main"
    scratch: str = "pass"  # its pass's scratch folder, under the home's scratch/

    @classmethod
    def shadow(cls, view_name: str) -> "Layout":
        schema = f"inorder_rebuild_{view_name}"
        return cls(schema, schema, f"rebuild_{view_name}")

    @property
    def live(self) -> bool:
        return self == LIVE

    def table(self, name: str) -> str:
        """A view table's qualified name."""
        return f'"{self.tables}"."{name}"'

    def newest_rows(self, name: str) -> str:
        """The qualified name of the engine's copy of each stream's newest row of the append table `name`
        (a colon cannot occur in a view table's name: no clash)."""
        return f'"{self.state}"."{name}:newest"'


LIVE = Layout()


def quoted(name: str) -> str:
    """`name` as an SQL identifier, whatever it holds."""
    return '"' + name.replace('"', '""') + '"'


def table_columns(con: Any, schema: str, table: str) -> dict[str, str]:
    """`schema.table`'s columns and their SQL types, in order; none when there is no such table. From
    `pragma_table_info`: the catalog functions (`duckdb_columns()`, `duckdb_tables()`) cost 20-35 ms at their
    first call on each connection, and a writer's open asks several times (1-2 ms this way)."""
    try:
        return dict(con.execute("SELECT name, type FROM pragma_table_info(?)",
                                [f"{quoted(schema)}.{quoted(table)}"]).fetchall())
    except duckdb.CatalogException:
        return {}


def drop_primary_key(con: Any, schema: str, table: str) -> None:
    """Make `schema.table` again without its PRIMARY KEY (DuckDB cannot drop one), its key columns NOT
    NULL and its rows kept, in one transaction: for a store made when the table had one. Nothing to do
    for a table without one."""
    # the table's own columns, not the catalog's constraints, which DuckDB lists for every table: every writer's
    # open asks this twice (2.2 ms a call before, 0.6 ms now, on a store of 15 tables)
    key = [name for (name,) in con.execute("SELECT name FROM pragma_table_info(?) WHERE pk",
                                           [f"{quoted(schema)}.{quoted(table)}"]).fetchall()]
    if not key:
        return
    create = con.execute("SELECT sql FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
                         [schema, table]).fetchone()[0]
    keyless = re.sub(r",\s*PRIMARY KEY\s*\([^)]*\)", "", create, count=1)
    columns = ", ".join(f'"{name}"' for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? AND NOT is_generated "
        "ORDER BY column_index", [schema, table]).fetchall())
    with transaction(con):
        con.execute(f'ALTER TABLE "{schema}"."{table}" RENAME TO "{table}:keyed"')
        con.execute(keyless)
        for name in key:
            con.execute(f'ALTER TABLE "{schema}"."{table}" ALTER COLUMN "{name}" SET NOT NULL')
        con.execute(f'INSERT INTO "{schema}"."{table}" ({columns}) SELECT {columns} FROM "{schema}"."{table}:keyed"')
        con.execute(f'DROP TABLE "{schema}"."{table}:keyed"')


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, crash: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """All or nothing: commit when the block ends, roll back when it raises (`crash`: the crash point armed
    just before the commit, pipelines/faults.py)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        if crash is not None:
            crash_point(crash)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def uncommitted(state: str, view: str) -> str:
    """The SQL condition on `inorder.ingest_log l` of an entry not yet committed for a view (`view`: a SQL
    expression, a column or `?`): archived, for every view or (an operator's retry or skip) for this one,
    and with no ledger row of the view in schema `state`."""
    return (f"l.status = 'archived' AND (l.kind NOT IN ('retry', 'skip') OR l.target_view = {view}) "
            f"AND NOT EXISTS (SELECT 1 FROM {state}.batches b WHERE b.batch_id = l.batch_id AND b.view = {view})")
