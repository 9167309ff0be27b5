"""How a view is declared: its tables, subscriptions, policies, expectations and handlers.

A view author writes a `View` in `views/`; the engine reads nothing else about it. What a column
does with a handler's value at run time is `pipelines.columns`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, Mapping, NamedTuple, Protocol, TypeVar

from pipelines.columns import decimal_precision_scale
# a handler imports them from here: Event, and Reject to refuse a message
from pipelines.events import TypedHandler, event_type_of, is_event_class
from pipelines.message import Event, Reject  # noqa: F401

TableKind = Literal["keyed", "append", "aggregate"]
OnError = Literal["skip", "park"]
OnBug = Literal["park", "skip", "fail"]
OnChange = Literal["mark", "rebuild"]

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SQL_TYPE = re.compile(r"^(VARCHAR|BIGINT|INTEGER|DOUBLE|BOOLEAN|DATE|TIMESTAMPTZ|DECIMAL\(\d{1,2},\d{1,2}\))$")


def check_identifier(name: str, what: str) -> str:
    """Names end up in SQL as identifiers, so only plain lower-case names are allowed."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"{what} {name!r} is not a valid name (lower-case letters, digits, _)")
    return name


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_TEAM = re.compile(r"^team:[A-Za-z0-9_-]+$")
_TAG = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")


class SqlType(str):
    """A column type with no Python class of its own, `INTEGER` or `DECIMAL(p, s)`: its SQL text, made only here,
    so that a type given as bare SQL text (`Column("VARCHAR")`) is told apart and refused."""


def DECIMAL(precision: int, scale: int) -> SqlType:  # noqa: N802 - named as the SQL type it stands for
    """The column type of exact numbers with `precision` digits, `scale` of them after the point."""
    return SqlType(f"DECIMAL({precision},{scale})")


INTEGER = SqlType("INTEGER")  # a 32-bit integer column (`int` alone is BIGINT)

# the column type a Python class stands for in `Column(...)`
_PYTHON_TYPES = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", date: "DATE",
                 datetime: "TIMESTAMPTZ"}


@dataclass(frozen=True)
class Column:
    """A column of a view table: its type, what it holds, and the rules its values keep.

        Column(DECIMAL(18, 2), not_null=True, min=0, doc="deposits minus withdrawals")

    type: `str`, `int` (BIGINT), `INTEGER`, `float`, `bool`, `date`, `datetime` (TIMESTAMPTZ) or
    `DECIMAL(p, s)`; a handler gets its values back as that Python type. The rules become the view's
    Great Expectations suite: not_null, min/max (inclusive), one_of (the allowed values), unique."""

    type: Any
    doc: str = ""
    not_null: bool = False
    min: Any = None
    max: Any = None
    one_of: tuple[Any, ...] | None = None
    unique: bool = False

    @property
    def sql_type(self) -> str:
        if isinstance(self.type, SqlType):
            return str(self.type)
        if self.type is Decimal:
            raise ValueError("Column(Decimal) needs a precision and scale: Column(DECIMAL(18, 2))")
        if isinstance(self.type, str):
            raise TypeError(f"Column({self.type!r}): a column's type is a Python class or inorder's own, not SQL "
                            "text: Column(str), Column(int), Column(INTEGER), Column(DECIMAL(18, 2)), …")
        sql_type = _PYTHON_TYPES.get(self.type) if isinstance(self.type, type) else None
        if sql_type is None:
            raise ValueError(f"unsupported column type {self.type!r}: str, int, INTEGER, float, bool, date, "
                             "datetime or DECIMAL(p, s)")
        return sql_type

    def expectations(self, table: str, column: str) -> list["Expectation"]:
        """The column's rules, as the expectation helpers below declare them."""
        rules = not_null(table, column) if self.not_null else []
        if self.unique:
            rules.append(unique(table, column))
        if self.min is not None or self.max is not None:
            rules.append(between(table, column, self.min, self.max))
        if self.one_of is not None:
            rules.append(in_set(table, column, self.one_of))
        return rules


H = TypeVar("H")  # the handle a handler gets for the table (`tables[ORDERS]`): KeyedTable, StreamTable…


