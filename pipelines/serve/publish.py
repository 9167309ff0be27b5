"""Publishing committed views to PostgreSQL, for production readers (CONCEPTS §4).

After each DuckDB commit, every view the pass changed is published in ONE PostgreSQL transaction
that also moves its row of `inorder_published(view, entry_idx, batch_id, published_at)`, so a
reader's snapshot shows a view exactly as DuckDB had it after `entry_idx`, never part of a batch.

What travels is what changed, sent with binary COPY into a staging table and merged:

- **delta** (PostgreSQL is at the view's entry before the pass): the rows of the streams the pass
  walked (keyed tables), the rows it appended, and the absolute values of the aggregate keys it added to;
- **catch-up** (publications were missed, e.g. a crash after the DuckDB commit): the rows of every
  stream whose watermark moved after the published entry, and whole aggregate tables;
- **full** (nothing published yet, `inorder publish --full`, a rebuilt view): every row, replacing
  what PostgreSQL had, in one transaction.

Aggregates are always published as absolute values, and a publication applies only from the entry
PostgreSQL says it holds (read under a row lock in the same transaction), so nothing is applied twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Literal, Sequence

import duckdb

from pipelines.config import Settings
from pipelines.engine.commit import pass_rows_sql, walked_streams_sql
from pipelines.engine.pass_data import OutputKind
from pipelines.faults import crash_point
from pipelines.view import Table, View, check_identifier

Mode = Literal["delta", "catch-up", "full"]
PUBLISHED_TABLE = "inorder_published"
_FETCH = 50_000

# DuckDB column type -> PostgreSQL type, as `format_type` spells it (to compare with an existing table)
_PG_TYPES = {"VARCHAR": "text", "BIGINT": "bigint", "INTEGER": "integer", "DOUBLE": "double precision",
             "BOOLEAN": "boolean", "DATE": "date", "TIMESTAMPTZ": "timestamp with time zone"}


# ... and the name binary COPY knows it by
_COPY_TYPES = {"VARCHAR": "text", "BIGINT": "int8", "INTEGER": "int4", "DOUBLE": "float8", "BOOLEAN": "bool",
               "DATE": "date", "TIMESTAMPTZ": "timestamptz"}


def pg_type(sql_type: str) -> str:
    if sql_type.startswith("DECIMAL"):
        return "numeric" + sql_type[len("DECIMAL"):]
    return _PG_TYPES[sql_type]


def _copy_type(sql_type: str) -> str:
    return "numeric" if sql_type.startswith("DECIMAL") else _COPY_TYPES[sql_type]


class PublishError(RuntimeError):
    """The PostgreSQL side cannot take a publication (unreachable, or a table that does not match its view)."""


class TableMismatch(PublishError):
    """A view's PostgreSQL table has other columns or keys than the view declares: that view waits for
    `inorder publish --full`, the others go on."""


@dataclass(frozen=True)
class ServeTarget:
    """Where views are published: a libpq connection string and a schema."""

    dsn: str
    schema: str = "public"

    @classmethod
    def of(cls, settings: Settings) -> "ServeTarget | None":
        """INORDER_SERVE_POSTGRES (a libpq connection string; unset: no publishing) and INORDER_SERVE_SCHEMA."""
        if not settings.serve_postgres:
            return None
        return cls(settings.serve_postgres, check_identifier(settings.serve_schema, "INORDER_SERVE_SCHEMA"))

    def qualified(self, name: str) -> str:
        return f'"{self.schema}"."{name}"'


@dataclass(frozen=True)
class Publication:
    """One view published in one PostgreSQL transaction."""

    view: str
    entry_idx: int
    batch_id: str
    mode: Mode
    rows: int
    seconds: float


@dataclass(frozen=True)
class Position:
    """A view's newest committed entry (DuckDB) and published entry (PostgreSQL); `behind` counts the
    view's ledger entries in between."""

    view: str
    committed: int | None
    published: int | None
    behind: int

    @property
    def current(self) -> bool:
        return self.behind == 0


