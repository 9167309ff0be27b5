"""CONCEPTS §2 step 4: run a stream's ready messages through the view's handlers.

A handler sees the stream's rows through small table objects. Every change a handler makes is
journaled so that a handler that raises leaves the tables exactly as they were.
"""

from __future__ import annotations

import traceback
from decimal import Decimal
from typing import Any, Callable, Iterable

from pipelines import faults
from pipelines.columns import TableCodec, codec_of
from pipelines.faults import crash_point
from pipelines.engine.outcomes import Outcome
from pipelines.view import Event, Table, Tables, View

# what `apply` returns: outcomes as plain strings (the walk counts by them per message)
APPLIED, IGNORED, HANDLER_ERROR = Outcome.APPLIED.value, Outcome.IGNORED.value, Outcome.HANDLER_ERROR.value

_MISSING = object()
_NUMBERS = frozenset((int, float, Decimal))  # exact classes: bool is not a number here
_TRACEBACK_LIMIT = 8000


def _key_function(table: Table, codec: TableCodec) -> Callable[[tuple], Any]:
    """`get(*key)` / `delete(*key)` arguments -> the dict key rows are held under (converted like the
    columns, so `get("2026-01-02")` finds the row whose DATE key is date(2026, 1, 2))."""
    converters = codec.key_converters
    if len(converters) == 1:
        (convert,), exact = converters, codec.key_class

        def single(key: tuple) -> Any:
            if len(key) != 1:
                raise TypeError(f"{table.name}: the primary key is {list(table.primary_key)}, got {len(key)} values")
            k = key[0]
            return k if k.__class__ is exact else convert(k)

        return single

    def composite(key: tuple) -> Any:
        if len(key) != len(converters):
            raise TypeError(f"{table.name}: the primary key is {list(table.primary_key)}, got {len(key)} values")
        return tuple(convert(k) for convert, k in zip(converters, key))

    return composite


class KeyedRows:
    """The rows of one stream in a keyed table, by primary key."""

    __slots__ = ("table", "stream_id", "rows", "_journal", "_key_cols", "_single", "_normalise", "_lookup",
                 "_stream_key", "_key_class", "_per_stream")

    def __init__(self, table: Table, stream_id: str, rows: Iterable[dict], journal: list) -> None:
        self.table = table
        self.stream_id = stream_id
        self._key_cols = table.primary_key
        self._single = len(table.primary_key) == 1
        codec = codec_of(table)
        self._normalise = codec.normalise_row
        self._lookup = _key_function(table, codec)
        self._stream_key = table.stream_key
        self._key_class = codec.key_class
        self._per_stream = self._single and self._key_cols[0] == self._stream_key  # `row` and `save` work
        self.rows: dict[Any, dict] = {self._key(r): r for r in rows}
        self._journal = journal

    def _key(self, row: dict) -> Any:
        return row[self._key_cols[0]] if self._single else tuple(row[c] for c in self._key_cols)

    def get(self, *key: Any) -> dict | None:
        # the usual call, get(event.stream_id), needs no conversion
        row = self.rows.get(key[0] if key and key[0].__class__ is self._key_class and len(key) == 1
                            else self._lookup(key))
        return None if row is None else dict(row)

    def all(self) -> list[dict]:
        return [dict(r) for r in self.rows.values()]

    def put(self, row: dict) -> None:
        row = self._normalise(row)
        if row[self._stream_key] != self.stream_id:
            raise ValueError(f"{self.table.name}: a handler may only write rows of its own stream")
        key = self._key(row)
        self._journal.append((self.rows, key, self.rows.get(key, _MISSING)))
        self.rows[key] = row

    @property
    def row(self) -> dict | None:
        """The stream's row of a table keyed by the stream id alone (`Table.per_stream`), or None."""
        if not self._per_stream:
            self._not_per_stream()
        row = self.rows.get(self.stream_id)
        return None if row is None else dict(row)

    def save(self, **changes: Any) -> None:
        """Write the stream's row (`Table.per_stream`): `changes` over its current values, the key filled in."""
        if not self._per_stream:
            self._not_per_stream()
        current = self.rows.get(self.stream_id)
        # a key among the changes is this stream's, or a bug (put says so), on the first save as on later ones
        self.put({**current, **changes} if current is not None else {self._stream_key: self.stream_id, **changes})

    def _not_per_stream(self) -> None:
        raise TypeError(f"{self.table.name}: row and save() need a table keyed by the stream id alone "
                        f"(Table.per_stream); its key is {list(self._key_cols)}: use get(*key) and put(row)")

    def delete(self, *key: Any) -> None:
        """Delete the row of `key`; with no key, the stream's row (`Table.per_stream`)."""
        if not key and not self._per_stream:
            self._not_per_stream()
        k = self._lookup(key) if key else self.stream_id
        if k in self.rows:
            self._journal.append((self.rows, k, self.rows[k]))
            del self.rows[k]


