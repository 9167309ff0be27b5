"""What a table's column holds: a handler's value converted to its column's type, a row normalised, a
key converted, an aggregate's sum checked. `pipelines.view.Table` declares the columns; this is the
runtime that runs on every write.

Each conversion returns the value a column holds so that it reads back with the same Python type and
value in this run and in every later one, however the messages were split into runs:

- VARCHAR: str; BOOLEAN: bool; BIGINT/INTEGER: int (an integral Decimal or float is converted);
- DOUBLE: float (int and Decimal converted); DECIMAL(p,s): Decimal rounded half-up to s places
  (int and float converted), as DuckDB rounds;
- DATE: date (an ISO string is parsed); TIMESTAMPTZ: aware datetime in UTC (naive is taken as UTC;
  an ISO string is parsed).

A value of another type is a bug (TypeError); one the column cannot hold (out of range, not finite, an
unparsable date) is data: `Reject`. NULL is allowed outside the primary key.
"""

from __future__ import annotations

import functools
import math
import weakref
from datetime import date, datetime, timezone
import decimal
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Protocol

from pipelines.message import Reject

Converter = Callable[[Any], Any]

INT_RANGE = {"BIGINT": (-(1 << 63), (1 << 63) - 1), "INTEGER": (-(1 << 31), (1 << 31) - 1)}
# the Python type a handler gets back for each column type (DECIMAL → Decimal, TIMESTAMPTZ → aware UTC datetime)
EXACT_TYPES = {"VARCHAR": str, "DOUBLE": float, "BOOLEAN": bool, "DATE": date}


def decimal_precision_scale(sql_type: str) -> tuple[int, int]:
    """(precision, scale) of a `DECIMAL(p,s)` column type."""
    precision, scale = map(int, sql_type[len("DECIMAL("):-1].split(","))
    return precision, scale


def _wrong_type(where: str, sql_type: str, value: Any) -> TypeError:
    return TypeError(f"{where} is {sql_type}: a handler cannot store {type(value).__name__} {value!r:.80}")


def _raise(exc: BaseException) -> Any:
    raise exc