@dataclass(frozen=True)
class Positions:
    """What `read_positions` found: nothing when publishing is not `configured`; the `error`'s text when
    PostgreSQL cannot be read; else the `entries`, one per view asked about, in that order."""

    configured: bool
    entries: tuple[Position, ...] = ()
    error: str | None = None

    def of(self, view: str) -> Position | None:
        """The view's position (None when it was not read)."""
        return next((p for p in self.entries if p.view == view), None)

    @property
    def behind(self) -> list[Position]:
        """The views PostgreSQL shows an older entry of than DuckDB."""
        return [p for p in self.entries if not p.current]


def committed_positions(con: duckdb.DuckDBPyConnection, views: Iterable[str]) -> dict[str, tuple[int, str]]:
    """view -> (newest ledger entry, its batch id) in DuckDB, for the views with any."""
    rows = con.execute("SELECT view, max(entry_idx), arg_max(batch_id, entry_idx) FROM inorder.batches "
                       "WHERE list_contains(?, view) GROUP BY view", [list(views)]).fetchall()
    return {view: (entry_idx, batch_id) for view, entry_idx, batch_id in rows}


class Publisher:
    """A PostgreSQL connection that publishes views from a DuckDB store connection (the writer's)."""

    def __init__(self, target: ServeTarget, connect_timeout: float = 10.0) -> None:
        import psycopg

        self.target = target
        try:
            self.pg = psycopg.connect(target.dsn, connect_timeout=int(max(connect_timeout, 1)),
                                      application_name="inorder publish")
        except psycopg.Error as exc:
            raise PublishError(f"cannot connect to PostgreSQL (INORDER_SERVE_POSTGRES): "
                               f"{' '.join(str(exc).split())}") from None
        self._published_ready = False  # inorder_published exists (checked once per connection)
        self._views_ready: set[str] = set()
        self.refused: dict[str, str] = {}  # view -> why it was not published (TableMismatch)

    def close(self) -> None:
        self.pg.close()

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------------

    def _create_published(self) -> None:
        if self._published_ready:
            return
        with self.pg.transaction():
            self.pg.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.target.schema}"')
            self.pg.execute(f"CREATE TABLE IF NOT EXISTS {self.target.qualified(PUBLISHED_TABLE)} ("
                            "view text PRIMARY KEY, entry_idx bigint NOT NULL, batch_id text, "
                            "published_at timestamptz NOT NULL)")
        self._published_ready = True

    def _table_ddl(self, table: Table) -> list[str]:
        cols = ", ".join(f'"{c}" {pg_type(t)}' + (" NOT NULL" if c in table.key_set else "")
                         for c, t in table.sql_types.items())
        pk = ", ".join(f'"{c}"' for c in table.primary_key)
        ddl = [f"CREATE TABLE {self.target.qualified(table.name)} ({cols}, PRIMARY KEY ({pk}))"]
        if table.stream_key is not None and table.primary_key[0] != table.stream_key:
            # publications replace a stream's rows: find them without a scan
            ddl.append(f'CREATE INDEX ON {self.target.qualified(table.name)} ("{table.stream_key}")')
        return ddl

    def _shape(self, table: Table) -> tuple[list[tuple[str, str]], list[str]] | None:
        """(columns with types, primary key) of the PostgreSQL table, None when there is none."""
        exists = self.pg.execute("SELECT to_regclass(%s)", [f'"{self.target.schema}"."{table.name}"']).fetchone()[0]
        if exists is None:
            return None
        columns = self.pg.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", [f'"{self.target.schema}"."{table.name}"']
        ).fetchall()
        key = [r[0] for r in self.pg.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)", [f'"{self.target.schema}"."{table.name}"']).fetchall()]
        return [tuple(c) for c in columns], key

    def _prepare_view(self, view: View, recreate: bool) -> None:
        """Create the view's tables in PostgreSQL (inside the caller's transaction). With `recreate`,
        a table whose shape differs from its declaration is dropped and made again; without, it is refused.
        Checked once per view and connection."""
        if view.name in self._views_ready and not recreate:
            return
        for table in view.tables:
            wanted = ([(c, pg_type(t)) for c, t in table.sql_types.items()], list(table.primary_key))
            shape = self._shape(table)
            if shape == wanted:
                continue
            if shape is not None:
                if not recreate:
                    raise TableMismatch(
                        f"PostgreSQL table {self.target.schema}.{table.name} does not match view {view.name}'s "
                        f"declaration: run `inorder publish --full {view.name}` to replace it")
                self.pg.execute(f"DROP TABLE {self.target.qualified(table.name)}")
            for statement in self._table_ddl(table):
                self.pg.execute(statement)
        self._views_ready.add(view.name)  # (a transaction that rolls back ends this Publisher's use)

    # -- positions ------------------------------------------------------------------------------------

    def published(self) -> dict[str, int]:
        """view -> the entry its PostgreSQL tables show."""
        self._create_published()
        with self.pg.transaction():
            rows = self.pg.execute(f"SELECT view, entry_idx FROM {self.target.qualified(PUBLISHED_TABLE)}").fetchall()
        return dict(rows)

    def positions(self, con: duckdb.DuckDBPyConnection, views: Sequence[View]) -> list[Position]:
        committed = committed_positions(con, [v.name for v in views])
        published = self.published()
        positions = []
        for view in views:
            entry = committed.get(view.name, (None, None))[0]
            done = published.get(view.name)
            behind = 0 if entry is None else con.execute(
                "SELECT count(*) FROM inorder.batches WHERE view = ? AND entry_idx > ?",
                [view.name, -1 if done is None else done]).fetchone()[0]
            positions.append(Position(view.name, entry, done, behind))
        return positions

    # -- publishing -----------------------------------------------------------------------------------

    def publish(self, con: duckdb.DuckDBPyConnection, views: Sequence[View], pass_start: dict[str, int] | None = None,
                full: bool = False) -> list[Publication]:
        """Bring each view's PostgreSQL side to DuckDB's newest committed entry, one transaction per view.

        `pass_start`: view -> the first entry of the pass just committed, while `pass_out` is still
        registered on `con`: a view PostgreSQL holds up to just before it gets the pass's delta."""
        self._create_published()
        committed = committed_positions(con, [v.name for v in views])
        publications = []
        for view in views:
            if view.name not in committed and not full:
                continue
            entry_idx, batch_id = committed.get(view.name, (0, None))
            crash_point("publish.begun")
            try:
                publication = self._publish_view(con, view, entry_idx, batch_id, (pass_start or {}).get(view.name),
                                                 full)
            except TableMismatch as exc:
                self.refused[view.name] = str(exc)
                continue
            self.refused.pop(view.name, None)
            if publication is not None:
                publications.append(publication)
            crash_point("publish.committed")
        return publications

    def _publish_view(self, con: duckdb.DuckDBPyConnection, view: View, entry_idx: int, batch_id: str | None,
                      pass_start: int | None, full: bool) -> Publication | None:
        started = time.perf_counter()
        published = self.target.qualified(PUBLISHED_TABLE)
        rebased = _rebased_at(con, view)
        with self.pg.transaction():
            row = self.pg.execute(f"SELECT entry_idx, published_at FROM {published} WHERE view = %s FOR UPDATE",
                                  [view.name]).fetchone()
            done, published_at = (None, None) if row is None else row
            stale = rebased is not None and published_at is not None and published_at < rebased
            full = full or stale  # PostgreSQL holds the view as it was before a rebuild or migration
            if done == entry_idx and not full:
                return None
            if full or done is None or done > entry_idx:
                mode: Mode = "full"
            elif pass_start is not None and done == _entry_before(con, view, pass_start):
                mode = "delta"
            else:
                mode = "catch-up"
            self._prepare_view(view, recreate=full)
            rows = sum(self._publish_table(con, view, table, mode, done) for table in view.tables)
            crash_point("publish.staged")
            self.pg.execute(
                f"INSERT INTO {published} (view, entry_idx, batch_id, published_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (view) DO UPDATE SET entry_idx = excluded.entry_idx, batch_id = excluded.batch_id, "
                "published_at = excluded.published_at",
                [view.name, entry_idx, batch_id, datetime.now(timezone.utc)])
        return Publication(view.name, entry_idx, batch_id or "", mode, rows, time.perf_counter() - started)

    def _publish_table(self, con: duckdb.DuckDBPyConnection, view: View, table: Table, mode: Mode,
                       done: int | None) -> int:
        """Stage the table's changed rows and merge them; returns how many rows travelled."""
        target = self.target.qualified(table.name)
        cols = ", ".join(f'"{c}"' for c in table.columns)
        own = f'SELECT {cols} FROM "{table.name}"'
        stream_scope = None  # the streams whose rows are replaced (None: none; "all": every row)
        if mode == "full" or (mode == "catch-up" and table.kind == "aggregate"):
            rows_sql, params, stream_scope = own, [], "all"
        elif table.kind == "aggregate":  # delta: absolute values of the keys the pass added to
            changed = " AND ".join(f'a."{c}" = p."{c}"' for c in table.primary_key)
            rows_sql = (f'{own} a WHERE EXISTS (SELECT 1 FROM '
                        f"({pass_rows_sql(view, table, OutputKind.AGGREGATE)}) p WHERE {changed})")
            params = []
        elif table.kind == "append" and mode == "delta":
            rows_sql, params = f"SELECT {cols} FROM ({pass_rows_sql(view, table, OutputKind.ROWS)})", []
        else:  # a keyed table's delta, or a stream table's catch-up: the changed streams' rows
            key_type = table.sql_types[table.stream_key]
            if mode == "delta":
                streams, params = f"SELECT DISTINCT w.stream_id FROM ({walked_streams_sql(view)}) w", []
            else:
                streams = ("SELECT w.stream_id FROM inorder.watermarks w WHERE w.view = ? AND w.updated_entry > ?")
                params = [view.name, done]
            stream_scope = (f"SELECT CAST(s.stream_id AS {key_type}) FROM ({streams}) s", list(params))
            rows_sql = (f'{own} t WHERE t."{table.stream_key}" IN '
                        f"(SELECT CAST(s.stream_id AS {key_type}) FROM ({streams}) s)")
        stage = f"inorder_stage_{table.name}"
        self.pg.execute(f'CREATE TEMP TABLE "{stage}" (LIKE {target}) ON COMMIT DROP')
        sent = self._copy(f'"{stage}"', table.sql_types, con.execute(rows_sql, params))
        if stream_scope == "all":
            self.pg.execute(f"DELETE FROM {target}")
        elif stream_scope is not None:
            scope_sql, scope_params = stream_scope
            self.pg.execute(f'CREATE TEMP TABLE "inorder_scope" ("{table.stream_key}" '
                            f"{pg_type(table.sql_types[table.stream_key])}) ON COMMIT DROP")
            self._copy('"inorder_scope"', {table.stream_key: table.sql_types[table.stream_key]},
                       con.execute(scope_sql, scope_params))
            self.pg.execute(f'DELETE FROM {target} t USING "inorder_scope" s '
                            f'WHERE t."{table.stream_key}" = s."{table.stream_key}"')
            self.pg.execute('DROP TABLE "inorder_scope"')
        if table.kind == "aggregate" and stream_scope is None:
            keys = ", ".join(f'"{c}"' for c in table.primary_key)
            updates = ", ".join(f'"{c}" = excluded."{c}"' for c in table.value_columns) or None
            conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
            self.pg.execute(f'INSERT INTO {target} SELECT * FROM "{stage}" ON CONFLICT ({keys}) {conflict}')
        else:
            self.pg.execute(f'INSERT INTO {target} SELECT * FROM "{stage}"')
        self.pg.execute(f'DROP TABLE "{stage}"')
        return sent

    def _copy(self, relation: str, columns: dict[str, str], cursor: duckdb.DuckDBPyConnection) -> int:
        """Binary COPY of a DuckDB result into a PostgreSQL relation, in chunks; returns the row count."""
        names = ", ".join(f'"{c}"' for c in columns)
        types = [_copy_type(t) for t in columns.values()]
        sent = 0
        with self.pg.cursor().copy(f"COPY {relation} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for chunk in _chunks(cursor):
                for row in chunk:
                    copy.write_row(row)
                sent += len(chunk)
        return sent


def _rebased_at(con: duckdb.DuckDBPyConnection, view: View) -> datetime | None:
    """When the view's rows were last replaced as a whole (a rebuild's swap, a migration): a PostgreSQL
    copy published before it is published again in full."""
    row = con.execute("SELECT recorded_at FROM inorder.view_versions WHERE view = ?", [view.name]).fetchone()
    return row[0] if row else None


def _chunks(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple]]:
    while chunk := cursor.fetchmany(_FETCH):
        yield chunk