@dataclass(frozen=True, eq=False)  # a table is its declaration: hashed as itself, a key of `Tables`
class Table(Generic[H]):
    """A read-store table of a view. Declare one with the constructor of its kind:

        ORDERS = Table.per_stream("orders", key="order_id", columns={"status": Column(str, not_null=True)})

    kind:
      - ``keyed``: rows belong to one stream (``stream_key`` holds the stream id); handlers
        get, put and delete them. `Table.per_stream` is the common case, one row per stream, keyed by
        the stream id: handlers read it as `row` and write it with `save(**changes)`.
      - ``append``: rows belong to one stream; handlers append rows and read the newest one
        (highest primary key), so the engine never loads a stream's whole history.
      - ``aggregate``: rows are shared across streams; handlers only add increments.

    columns: name -> `Column`; `sql_types` has each one's SQL type. unique: column groups whose values are
    unique together (one column's uniqueness is `Column(unique=True)`).
    """

    name: str
    columns: Mapping[str, Column]
    primary_key: tuple[str, ...]
    kind: TableKind = "keyed"
    stream_key: str | None = None
    unique: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def per_stream(cls, name: str, key: str, columns: Mapping[str, Column],
                   unique: tuple[tuple[str, ...], ...] = ()) -> "Table[StreamTable]":
        """One row per stream, keyed by the stream id in column `key` (a `str` column, added first when
        `columns` does not declare it)."""
        if key not in columns:
            columns = {key: Column(str, not_null=True, doc="the stream id"), **columns}
        elif not isinstance(columns[key], Column) or columns[key].sql_type != Column(str).sql_type:
            raise ValueError(f"table {name}: the key {key!r} holds the stream id, a str column")
        return cls(name, columns, (key,), "keyed", key, unique=unique)

    @classmethod
    def keyed(cls, name: str, columns: Mapping[str, Column], key: tuple[str, ...], stream_key: str,
              unique: tuple[tuple[str, ...], ...] = ()) -> "Table[KeyedTable]":
        """Several rows per stream, by primary key `key` (which holds `stream_key`, the stream id)."""
        return cls(name, columns, tuple(key), "keyed", stream_key, unique=unique)

    @classmethod
    def append(cls, name: str, columns: Mapping[str, Column], key: tuple[str, ...], stream_key: str,
               unique: tuple[tuple[str, ...], ...] = ()) -> "Table[AppendTable]":
        """Rows a stream appends with increasing keys; a handler reads the stream's newest."""
        return cls(name, columns, tuple(key), "append", stream_key, unique=unique)

    @classmethod
    def aggregate(cls, name: str, columns: Mapping[str, Column], key: tuple[str, ...],
                  unique: tuple[tuple[str, ...], ...] = ()) -> "Table[AggregateTable]":
        """Rows shared by every stream, by `key`; handlers add increments to the other (number) columns."""
        return cls(name, columns, tuple(key), "aggregate", unique=unique)

    def __post_init__(self) -> None:
        check_identifier(self.name, "table")
        for column, declared in self.columns.items():
            if not isinstance(declared, Column):
                raise TypeError(f"column {self.name}.{column}: {declared!r} is not a Column: declare Column(str), "
                                "Column(int), Column(DECIMAL(18, 2)), … with doc= and rules")
        object.__setattr__(self, "columns", dict(self.columns))
        object.__setattr__(self, "primary_key", tuple(self.primary_key))
        object.__setattr__(self, "unique", tuple(tuple(group) for group in self.unique))
        unknown = sorted({c for group in self.unique for c in group} - set(self.columns))
        if unknown:
            raise ValueError(f"table {self.name}: unique names unknown columns {unknown}")
        self._check_columns()

    @cached_property
    def sql_types(self) -> dict[str, str]:
        """name -> the column's SQL type, in declared order."""
        return {c: column.sql_type for c, column in self.columns.items()}

    @cached_property
    def rules(self) -> tuple["Expectation", ...]:
        """The table's data-quality rules: each column's, then the unique groups'."""
        column_rules = [rule for c, column in self.columns.items() for rule in column.expectations(self.name, c)]
        return (*column_rules, *(unique(self.name, *group) for group in self.unique))

    def _check_columns(self) -> None:
        for column, sql_type in self.sql_types.items():
            check_identifier(column, "column")
            if not _SQL_TYPE.match(sql_type):
                raise ValueError(f"column {self.name}.{column}: unsupported type {sql_type!r}")
            if sql_type.startswith("DECIMAL"):
                precision, scale = decimal_precision_scale(sql_type)
                if not 1 <= precision <= 38 or scale > precision:
                    raise ValueError(f"column {self.name}.{column}: {sql_type} needs 1 <= precision <= 38 "
                                     "and scale <= precision")
        missing = [c for c in self.primary_key if c not in self.columns]
        if not self.primary_key or missing:
            raise ValueError(f"table {self.name}: primary key {self.primary_key} not among its columns")
        if self.kind in ("keyed", "append"):
            if self.stream_key not in self.primary_key:
                raise ValueError(f"table {self.name}: a {self.kind} table needs a stream_key in its primary key")
        elif self.kind == "aggregate":
            if self.stream_key is not None:
                raise ValueError(f"table {self.name}: an aggregate table has no stream_key")
            for column in self.value_columns:  # handlers only add increments to them
                sql_type = self.sql_types[column]
                if sql_type not in ("BIGINT", "INTEGER", "DOUBLE") and not sql_type.startswith("DECIMAL"):
                    raise ValueError(f"table {self.name}: aggregate value column {column} must be a number "
                                     f"(BIGINT, INTEGER, DOUBLE or DECIMAL), not {sql_type}")
        else:
            raise ValueError(f"table {self.name}: unknown kind {self.kind!r}")

    @cached_property
    def column_set(self) -> frozenset[str]:
        return frozenset(self.columns)

    @cached_property
    def key_set(self) -> frozenset[str]:
        return frozenset(self.primary_key)

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if c not in self.primary_key)

    def ddl(self, qualified_name: str | None = None) -> str:
        """CREATE TABLE IF NOT EXISTS, under its own name or `qualified_name` (a rebuild's shadow). Only
        an aggregate table carries its PRIMARY KEY (its commit upserts on it); a keyed or append table's
        key columns are NOT NULL, and its rows unique by construction (a commit replaces a walked stream's
        keyed rows, appended keys increase), which the `keys_unique` asset check watches (docs/STORE.md)."""
        keys = set(self.primary_key)
        cols = ", ".join(f'"{c}" {t}' + (" NOT NULL" if c in keys else "") for c, t in self.sql_types.items())
        name = qualified_name or f'"{self.name}"'
        if self.kind != "aggregate":
            return f"CREATE TABLE IF NOT EXISTS {name} ({cols})"
        pk = ", ".join(f'"{c}"' for c in self.primary_key)
        return f"CREATE TABLE IF NOT EXISTS {name} ({cols}, PRIMARY KEY ({pk}))"


