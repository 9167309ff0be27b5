"""A handler's values against an independent statement of what each column type holds (pipelines/columns.py's
doc, docs/VIEWS.md): a row normalised for a table declared inside the test, value by value, against Python's
own `decimal`, `datetime` and integer arithmetic; the generated fast path and the per-value converter agree."""

from __future__ import annotations

import math
import sys
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.columns import column_converter, row_normaliser, sum_check
from pipelines.message import Reject
from tests.profiles import examples

INT_BOUNDS = {"BIGINT": 63, "INTEGER": 31}
EXACT = Context(prec=2000)


def decimal_type(draw_p: int, draw_s: int) -> str:
    return f"DECIMAL({draw_p},{draw_s})"


SQL_TYPES = st.sampled_from(["VARCHAR", "BOOLEAN", "BIGINT", "INTEGER", "DOUBLE", "DATE", "TIMESTAMPTZ"]) | \
    st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: decimal_type(p, s)))
VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5),
    st.sampled_from(["2026-02-28", "2026-02-30", "2026-11-28T10:00:00", "2026-11-28T10:00:00+02:00", "soon"]),
    st.integers(-(1 << 70), 1 << 70) | st.sampled_from([(1 << 63) - 1, 1 << 63, -(1 << 63), (1 << 31), 1 << 1100, 1 << 1023, -(1 << 1023) * 3 // 2, int(sys.float_info.max),
                                                            int(sys.float_info.max) + (1 << 970)]),
    st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 2.5, -2.5, 1e300, 3.0]),
    st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
        [Decimal("99.995"), Decimal("-99.995"), Decimal("0.005"), Decimal("1E+40"), Decimal("7.000")]),
    st.dates(), st.datetimes(timezones=st.none() | st.just(timezone.utc) | st.just(timezone(timedelta(hours=5)))),
    st.lists(st.integers(), max_size=1),
)


OWN = {  # values of each column type's own kind, drawn as often as all others together
    "VARCHAR": st.text(max_size=5), "BOOLEAN": st.booleans(),
    "BIGINT": st.integers(-(1 << 64), 1 << 64) | st.sampled_from([Decimal("5"), Decimal("5.5"), 7.0, 7.5]),
    "INTEGER": st.integers(-(1 << 32), 1 << 32) | st.sampled_from([Decimal("5"), Decimal("5.5"), 7.0, 7.5]),
    "DOUBLE": st.floats() | st.integers() | st.decimals(),
    "DATE": st.dates() | st.dates().map(str) | st.sampled_from(["2026-02-30", "x" * 70]),
    "TIMESTAMPTZ": st.datetimes(timezones=st.none() | st.just(timezone.utc) | st.just(timezone(timedelta(hours=-3))))
    | st.datetimes().map(str) | st.sampled_from(["2026-13-01T00:00:00", "y" * 70]),
    "DECIMAL": st.decimals(places=4, min_value=-10**6, max_value=10**6) | st.integers() | st.floats(),
}


def own_values(sql_type: str) -> st.SearchStrategy:
    return st.one_of(OWN[sql_type.split("(")[0]], VALUES)


def expected(sql_type: str, v: Any, nullable: bool, where: str = "t.c") -> tuple:
    """("ok", value) | ("reject", message) | ("bug", TypeError or ValueError, message)."""
    wrong = ("bug", TypeError, f"{where} is {sql_type}: a handler cannot store {type(v).__name__} {v!r:.80}")
    if v is None:
        return ("ok", None) if nullable else ("bug", ValueError, f"{where} is part of the primary key: it cannot be None")
    if sql_type in ("VARCHAR", "BOOLEAN"):
        return ("ok", v) if type(v) is {"VARCHAR": str, "BOOLEAN": bool}[sql_type] else wrong
    if sql_type in ("DATE", "TIMESTAMPTZ"):
        return _expected_time(sql_type, v, where, wrong)
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return wrong
    if sql_type in INT_BOUNDS:
        finite = isinstance(v, int) or (v.is_finite() if isinstance(v, Decimal) else math.isfinite(v))
        if not finite or v != int(v):
            return wrong
        n, bits = int(v), INT_BOUNDS[sql_type]
        return ("ok", n) if -(1 << bits) <= n < (1 << bits) else ("reject", f"{where}: {n} is out of range for {sql_type}")
    if sql_type == "DOUBLE":
        finite = v.is_finite() if isinstance(v, Decimal) else isinstance(v, int) or math.isfinite(v)
        fits = finite and abs(Decimal(v)) <= Decimal(sys.float_info.max)
        return ("ok", float(v)) if fits else ("reject", f"{where}: {v} does not fit DOUBLE")
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    precision, scale = map(int, sql_type[8:-1].split(","))
    if not d.is_finite():
        return "reject", f"{where}: {v} does not fit {sql_type}"
    q = d.quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, EXACT)
    if abs(q) < Decimal(10) ** (precision - scale):
        return "ok", q
    # more digits than the column and its one carry digit hold cannot even be rounded
    too_long = len(q.as_tuple().digits) > precision + 1
    return "reject", f"{where}: {v} " + (f"does not fit {sql_type}" if too_long else f"is out of range for {sql_type}")