def _entry_before(con: duckdb.DuckDBPyConnection, view: View, entry_idx: int) -> int | None:
    """The view's newest ledger entry before `entry_idx` (what it showed before the pass that began there)."""
    return con.execute("SELECT max(entry_idx) FROM inorder.batches WHERE view = ? AND entry_idx < ?",
                       [view.name, entry_idx]).fetchone()[0]


def describe(publications: Sequence[Publication]) -> str:
    return "; ".join(f"{p.view} to entry {p.entry_idx} ({p.mode}, {p.rows} rows, {p.seconds:.2f}s)"
                     for p in publications)



class Publishing:
    """The PostgreSQL side of one projection (nothing when INORDER_SERVE_POSTGRES is unset).

    DuckDB stays the source of truth: when publishing fails, the projection goes on and the error is
    kept for the run's report. When PostgreSQL cannot be reached, no more publication is tried in
    this projection; a view refused for a table that does not match waits alone. The next run or
    `inorder publish` catches up from `inorder_published`."""

    def __init__(self, say: Callable[[str], None], target: ServeTarget | None) -> None:
        self.target = target
        self.say = say
        self.error: str | None = None
        self.publications: list[Publication] = []
        self.seconds = 0.0
        self._publisher: Publisher | None = None
        self._down = False
        self._refusals: set[str] = set()

    @property
    def active(self) -> bool:
        return self.target is not None and not self._down

    def _do(self, action: Callable[[Publisher], list[Publication] | None]) -> None:
        import psycopg

        if not self.active:
            return
        started = time.perf_counter()
        try:
            if self._publisher is None:
                self._publisher = Publisher(self.target)
            done = action(self._publisher) or []
        except (PublishError, psycopg.Error) as exc:
            self._failed(" ".join(str(exc).split()) or type(exc).__name__)
            self._down = True
            self.close()
            return
        finally:
            self.seconds += time.perf_counter() - started
        self.publications.extend(done)
        if done:
            self.say(f"published {describe(done)}")
        for view, reason in self._publisher.refused.items():
            if view not in self._refusals:  # once per view, not at every pass
                self._refusals.add(view)
                self._failed(reason)

    def _failed(self, reason: str) -> None:
        self.error = self.error or reason
        self.say(f"publishing to PostgreSQL failed: {reason}; DuckDB is committed, and the next run "
                 "or `inorder publish` catches up")

    def publish(self, con: duckdb.DuckDBPyConnection, views: Sequence[View], pass_start: dict[str, int] | None = None,
                full: bool = False) -> None:
        self._do(lambda publisher: publisher.publish(con, views, pass_start, full))

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None


def format_positions(positions: Sequence[Position]) -> list[str]:
    lines = []
    for p in positions:
        lag = "current" if p.current else f"{p.behind} entries behind DuckDB (entry {p.committed})"
        lines.append(f"{p.view}: published to PostgreSQL up to entry "
                     f"{'-' if p.published is None else p.published}, {lag}")
    return lines


def read_positions(con: duckdb.DuckDBPyConnection, views: Sequence[View], settings: Settings) -> Positions:
    """Each view's published entry against DuckDB's (`inorder status`, the views' metadata, the
    `published` check), or that publishing is not configured, or why PostgreSQL cannot be read."""
    target = ServeTarget.of(settings)
    if target is None:
        return Positions(configured=False)
    import psycopg  # half a second of imports that a store without PostgreSQL never needs (`inorder status`)

    try:
        with Publisher(target, connect_timeout=5) as publisher:
            return Positions(True, tuple(publisher.positions(con, views)))
    except (PublishError, psycopg.Error) as exc:
        return Positions(True, error=" ".join(str(exc).split()) or type(exc).__name__)
