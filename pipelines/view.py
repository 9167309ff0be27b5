"""How a view is declared: its tables, subscriptions, policies, expectations and handlers.

A view author writes a `View` in `views/`; the engine reads nothing else about it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from decimal import Decimal
from typing import Any, Callable, Literal, Mapping

TableKind = Literal["keyed", "append", "aggregate"]
OnError = Literal["skip", "park"]

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SQL_TYPE = re.compile(r"^(VARCHAR|BIGINT|INTEGER|DOUBLE|BOOLEAN|DATE|TIMESTAMPTZ|DECIMAL\(\d{1,2},\d{1,2}\))$")


def check_identifier(name: str, what: str) -> str:
    """Names end up in SQL as identifiers, so only plain lower-case names are allowed."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"{what} {name!r} is not a valid name (lower-case letters, digits, _)")
    return name


@dataclass(frozen=True)
class Table:
    """A read-store table of a view.

    kind:
      - ``keyed``: rows belong to one stream (``stream_key`` holds the stream id); handlers
        get, put and delete them.
      - ``append``: rows belong to one stream; handlers append rows and read the newest one
        (highest primary key), so the engine never loads a stream's whole history.
      - ``aggregate``: rows are shared across streams; handlers only add increments.
    """

    name: str
    columns: Mapping[str, str]
    primary_key: tuple[str, ...]
    kind: TableKind = "keyed"
    stream_key: str | None = None

    def __post_init__(self) -> None:
        check_identifier(self.name, "table")
        for column, sql_type in self.columns.items():
            check_identifier(column, "column")
            if not _SQL_TYPE.match(sql_type):
                raise ValueError(f"column {self.name}.{column}: unsupported type {sql_type!r}")
        missing = [c for c in self.primary_key if c not in self.columns]
        if not self.primary_key or missing:
            raise ValueError(f"table {self.name}: primary key {self.primary_key} not among its columns")
        if self.kind in ("keyed", "append"):
            if self.stream_key not in self.primary_key:
                raise ValueError(f"table {self.name}: a {self.kind} table needs a stream_key in its primary key")
        elif self.kind == "aggregate":
            if self.stream_key is not None:
                raise ValueError(f"table {self.name}: an aggregate table has no stream_key")
        else:
            raise ValueError(f"table {self.name}: unknown kind {self.kind!r}")

    @cached_property
    def column_set(self) -> frozenset[str]:
        return frozenset(self.columns)

    @cached_property
    def key_set(self) -> frozenset[str]:
        return frozenset(self.primary_key)

    @cached_property
    def value_column_set(self) -> frozenset[str]:
        return frozenset(self.value_columns)

    @property
    def decimal_columns(self) -> tuple[str, ...]:
        return tuple(c for c, t in self.columns.items() if t.startswith("DECIMAL"))

    @cached_property
    def numeric_limits(self) -> tuple[tuple[str, int | Decimal], ...]:
        """(column, exclusive bound of its absolute value) for DECIMAL and integer columns."""
        limits: list[tuple[str, int | Decimal]] = []
        for column, sql_type in self.columns.items():
            if sql_type.startswith("DECIMAL"):
                precision, scale = map(int, sql_type[8:-1].split(","))
                limits.append((column, Decimal(10) ** (precision - scale)))
            elif sql_type in ("BIGINT", "INTEGER"):
                limits.append((column, 1 << (63 if sql_type == "BIGINT" else 31)))
        return tuple(limits)

    def check_row(self, row: Mapping[str, Any]) -> None:
        """Refuse values the column type cannot hold, so a bad row fails its handler, not the commit."""
        for column, bound in self.numeric_limits:
            value = row.get(column)
            if value is not None and not -bound < value < bound:
                raise ValueError(f"{self.name}.{column}: {value} is out of range for {self.columns[column]}")

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if c not in self.primary_key)

    def ddl(self) -> str:
        cols = ", ".join(f'"{c}" {t}' for c, t in self.columns.items())
        pk = ", ".join(f'"{c}"' for c in self.primary_key)
        return f'CREATE TABLE IF NOT EXISTS "{self.name}" ({cols}, PRIMARY KEY ({pk}))'


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


Handler = Callable[["Event", Any], None]


@dataclass(frozen=True)
class View:
    name: str
    tables: tuple[Table, ...]
    subscribes: tuple[str, ...]
    handlers: Mapping[str, Handler]
    gap_timeout: float = 600.0
    max_pending: int = 10_000
    on_error: OnError = "skip"
    predicate: Callable[["Event"], bool] | None = None
    expectations: tuple[Expectation, ...] = field(default=())

    def __post_init__(self) -> None:
        check_identifier(self.name, "view")
        if self.on_error not in ("skip", "park"):
            raise ValueError(f"view {self.name}: on_error must be 'skip' or 'park'")
        if self.gap_timeout < 0 or self.max_pending < 1:
            raise ValueError(f"view {self.name}: gap_timeout must be >= 0 and max_pending >= 1")
        if not self.subscribes:
            raise ValueError(f"view {self.name}: subscribes to no stream type")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"view {self.name}: duplicate table names")

    @property
    def gap_timeout_us(self) -> int:
        """`gap_timeout` in the microseconds logical times are kept in (the walk and the pass's
        choice of due buffers must agree on it to the microsecond)."""
        return int(round(self.gap_timeout * 1_000_000))

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"view {self.name} has no table {name!r}")


class Event:
    """One message as a handler sees it. The payload is decoded on first use."""

    __slots__ = ("stream_id", "stream_type", "seq", "event_type", "payload_json", "occurred_at",
                 "event_id", "batch_id", "_payload")

    def __init__(self, stream_id: str, stream_type: str, seq: int, event_type: str, payload_json: str,
                 occurred_at: str | None, event_id: str | None, batch_id: str) -> None:
        self.stream_id = stream_id
        self.stream_type = stream_type
        self.seq = seq
        self.event_type = event_type
        self.payload_json = payload_json
        self.occurred_at = occurred_at
        self.event_id = event_id
        self.batch_id = batch_id
        self._payload: Any = None

    @property
    def payload(self) -> Any:
        if self._payload is None:
            self._payload = _decode_payload(self.payload_json)
        return self._payload


_PAYLOAD_DECODER = json.JSONDecoder(parse_float=Decimal)


def _decode_payload(text: str) -> Any:
    """Payloads are canonical JSON; numbers with a fraction become exact Decimals (money must not drift)."""
    return _PAYLOAD_DECODER.raw_decode(text)[0]