def _expected_time(sql_type: str, v: Any, where: str, wrong: tuple) -> tuple:
    parse, what = (date.fromisoformat, "date") if sql_type == "DATE" else (datetime.fromisoformat, "time")
    if isinstance(v, str):
        try:
            v = parse(v)
        except ValueError:
            return "reject", f"{where}: {v[:64]!r} is not an ISO 8601 {what}"
        if sql_type == "DATE":
            return "ok", v
    if sql_type == "DATE":
        return ("ok", date(v.year, v.month, v.day)) if type(v) is date else wrong
    if not isinstance(v, datetime):
        return wrong
    return "ok", (v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc))


def outcome(convert, *args) -> tuple:
    try:
        return "ok", convert(*args)
    except Reject as exc:
        return "reject", str(exc)
    except (TypeError, ValueError) as exc:
        return "bug", type(exc), str(exc)


def same(got: tuple, want: tuple) -> bool:
    if got[0] != want[0] or got[0] != "ok":
        return got == want
    a, b = got[1], want[1]
    if isinstance(b, Decimal):  # the same digits and exponent: 1.50 is not 1.5 in a DECIMAL(4,2)
        return type(a) is Decimal and a.as_tuple() == b.as_tuple()
    if isinstance(b, datetime):
        return type(a) is datetime and a == b and a.utcoffset() == timedelta(0)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("sql_type", ["VARCHAR", "BOOLEAN", "BIGINT", "INTEGER", "DOUBLE", "DATE", "TIMESTAMPTZ",
                                      "DECIMAL(4,2)", "DECIMAL(38,10)", "DECIMAL(3,0)", "DECIMAL(5,5)"])
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), nullable=st.booleans())
def test_each_value_is_held_exactly_as_its_column_type_says(sql_type, data, nullable):
    value = data.draw(own_values(sql_type), label="value")
    want = expected(sql_type, value, nullable)
    assert same(outcome(column_converter(sql_type, nullable, "t.c"), value), want), (sql_type, value, want)
    normalise = row_normaliser("t", {"c": sql_type}, () if nullable else ("c",))
    got = outcome(lambda row: normalise(row)["c"], {"c": value})
    assert same(got, want), (sql_type, value, got, want)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sql_type=SQL_TYPES, value=VALUES, nullable=st.booleans())
# the edges a random draw seldom reaches (each was a mutant `make mutation` left alive): an integer column's
# both ends, a signalling NaN (no float holds it), a float whose shortest text rounds up, NULL in a BOOLEAN
@example(sql_type="INTEGER", value=-(1 << 31), nullable=True)
@example(sql_type="INTEGER", value=(1 << 31) - 1, nullable=True)
@example(sql_type="BIGINT", value=Decimal(-(1 << 63)), nullable=True)
@example(sql_type="BIGINT", value=Decimal("sNaN"), nullable=True)
@example(sql_type="DECIMAL(4,2)", value=1.005, nullable=True)
@example(sql_type="BOOLEAN", value=None, nullable=True)
@example(sql_type="DOUBLE", value=math.inf, nullable=True)  # the row normaliser's fast path must not take it
def test_any_value_in_any_column(sql_type, value, nullable):
    want = expected(sql_type, value, nullable)
    assert same(outcome(column_converter(sql_type, nullable, "t.c"), value), want), (sql_type, value, want)
    normalise = row_normaliser("t", {"c": sql_type}, () if nullable else ("c",))
    assert same(outcome(lambda row: normalise(row)["c"], {"c": value}), want)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns=st.lists(SQL_TYPES, min_size=1, max_size=4), data=st.data())