class Tables(dict):
    """What a handler receives: each table's handle by its declaration, `tables[ORDERS].row`, which an editor
    completes from the table's kind (its name works too, `tables["orders"]`). A dict of the handles by name, so
    that a lookup, which handlers make for nearly every message, is no Python call once a declaration is known."""

    def __init__(self, members: dict[str, Any]) -> None:
        super().__init__(members)
        self.__dict__.update(members)  # `tables.orders` too, as views written before `tables[ORDERS]` read them

    if TYPE_CHECKING:  # the handle's type, for editors; at run time dict's own lookup
        def __getitem__(self, table: Table[H] | str) -> H: ...

    def __missing__(self, table: Table[H] | str) -> H:
        """A declaration met for the first time (a table is its declaration's object: the view's own, or the one
        the handler's module holds where the view is a copy, as on an executor): found by name, then kept."""
        if not isinstance(table, Table):
            raise KeyError(table)
        handle = self[table.name]
        self[table] = handle
        return handle


@dataclass(frozen=True)
class Expectation:
    """A data-quality rule on a view table, turned into a Great Expectations suite by the checks."""

    table: str
    rule: Literal["not_null", "unique", "between", "in_set"]
    columns: tuple[str, ...]
    min_value: Any = None
    max_value: Any = None
    value_set: tuple[Any, ...] = ()


