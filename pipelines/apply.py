"""DESIGN §2 step 4: run a stream's ready messages through the view's handlers.

A handler sees the stream's rows through small table objects. Every change a handler makes is
journaled so that a handler that raises leaves the tables exactly as they were.
"""

from __future__ import annotations

import traceback
from decimal import Decimal
from typing import Any, Iterable

from pipelines import faults
from pipelines.faults import crash_point
from pipelines.view import Event, Table, View

_MISSING = object()
_NUMBERS = (int, float, Decimal)  # exact types: bool is not a number here
_TRACEBACK_LIMIT = 8000


class KeyedRows:
    """The rows of one stream in a keyed table, by primary key."""

    __slots__ = ("table", "stream_id", "rows", "_journal", "_key_cols", "_single", "_columns")

    def __init__(self, table: Table, stream_id: str, rows: Iterable[dict], journal: list) -> None:
        self.table = table
        self.stream_id = stream_id
        self._columns = table.column_set
        self._key_cols = table.primary_key
        self._single = len(table.primary_key) == 1
        self.rows: dict[Any, dict] = {self._key(r): r for r in rows}
        self._journal = journal

    def _key(self, row: dict) -> Any:
        return row[self._key_cols[0]] if self._single else tuple(row[c] for c in self._key_cols)

    def get(self, *key: Any) -> dict | None:
        row = self.rows.get(key[0] if self._single else key)
        return None if row is None else dict(row)

    def all(self) -> list[dict]:
        return [dict(r) for r in self.rows.values()]

    def put(self, row: dict) -> None:
        if row.get(self.table.stream_key) != self.stream_id:
            raise ValueError(f"{self.table.name}: a handler may only write rows of its own stream")
        if not row.keys() <= self._columns:
            raise ValueError(f"{self.table.name}: unknown columns {sorted(row.keys() - self._columns)}")
        self.table.check_row(row)
        key = self._key(row)
        self._journal.append((self.rows, key, self.rows.get(key, _MISSING)))
        self.rows[key] = dict(row)

    def delete(self, *key: Any) -> None:
        k = key[0] if self._single else key
        if k in self.rows:
            self._journal.append((self.rows, k, self.rows[k]))
            del self.rows[k]


class AppendRows:
    """The rows a stream appends to an append-only table; only the newest row is readable."""

    __slots__ = ("table", "stream_id", "newest", "appended", "_journal", "_key_cols", "_columns")

    def __init__(self, table: Table, stream_id: str, newest: dict | None, journal: list) -> None:
        self.table = table
        self.stream_id = stream_id
        self.newest = newest
        self.appended: list[dict] = []
        self._journal = journal
        self._key_cols = table.primary_key
        self._columns = table.column_set

    def last(self) -> dict | None:
        return None if self.newest is None else dict(self.newest)

    def append(self, row: dict) -> None:
        if row.get(self.table.stream_key) != self.stream_id:
            raise ValueError(f"{self.table.name}: a handler may only write rows of its own stream")
        if row.keys() != self._columns:
            raise ValueError(f"{self.table.name}: a row needs exactly the columns {list(self.table.columns)}")
        self.table.check_row(row)
        if self.newest is not None and (tuple(row[c] for c in self._key_cols)
                                        <= tuple(self.newest[c] for c in self._key_cols)):
            raise ValueError(f"{self.table.name}: appended rows need increasing primary keys")
        self._journal.append((self, None, self.newest))
        self.appended.append(dict(row))
        self.newest = self.appended[-1]


class AggregateIncrements:
    """Commutative increments to a table shared by all streams, summed per key."""

    __slots__ = ("table", "sums", "_journal", "_key_cols", "_key_set", "_value_cols")

    def __init__(self, table: Table, sums: dict, journal: list) -> None:
        self.table = table
        self.sums = sums
        self._journal = journal
        self._key_cols = table.primary_key
        self._key_set = table.key_set
        self._value_cols = table.value_column_set

    def add(self, key: dict, **increments: Any) -> None:
        if key.keys() != self._key_set:
            raise ValueError(f"{self.table.name}: key must have exactly {list(self._key_cols)}")
        if not increments.keys() <= self._value_cols:
            raise ValueError(f"{self.table.name}: unknown columns {sorted(increments.keys() - self._value_cols)}")
        for column, amount in increments.items():
            if type(amount) not in _NUMBERS:
                raise TypeError(f"{self.table.name}.{column}: increment must be a number, got {amount!r}")
        k = key[self._key_cols[0]] if len(self._key_cols) == 1 else tuple(key[c] for c in self._key_cols)
        current = self.sums.get(k)
        merged = dict(increments) if current is None else dict(current)
        if current is not None:
            for column, amount in increments.items():
                merged[column] = merged.get(column, 0) + amount
        self.table.check_row(merged)  # a sum too large for its column fails this handler, not the commit
        self._journal.append((self.sums, k, _MISSING if current is None else current))
        self.sums[k] = merged


class Tables:
    """What a handler receives: one attribute per table of the view."""

    def __init__(self, members: dict[str, Any]) -> None:
        self.__dict__.update(members)

    def __getitem__(self, name: str) -> Any:
        return self.__dict__[name]


class StreamApplier:
    """Applies ready messages of one (view, stream) with per-message all-or-nothing changes."""

    def __init__(self, view: View, stream_id: str, keyed_rows: dict[str, list[dict]],
                 newest_rows: dict[str, dict | None], aggregate_sums: dict[str, dict]) -> None:
        self.handlers = view.handlers
        self.predicate = view.predicate
        self.journal: list = []
        members: dict[str, Any] = {}
        for table in view.tables:
            if table.kind == "keyed":
                members[table.name] = KeyedRows(table, stream_id, keyed_rows.get(table.name, ()), self.journal)
            elif table.kind == "append":
                members[table.name] = AppendRows(table, stream_id, newest_rows.get(table.name), self.journal)
            else:
                members[table.name] = AggregateIncrements(table, aggregate_sums.setdefault(table.name, {}),
                                                          self.journal)
        self.tables = Tables(members)

    def apply(self, event: Event) -> tuple[str, BaseException | None]:
        """Returns ("applied" | "ignored" | "handler_error", the exception if any)."""
        handler = self.handlers.get(event.event_type)
        try:
            if handler is None or (self.predicate is not None and not self.predicate(event)):
                return "ignored", None
            handler(event, self.tables)
        except Exception as exc:  # a handler's failure is data, never a crash of the run
            self._rollback()
            crash_point("apply.handler_error")
            return "handler_error", exc
        self.journal.clear()
        if faults.ARMED:
            crash_point("apply.applied")
        return "applied", None

    def _rollback(self) -> None:
        while self.journal:
            container, key, old = self.journal.pop()
            if isinstance(container, AppendRows):
                container.appended.pop()
                container.newest = old
            elif old is _MISSING:
                container.pop(key, None)
            else:
                container[key] = old


def describe_exception(exc: BaseException) -> tuple[str, str, str]:
    """(exception type, message, traceback) of a handler failure, bounded in size."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return type(exc).__name__, str(exc)[:2000], text[-_TRACEBACK_LIMIT:]