class AppendRows:
    """The rows a stream appends to an append-only table; only the newest row is readable."""

    __slots__ = ("table", "stream_id", "newest", "appended", "_journal", "_key_cols", "_normalise", "_stream_key")

    def __init__(self, table: Table, stream_id: str, newest: dict | None, journal: list) -> None:
        self.table = table
        self.stream_id = stream_id
        self.newest = newest
        self.appended: list[dict] = []
        self._journal = journal
        self._key_cols = table.primary_key
        self._normalise = codec_of(table).normalise_row
        self._stream_key = table.stream_key

    def last(self) -> dict | None:
        return None if self.newest is None else dict(self.newest)

    def append(self, row: dict) -> None:
        if row.keys() != self.table.column_set:
            raise ValueError(f"{self.table.name}: a row needs exactly the columns {list(self.table.columns)}")
        row = self._normalise(row)
        if row[self._stream_key] != self.stream_id:
            raise ValueError(f"{self.table.name}: a handler may only write rows of its own stream")
        if self.newest is not None and (tuple(row[c] for c in self._key_cols)
                                        <= tuple(self.newest[c] for c in self._key_cols)):
            raise ValueError(f"{self.table.name}: appended rows need increasing primary keys")
        self._journal.append((self, None, self.newest))
        self.appended.append(row)
        self.newest = row


class AggregateIncrements:
    """Commutative increments to a table shared by all streams, summed per key."""

    __slots__ = ("table", "sums", "_journal", "_key_cols", "_key_set", "_converters", "_checks", "_lookup",
                 "_single_key", "_key_class", "_exact")

    def __init__(self, table: Table, sums: dict, journal: list) -> None:
        self.table = table
        self.sums = sums
        self._journal = journal
        self._key_cols = table.primary_key
        self._key_set = table.key_set
        codec = codec_of(table)
        self._converters = codec.value_converters
        self._checks = codec.sum_checks
        self._lookup = _key_function(table, codec)
        self._single_key = table.primary_key[0] if len(table.primary_key) == 1 else None
        self._key_class = codec.key_class
        self._exact = codec.increment_classes

    def add(self, key: dict, **increments: Any) -> None:
        if key.keys() != self._key_set:
            raise ValueError(f"{self.table.name}: key must have exactly {list(self._key_cols)}")
        if self._single_key is not None and key[self._single_key].__class__ is self._key_class:
            k = key[self._single_key]
        else:
            k = self._lookup(tuple(key[c] for c in self._key_cols))
        current = self.sums.get(k)
        merged = {} if current is None else dict(current)
        converters, checks, exact = self._converters, self._checks, self._exact
        for column, amount in increments.items():
            # each sum is held in its column's type, and a sum too large for it fails this handler, not the commit
            if amount.__class__ is not exact.get(column):
                convert = converters.get(column)
                if convert is None:
                    raise ValueError(f"{self.table.name}: unknown column {column!r}")
                if amount.__class__ not in _NUMBERS:
                    raise TypeError(f"{self.table.name}.{column}: increment must be a number, got {amount!r}")
                amount = convert(amount)
            total = merged.get(column)
            if total is not None:
                amount += total
            checks[column](amount)
            merged[column] = amount
        self._journal.append((self.sums, k, _MISSING if current is None else current))
        self.sums[k] = merged


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
        self.tables = Tables(members)  # table name (or declaration) -> its handle

    def apply(self, event: Event) -> tuple[str, BaseException | None]:
        """Returns (APPLIED | IGNORED | HANDLER_ERROR, the exception if any)."""
        handler = self.handlers.get(event.event_type)
        try:
            if handler is None or (self.predicate is not None and not self.predicate(event)):
                return IGNORED, None
            handler(event, self.tables)
        except Exception as exc:  # a handler's failure is data, never a crash of the run
            self._rollback()
            crash_point("apply.handler_error")
            return HANDLER_ERROR, exc
        self.journal.clear()
        if faults.ARMED:
            crash_point("apply.applied")
        return APPLIED, None

    def _rollback(self) -> None:
        while self.journal:
            container, key, old = self.journal.pop()
            if isinstance(container, AppendRows):
                container.appended.pop()
                container.newest = old
            elif old is _MISSING:  # undone in reverse order: the key is there again
                del container[key]
            else:
                container[key] = old


def describe_exception(exc: BaseException) -> tuple[str, str, str]:
    """(exception type, message, traceback) of a handler failure, bounded in size."""
    text = "".join(traceback.format_exception(exc))
    return type(exc).__name__, str(exc)[:2000], text[-_TRACEBACK_LIMIT:]