def not_null(table: str, *columns: str) -> list[Expectation]:
    return [Expectation(table, "not_null", (c,)) for c in columns]


def unique(table: str, *columns: str) -> Expectation:
    return Expectation(table, "unique", tuple(columns))


def between(table: str, column: str, min_value: Any = None, max_value: Any = None) -> Expectation:
    return Expectation(table, "between", (column,), min_value=min_value, max_value=max_value)


def in_set(table: str, column: str, values: tuple[Any, ...]) -> Expectation:
    return Expectation(table, "in_set", (column,), value_set=tuple(values))


@dataclass(frozen=True)
class AddColumn:
    """A migration: `column` of `table` (declared there, nullable: not in the primary key) was added,
    and the rows already stored stay right without it (they read NULL there). Applied with
    `ALTER TABLE … ADD COLUMN` instead of a rebuild (pipelines/store/versions.py)."""

    table: str
    column: str


def add_column(table: str, column: str) -> AddColumn:
    return AddColumn(table, column)


Handler = Callable[["Event", Any], None]


class HandlerRegistrationClosed(RuntimeError):
    """`@VIEW.on(...)` ran after the view was loaded to run (its fingerprint already taken)."""


class Handlers(Mapping[str, Handler]):
    """A view's handlers, event type -> function, which `@VIEW.on(...)` registers while the view's modules
    are imported. The registry seals it when it
    loads the view (`pipelines.registry.load_views`): a handler registered later would run unseen by the
    view's fingerprint, so it is refused (`HandlerRegistrationClosed`)."""

    __slots__ = ("_view", "_by_type", "_sealed", "get")

    def __init__(self, view: str, handlers: Mapping[str, Handler] = ()) -> None:
        self._view, self._by_type, self._sealed = view, dict(handlers), False
        self.get = self._by_type.get  # the walk looks a handler up for every message

    def __getitem__(self, event_type: str) -> Handler:
        return self._by_type[event_type]

    def __iter__(self):
        return iter(self._by_type)

    def __len__(self) -> int:
        return len(self._by_type)

    def __repr__(self) -> str:
        return f"Handlers({self._by_type!r})"

    def __reduce__(self):
        return _handlers, (self._view, self._by_type, self._sealed)

    @property
    def sealed(self) -> bool:
        return self._sealed

    def seal(self) -> None:
        self._sealed = True

    def add(self, event_type: str, handler: Handler) -> None:
        if self._sealed:
            raise HandlerRegistrationClosed(
                f"view {self._view}: on({event_type!r}) after the view was loaded to run: register its "
                "handlers in the modules that INORDER_VIEWS names, which are imported before the views load")
        if self._by_type.get(event_type, handler) is not handler:
            raise ValueError(f"view {self._view}: {event_type!r} already has a handler")
        self._by_type[event_type] = handler


def _handlers(view: str, by_type: dict[str, Handler], sealed: bool) -> Handlers:
    handlers = Handlers(view, by_type)
    handlers._sealed = sealed
    return handlers


class Thresholds(NamedTuple):
    """A rate above `warn` makes a check warn; above `error`, fail."""

    warn: float
    error: float


@dataclass(frozen=True)
class Alerts:
    """When a view's checks turn yellow or red: the share of outcomes that its handlers refused (`Reject`),
    and that arrived late, in the last run and over the last 24 h of logical time (a window's outcomes are
    every message its entries brought to an outcome, released by a tick or a retry too). A rate judged on
    fewer than `min_selected` outcomes never fails: on a small sample one refusal is a large share. Bugs
    (any other exception) have no threshold: one fails the `no_handler_bugs` check."""

    reject_rate: Thresholds = Thresholds(0.01, 0.05)
    late_rate: Thresholds = Thresholds(0.01, 0.05)
    min_selected: int = 100

    def __post_init__(self) -> None:
        for name in ("reject_rate", "late_rate"):
            warn, error = getattr(self, name)
            if not 0 <= warn <= error <= 1:
                raise ValueError(f"alerts.{name}: need 0 <= warn <= error <= 1, got {warn}, {error}")
        if self.min_selected < 1:
            raise ValueError(f"alerts.min_selected: need at least 1, got {self.min_selected}")