def test_a_row_gets_every_column_in_order_and_the_first_bad_value_decides(columns, data):
    names = [f"c{i}" for i in range(len(columns))]
    key = tuple(n for n in names if data.draw(st.booleans(), label=f"{n} in the key"))
    row = {n: data.draw(VALUES, label=n) for n in names if data.draw(st.booleans(), label=f"{n} given")}
    got = outcome(row_normaliser("t", dict(zip(names, columns)), key), row)
    for name, sql_type in zip(names, columns):
        one = expected(sql_type, row.get(name), name not in key, f"t.{name}")
        if one[0] != "ok":
            assert got == one, (row, got, one)
            return
    assert got[0] == "ok" and list(got[1]) == names
    for name, sql_type in zip(names, columns):
        assert same(("ok", got[1][name]), expected(sql_type, row.get(name), True))


def test_an_unknown_column_is_a_bug_naming_it_and_a_reject_names_the_column():
    normalise = row_normaliser("orders", {"order_id": "VARCHAR", "total": "DECIMAL(4,2)"}, ("order_id",))
    with pytest.raises(ValueError, match=r"orders: unknown columns \['totl'\]"):
        normalise({"order_id": "o-1", "totl": 1})
    with pytest.raises(Reject, match=r"orders.total: 99.995 is out of range for DECIMAL\(4,2\)"):
        normalise({"order_id": "o-1", "total": Decimal("99.995")})
    with pytest.raises(ValueError, match="orders.order_id is part of the primary key"):
        normalise({"total": 1})
    with pytest.raises(ValueError, match="unsupported type 'TEXT'"):
        column_converter("TEXT", True, "orders.note")


@settings(max_examples=examples(300), deadline=None)
@given(sql_type=st.sampled_from(["BIGINT", "INTEGER", "DOUBLE", "DECIMAL(6,2)", "DECIMAL(38,0)", "VARCHAR"]),
       total=st.integers(-(1 << 70), 1 << 70) | st.sampled_from([math.inf, -math.inf, 1.5]) |
       st.decimals(min_value=-10**40, max_value=10**40, places=2))
@example(sql_type="DECIMAL(6,2)", total=Decimal("9999.99"))  # each end, in and just out (mutants left them)
@example(sql_type="DECIMAL(6,2)", total=Decimal("10000.00"))
@example(sql_type="DECIMAL(6,2)", total=Decimal("-10000.00"))
@example(sql_type="BIGINT", total=-(1 << 63))
@example(sql_type="BIGINT", total=(1 << 63) - 1)
@example(sql_type="INTEGER", total=1 << 31)
@example(sql_type="INTEGER", total=-(1 << 31) - 1)
def test_a_sum_is_refused_exactly_when_its_column_cannot_hold_it(sql_type, total):
    check = sum_check(sql_type, "t.n")
    if sql_type == "VARCHAR":
        assert check is None
        return
    if sql_type in INT_BOUNDS and not isinstance(total, int) or sql_type == "DOUBLE" and isinstance(total, Decimal) \
            or sql_type.startswith("DECIMAL") and not isinstance(total, Decimal):
        return  # a sum is of values already converted to the column's type
    if sql_type in INT_BOUNDS:
        fits = -(1 << INT_BOUNDS[sql_type]) <= total < 1 << INT_BOUNDS[sql_type]
    elif sql_type == "DOUBLE":
        fits = math.isfinite(total)
    else:
        precision, scale = map(int, sql_type[8:-1].split(","))
        fits = abs(total) < Decimal(10) ** (precision - scale)
    said = f"the sum {total} does not fit DOUBLE" if sql_type == "DOUBLE" else \
        f"the sum {total} is out of range for {sql_type}"
    assert outcome(check, total) == (("ok", None) if fits else ("reject", f"t.n: {said}"))