def _varchar(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            return str(v)
        return null() if v is None else _raise(_wrong_type(where, sql_type, v))
    return convert


def _boolean(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    def convert(v: Any) -> Any:
        if isinstance(v, bool):  # a key's value (a row's took the fast path)
            return bool(v)
        return null() if v is None else _raise(_wrong_type(where, sql_type, v))
    return convert


def _integer(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    low, high = INT_RANGE[sql_type]

    def convert(v: Any) -> Any:
        if v is None:
            return null()
        if isinstance(v, int) and not isinstance(v, bool):
            out = int(v)
        elif isinstance(v, (Decimal, float)) and (v.is_finite() if isinstance(v, Decimal) else math.isfinite(v)) \
                and v == int(v):
            out = int(v)
        else:
            raise _wrong_type(where, sql_type, v)
        if not low <= out <= high:
            raise Reject(f"{where}: {out} is out of range for {sql_type}")
        return out
    return convert


def _double(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    def convert(v: Any) -> Any:
        if v is None:
            return null()
        if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            raise _wrong_type(where, sql_type, v)
        try:
            out = float(v)
        except (OverflowError, ValueError):  # an int past DOUBLE's range, a signalling NaN
            out = math.inf
        if not math.isfinite(out):
            raise Reject(f"{where}: {v} does not fit DOUBLE")
        return out
    return convert


def decimal_context(precision: int) -> decimal.Context:
    """The arithmetic that rounds a value to a DECIMAL(precision, s) column: every digit the column holds and
    one for a carry (the default context's 28 digits would refuse a DECIMAL(38,10) value)."""
    return decimal.Context(prec=precision + 1, rounding=ROUND_HALF_UP)


def _decimal(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    precision, scale = decimal_precision_scale(sql_type)
    quantum, digits, context = Decimal(1).scaleb(-scale), precision - scale, decimal_context(precision)

    def convert(v: Any) -> Any:
        if v.__class__ is Decimal:
            d = v
        elif v is None:
            return null()
        elif isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            raise _wrong_type(where, sql_type, v)
        else:
            d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        try:
            if not d.is_finite():  # a NaN would round to itself
                raise InvalidOperation
            q = d.quantize(quantum, ROUND_HALF_UP, context)
        except InvalidOperation:  # not finite, or more digits than the column holds
            raise Reject(f"{where}: {v} does not fit {sql_type}") from None
        if q and q.adjusted() >= digits:
            raise Reject(f"{where}: {v} is out of range for {sql_type}")
        return q
    return convert


def _date(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return date.fromisoformat(v)
            except ValueError:
                raise Reject(f"{where}: {v[:64]!r} is not an ISO 8601 date") from None
        if isinstance(v, date) and not isinstance(v, datetime):
            return date(v.year, v.month, v.day)
        return null() if v is None else _raise(_wrong_type(where, sql_type, v))
    return convert


def _timestamptz(sql_type: str, null: Callable[[], None], where: str) -> Converter:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                v = datetime.fromisoformat(v)
            except ValueError:
                raise Reject(f"{where}: {v[:64]!r} is not an ISO 8601 time") from None
        if isinstance(v, datetime):
            if v.tzinfo is None:
                return v.replace(tzinfo=timezone.utc)
            return v if v.tzinfo is timezone.utc else v.astimezone(timezone.utc)
        return null() if v is None else _raise(_wrong_type(where, sql_type, v))
    return convert


_CONVERTERS: dict[str, Callable[[str, Callable[[], None], str], Converter]] = {
    "VARCHAR": _varchar, "BOOLEAN": _boolean, "BIGINT": _integer, "INTEGER": _integer, "DOUBLE": _double,
    "DATE": _date, "TIMESTAMPTZ": _timestamptz}


def column_converter(sql_type: str, nullable: bool, where: str) -> Converter:
    """The conversion of a handler's value to what a column of `sql_type` holds (the module's doc)."""

    def null() -> None:
        if not nullable:
            raise ValueError(f"{where} is part of the primary key: it cannot be None")

    build = _decimal if sql_type.startswith("DECIMAL") else _CONVERTERS.get(sql_type)
    if build is None:
        raise ValueError(f"{where}: unsupported type {sql_type!r}")
    return build(sql_type, null, where)


def _unknown_columns(name: str, columns: frozenset[str], row: Mapping[str, Any]) -> None:
    raise ValueError(f"{name}: unknown columns {sorted(row.keys() - columns)}")


def row_normaliser(name: str, columns: Mapping[str, str], primary_key: tuple[str, ...]
                   ) -> Callable[[Mapping[str, Any]], dict]:
    """row -> a new dict with every column, in declared order, each value of its column's Python
    type (see `column_converter`). Missing columns are None. Raises `Reject` for a value that does not
    fit its column, TypeError for a value of another type and ValueError for unknown columns or
    a NULL key: those two are bugs in the view.

    Generated per table, because it runs on every write: a value already of its exact type (and
    for integers, in range) costs one type test."""
    names = {"_columns": frozenset(columns), "_unknown": functools.partial(_unknown_columns, name, frozenset(columns)),
             "_Decimal": Decimal, "_HALF_UP": ROUND_HALF_UP}
    body = ["def normalise_row(row):",
            "    if not row.keys() <= _columns: _unknown(row)",
            "    get = row.get"]
    items = []
    for i, (column, sql_type) in enumerate(columns.items()):
        v, convert = f"v{i}", f"_c{i}"
        names[convert] = column_converter(sql_type, nullable=column not in primary_key, where=f"{name}.{column}")
        body.append(f"    {v} = get({column!r})")
        if sql_type in INT_RANGE:
            low, high = INT_RANGE[sql_type]
            value = f"{v} if {v}.__class__ is int and {low} <= {v} <= {high} else {convert}({v})"
        elif sql_type in EXACT_TYPES:
            names[f"_t{i}"] = EXACT_TYPES[sql_type]
            finite = f" and {v} - {v} == 0.0" if sql_type == "DOUBLE" else ""
            value = f"{v} if {v}.__class__ is _t{i}{finite} else {convert}({v})"
        elif sql_type.startswith("DECIMAL"):  # no cheap test of a Decimal's scale: always rounded to it
            precision, scale = decimal_precision_scale(sql_type)
            names[f"_q{i}"] = Decimal(1).scaleb(-scale)
            names[f"_x{i}"] = decimal_context(precision)
            # rounded here when finite and in range; anything else is the converter's, which refuses it
            value = (f"q if {v}.__class__ is _Decimal and {v}.is_finite() and {v}.adjusted() < {precision - scale} "
                     f"and (not (q := {v}.quantize(_q{i}, _HALF_UP, _x{i})) or q.adjusted() < {precision - scale}) "
                     f"else {convert}({v})")
        else:
            value = f"{convert}({v})"
        items.append(f"{column!r}: {value}")
    body.append("    return {" + ", ".join(items) + "}")
    exec("\n".join(body), names)  # noqa: S102 - code built from validated identifiers only
    return names["normalise_row"]


def _check_decimal_sum(digits: int, where: str, sql_type: str, total: Decimal) -> None:
    if total and total.adjusted() >= digits:
        raise Reject(f"{where}: the sum {total} is out of range for {sql_type}")


def _check_int_sum(low: int, high: int, where: str, sql_type: str, total: int) -> None:
    if not low <= total <= high:
        raise Reject(f"{where}: the sum {total} is out of range for {sql_type}")


def _check_float_sum(where: str, total: float) -> None:
    if not math.isfinite(total):
        raise Reject(f"{where}: the sum {total} does not fit DOUBLE")


def sum_check(sql_type: str, where: str) -> Callable[[Any], None] | None:
    """For a numeric column: raise `Reject` when a sum of converted values no longer fits (a sum of values
    rounded to a DECIMAL's scale keeps that scale, so only its size needs checking); None for another type."""
    if sql_type.startswith("DECIMAL"):
        precision, scale = decimal_precision_scale(sql_type)
        return functools.partial(_check_decimal_sum, precision - scale, where, sql_type)
    if sql_type in INT_RANGE:
        return functools.partial(_check_int_sum, *INT_RANGE[sql_type], where, sql_type)
    if sql_type == "DOUBLE":
        return functools.partial(_check_float_sum, where)
    return None


class Table(Protocol):
    """What a codec reads of a table's declaration (`pipelines.view.Table`, which imports this module)."""

    name: str
    primary_key: tuple[str, ...]

    @property
    def sql_types(self) -> Mapping[str, str]: ...

    @property
    def value_columns(self) -> tuple[str, ...]: ...


class TableCodec:
    """A table's runtime, built once per declared table (`codec_of`): the row normaliser, the key and value
    converters and the sum checks that every handler's write runs through. The declaration (`Table`) only
    says what the columns are."""

    def __init__(self, table: Table) -> None:
        types, key = table.sql_types, table.primary_key
        self.normalise_row = row_normaliser(table.name, types, key)
        # for a one-column key, the class a `get`/`delete`/aggregate key needs no conversion for (None: always
        # converted: integers for their range, DOUBLE for finiteness, DECIMAL and TIMESTAMPTZ)
        self.key_class = EXACT_TYPES[types[key[0]]] if len(key) == 1 and types[key[0]] in (
            "VARCHAR", "BOOLEAN", "DATE") else None
        self.key_converters = tuple(column_converter(types[c], nullable=False, where=f"{table.name}.{c}")
                                    for c in key)
        self.value_converters = {c: column_converter(types[c], nullable=True, where=f"{table.name}.{c}")
                                 for c in table.value_columns}
        checks = {c: sum_check(types[c], f"{table.name}.{c}") for c in table.value_columns}
        self.sum_checks = {c: check for c, check in checks.items() if check is not None}
        # per value column, the class an increment needs no conversion for (its sum is still checked); a DECIMAL
        # increment is always rounded to its scale
        self.increment_classes = {c: int if types[c] in INT_RANGE else float if types[c] == "DOUBLE" else None
                                  for c in table.value_columns}
        # a pass reads stored rows from Arrow, whose times carry the session's zone object: handlers get them in
        # `timezone.utc`, as `column_converter` writes them
        self.utc_columns = tuple(c for c, t in types.items() if t == "TIMESTAMPTZ")


# keyed by identity (a Table holds dicts: no hash), and dropped with the table: a Spark worker unpickles the
# views of every pass it runs
_CODECS: dict[int, tuple[weakref.ref, TableCodec]] = {}


def codec_of(table: Table) -> TableCodec:
    """The table's codec, built on its first use in this process."""
    held = _CODECS.get(id(table))
    if held is None or held[0]() is not table:
        held = _CODECS[id(table)] = (weakref.ref(table), TableCodec(table))
        weakref.finalize(table, _CODECS.pop, id(table), None)
    return held[1]