class KeyedTable(Protocol):
    """`tables.<name>` for a keyed table: the stream's own rows, by primary key."""

    def get(self, *key: Any) -> dict | None: ...
    def put(self, row: dict) -> None: ...
    def delete(self, *key: Any) -> None: ...
    def all(self) -> list[dict]: ...


class StreamTable(KeyedTable, Protocol):
    """`tables.<name>` for a `Table.per_stream`: the stream's one row."""

    @property
    def row(self) -> dict | None: ...
    def save(self, **changes: Any) -> None: ...
    def delete(self, *key: Any) -> None: ...


class AppendTable(Protocol):
    """`tables.<name>` for an append table: add rows with increasing keys; read the stream's newest."""

    def last(self) -> dict | None: ...
    def append(self, row: dict) -> None: ...


class AggregateTable(Protocol):
    """`tables.<name>` for an aggregate table: commutative increments shared by every stream."""

    def add(self, key: dict, **increments: Any) -> None: ...


@dataclass(frozen=True)
class View:
    """A projection: its tables, the stream types it subscribes to, its policies, and its handlers, which
    `@VIEW.on(...)` registers while the view's modules are imported (kept in the view's `Handlers`,
    sealed once the view is loaded to run; `dataclasses.replace` copies them).

    on_error: what a `Reject` does to its stream: `skip` (log it, go on) or `park` (the stream waits
    for `inorder retry`/`skip`). on_bug: the same for any other exception (a bug in the view):
    `park` (default), `skip`, or `fail` (the run fails and nothing is committed).

    version: bump it by hand when the view's results change for a reason its fingerprint cannot see
    (a helper function its handlers call, data it reads). on_change: what a run does when the code
    no longer matches what built the stored rows: `mark` (default: changed handlers go on, and the
    view is shown as built by older code since the first batch they projected; changed tables are
    refused until `inorder rebuild`), or `rebuild` (the next run rebuilds the view, with no downtime).
    migrations: the table changes that need no rebuild (`add_column`)."""

    name: str
    tables: tuple[Table, ...]
    subscribes: tuple[str, ...]
    handlers: Handlers | None = None  # made by the view; given only by `dataclasses.replace`, which copies it
    gap_timeout: float = 600.0
    max_pending: int = 10_000
    on_error: OnError = "skip"
    on_bug: OnBug = "park"
    predicate: Callable[["Event"], bool] | None = None
    alerts: Alerts = Alerts()
    # shown in the Dagster UI: who owns the view ("team:payments", "ada@example.com") and tags
    owners: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    # how fresh readers expect the view: the UI warns when no materialisation is this recent (and
    # fails past `fresh_within` twice over, or `stale_after` when given)
    fresh_within: timedelta | None = None
    stale_after: timedelta | None = None
    version: str | None = None
    on_change: OnChange = "mark"
    migrations: tuple[AddColumn, ...] = ()
    # the INORDER_VIEWS module that loaded it (set by the registry; None for a view made elsewhere): the store
    # records it, so that a refusal can name the module to load
    module: str | None = field(default=None, init=False, compare=False, repr=False)
    # what of its code decides its rows, as the registry loaded it (pipelines/store/versions.py `code_parts`):
    # a module edited while a command runs is not the code that command runs, nor what it records
    loaded_code: Mapping[str, str] | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_identifier(self.name, "view")
        if self.handlers is not None and not isinstance(self.handlers, Handlers):
            raise TypeError(f"view {self.name}: register each handler with @VIEW.on(EventClass) "
                            "(or @VIEW.on('EventType') for an untyped payload)")
        object.__setattr__(self, "handlers", Handlers(self.name, self.handlers or {}))  # its own: `on` adds to it
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "subscribes", tuple(self.subscribes))
        object.__setattr__(self, "owners", tuple(self.owners))
        object.__setattr__(self, "tags", dict(self.tags))
        object.__setattr__(self, "migrations", tuple(self.migrations))
        for owner in self.owners:  # the forms the Dagster UI accepts
            if not (isinstance(owner, str) and (_EMAIL.match(owner) or _TEAM.match(owner))):
                raise ValueError(f"view {self.name}: owner {owner!r} is neither an email address nor 'team:<name>'")
        for key, value in self.tags.items():
            if not (isinstance(key, str) and _TAG.match(key) and isinstance(value, str) and
                    (value == "" or _TAG.match(value))):
                raise ValueError(f"view {self.name}: tag {key!r}: {value!r} needs letters, digits, '-', '_' or '.' "
                                 "(at most 63)")
        if self.stale_after is not None and self.fresh_within is None:
            raise ValueError(f"view {self.name}: stale_after needs fresh_within")
        if self.fresh_within is not None and (self.fresh_within <= timedelta(0) or (
                self.stale_after is not None and self.stale_after < self.fresh_within)):
            raise ValueError(f"view {self.name}: need 0 < fresh_within <= stale_after")
        if self.on_error not in ("skip", "park"):
            raise ValueError(f"view {self.name}: on_error must be 'skip' or 'park'")
        if self.on_bug not in ("park", "skip", "fail"):
            raise ValueError(f"view {self.name}: on_bug must be 'park', 'skip' or 'fail'")
        if self.gap_timeout < 0 or self.max_pending < 1:
            raise ValueError(f"view {self.name}: gap_timeout must be >= 0 and max_pending >= 1")
        if not self.subscribes:
            raise ValueError(f"view {self.name}: subscribes to no stream type")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"view {self.name}: duplicate table names")
        if self.on_change not in ("mark", "rebuild"):
            raise ValueError(f"view {self.name}: on_change must be 'mark' or 'rebuild'")
        if self.version is not None and not isinstance(self.version, str):
            raise ValueError(f"view {self.name}: version must be a string")
        for migration in self.migrations:
            if not isinstance(migration, AddColumn):
                raise ValueError(f"view {self.name}: migrations takes add_column(table, column) only")
            table = next((t for t in self.tables if t.name == migration.table), None)
            if table is None or migration.column not in table.columns:
                raise ValueError(f"view {self.name}: migration adds {migration.table}.{migration.column}, "
                                 "which the view does not declare")
            if migration.column in table.primary_key:
                raise ValueError(f"view {self.name}: migration adds {migration.table}.{migration.column}, "
                                 "a primary key column: that needs a rebuild")

    def on(self, *event_types: type | str) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """Register the decorated function as the handler of these event types: event classes (a msgspec
        Struct or dataclass: the handler gets the payload decoded into it) or, for untyped payloads,
        event type names (the handler gets the `Event`).

            @ORDERS.on(OrderPaid)
            def paid(paid: OrderPaid, tables: Tables, event: Event) -> None: ...   # `event` is optional
        """
        if not event_types:
            raise ValueError(f"view {self.name}: on() needs at least one event type")
        for event_type in event_types:
            if not (isinstance(event_type, str) or is_event_class(event_type)):
                raise TypeError(f"view {self.name}: on({event_type!r}): an event type is a msgspec Struct or "
                                "dataclass, or the name of an untyped event type")

        def register(function: Callable[..., None]) -> Callable[..., None]:
            for event_type in event_types:
                if isinstance(event_type, str):
                    self.handlers.add(event_type, function)  # type: ignore[attr-defined]
                else:
                    self.handlers.add(event_type_of(event_type), TypedHandler(function, event_type))  # type: ignore
            return function

        return register

    @cached_property
    def rules(self) -> tuple[Expectation, ...]:
        """Every data-quality rule of the view: its tables' column rules and unique groups."""
        return tuple(rule for table in self.tables for rule in table.rules)

    @cached_property
    def gap_timeout_us(self) -> int:
        """`gap_timeout` in the microseconds logical times are kept in (the walk and the pass's
        choice of due buffers must agree on it to the microsecond)."""
        return int(round(self.gap_timeout * 1_000_000))

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"view {self.name} has no table {name!r}")