def test_a_time_is_held_in_utc_whatever_the_process_local_zone(monkeypatch):
    """A TIMESTAMPTZ value comes back in UTC on a machine set to another zone too (the tests' machines run in UTC,
    where the local zone and UTC cannot be told apart)."""
    import time

    monkeypatch.setenv("TZ", "America/Sao_Paulo")
    time.tzset()
    try:
        convert = column_converter("TIMESTAMPTZ", True, "t.c")
        for value in (datetime(2026, 3, 1, 9, 0, tzinfo=timezone(timedelta(hours=5))), "2026-03-01T09:00:00+05:00"):
            got = convert(value)
            assert got == datetime(2026, 3, 1, 4, 0, tzinfo=timezone.utc) and got.utcoffset() == timedelta(0)
    finally:
        monkeypatch.undo()
        time.tzset()



NUMBERS = {"v_bigint": "BIGINT", "v_integer": "INTEGER", "v_double": "DOUBLE", "v_decimal": "DECIMAL(6,2)"}
EVERY_TYPE = {**NUMBERS, "v_varchar": "VARCHAR", "v_boolean": "BOOLEAN", "v_date": "DATE",
              "v_timestamptz": "TIMESTAMPTZ"}


@pytest.mark.parametrize("key_type", ["VARCHAR", "BOOLEAN", "DATE", "BIGINT", "DECIMAL(6,2)", "TIMESTAMPTZ"])
def test_a_tables_codec_holds_each_column_to_its_type_and_names_the_column(key_type):
    """`codec_of` (pipelines/columns.py), on tables declared here: each process builds a table's codec once, and
    every handler write goes through it: key columns refuse None, value columns keep it, number columns check their
    sums, TIMESTAMPTZ columns are the ones given back in UTC, and each refusal names table.column."""
    from pipelines.columns import codec_of
    from pipelines.view import Column, SqlType, Table

    totals = Table.aggregate("codec_t", {"k": Column(SqlType(key_type)),
                                         **{c: Column(SqlType(t)) for c, t in NUMBERS.items()}}, ("k",))
    codec = codec_of(totals)
    assert codec_of(totals) is codec  # built once per table
    assert codec_of(Table.aggregate("codec_t", dict(totals.columns), ("k",))) is not codec  # a declaration's own
    assert codec.key_class is {"VARCHAR": str, "BOOLEAN": bool, "DATE": date}.get(key_type)
    (key_converter,) = codec.key_converters
    with pytest.raises(ValueError, match=r"^codec_t\.k is part of the primary key: it cannot be None$"):
        key_converter(None)
    assert set(codec.sum_checks) == set(NUMBERS)
    for column, fits, past in (("v_bigint", (1 << 63) - 1, 1 << 63), ("v_integer", (1 << 31) - 1, 1 << 31),
                               ("v_double", 1.5, math.inf), ("v_decimal", Decimal("9999.99"), Decimal("10000.00"))):
        codec.sum_checks[column](fits)
        with pytest.raises(Reject, match=rf"^codec_t\.{column}: the sum"):
            codec.sum_checks[column](past)
    assert codec.increment_classes == {"v_bigint": int, "v_integer": int, "v_double": float, "v_decimal": None}
    assert codec.utc_columns == (("k",) if key_type == "TIMESTAMPTZ" else ())

    rows = Table.per_stream("codec_rows", key="s", columns={c: Column(SqlType(t)) for c, t in EVERY_TYPE.items()})
    codec = codec_of(rows)
    assert set(codec.value_converters) == set(EVERY_TYPE) and codec.utc_columns == ("v_timestamptz",)
    for column in EVERY_TYPE:
        assert codec.value_converters[column](None) is None, column
        with pytest.raises((Reject, TypeError, ValueError), match=rf"^codec_rows\.{column}\b"):
            codec.value_converters[column](object())


def test_a_multi_column_key_is_always_converted_column_by_column():
    from pipelines.columns import codec_of
    from pipelines.view import Column, Table

    table = Table.aggregate("codec_two", {"day": Column(date), "shop": Column(str), "n": Column(int)}, ("day", "shop"))
    codec = codec_of(table)
    assert codec.key_class is None and len(codec.key_converters) == 2
    with pytest.raises(ValueError, match=r"^codec_two\.shop is part of the primary key"):
        codec.key_converters[1](None)
    assert codec.key_converters[0]("2026-11-02") == date(2026, 11, 2)
