"""The views' expectations evaluated in DuckDB SQL (`validate_suite`) against what the `expectations` check ran
before: GX 1.x validating each whole table on pandas (tests/expectations_reference.py). On small tables with
known violations of every rule, on the repository's own views and on random tables, both must return the same
thing: expectations evaluated, and the same failures in the same order with the same kwargs, unexpected_count,
unexpected_percent and sample."""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.observe.expectations import SUITE_HEADER, suite_markdown, validate_suite
from tests.expectations_reference import validate_view, validate_view_on_pandas
from tests.profiles import examples
from pipelines.registry import load_views
from pipelines.view import Column, Expectation, SqlType, Table, View, between, in_set, not_null, unique

COLUMNS = {
    "id": "VARCHAR", "pos": "BIGINT", "n": "INTEGER", "amt": "DECIMAL(18,2)", "big": "DECIMAL(38,4)",
    "x": "DOUBLE", "b": "BOOLEAN", "d": "DATE", "ts": "TIMESTAMPTZ", "st": "VARCHAR",
}
ROWS = [
    # id, pos, n, amt, big, x, b, d, ts, st
    ("a", 1, 1, "1.50", "1.5", 1.5, True, "2024-01-01", "2024-01-01 00:00:00+00", "open"),
    ("a", 2, 2, "-1.50", "-3", None, None, None, None, "bad"),
    ("b", 1, None, None, None, -2.0, False, "2024-01-02", "2024-01-02 10:00:00+00", None),
    ("c", 0, 0, "0.00", "0", 1e300, True, "2024-01-01", "2024-01-01 00:00:00+00", "closed"),
    ("d", 5, 7, "100.25", "100.25", "nan", None, "2024-01-03", "2024-01-01 00:00:00+00", "open"),
    (None, None, None, None, None, None, None, None, None, None),
    (None, 1, 1, "1.50", "1.5", "nan", True, "2024-01-01", "2024-01-01 00:00:00+00", "open"),
    ("e", 9, -4, "0.01", "0.0001", -0.0, False, "2023-12-31", "2024-01-05 23:59:59+00", "closed"),
]


def _connection(columns: dict[str, str], rows: list[tuple], name: str = "t") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # as the store's connections
    con.execute(f'CREATE TABLE "{name}" (' + ", ".join(f'"{c}" {t}' for c, t in columns.items()) + ")")
    if rows:
        casts = ", ".join(f"CAST(? AS {t})" for t in columns.values())
        con.executemany(f'INSERT INTO "{name}" SELECT {casts}', [list(r) for r in rows])
    return con


def _view(tables: dict[str, dict[str, str]], expectations: list[Expectation]) -> View:
    """A view whose rules are `expectations` as given, in that order: also rules no `Column` declares (one
    twice, on a column or a table the view lacks), which the check must survive when the store changed."""
    view = View("v", tuple(_table(name, columns) for name, columns in tables.items()), ("x",))
    view.__dict__["rules"] = tuple(expectations)  # `rules` is a cached_property: this is its cached value
    return view


def _table(name: str, columns: dict[str, str]) -> Table:
    # the declaration only names the table here: the rows are the store's, made without constraints
    return Table(name, {"k": Column(str), **{c: Column(SqlType(t)) for c, t in columns.items()}}, ("k",), kind="keyed",
                 stream_key="k")


def reference_validate_view(con: duckdb.DuckDBPyConnection, view: View) -> tuple:
    return validate_view_on_pandas(con, view)


def _both(con: duckdb.DuckDBPyConnection, view: View) -> tuple:
    expected = reference_validate_view(con, view)
    actual = validate_view(con, view)
    assert actual == expected
    assert validate_view(con, view, rows_per_pass=3) == expected  # uniqueness grouped in hash partitions
    return actual


def _failure(result: tuple, expectation: str, **kwargs) -> dict:
    (found,) = [f for f in result[1] if f["expectation"] == expectation and
                all(f["kwargs"].get(k) == v for k, v in kwargs.items())]
    return found


def test_not_null_on_every_column_type():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, not_null("t", *COLUMNS)))
    assert result[0] == len(COLUMNS)
    counts = {f["kwargs"]["column"]: f["unexpected_count"] for f in result[1]}
    assert counts == {"id": 2, "pos": 1, "n": 2, "amt": 2, "big": 2, "x": 4, "b": 3, "d": 2, "ts": 2, "st": 2}
    assert _failure(result, "expect_column_values_to_not_be_null", column="st")["sample"] == ["nan", "nan"]
    assert _failure(result, "expect_column_values_to_not_be_null", column="pos")["sample"] == ["<NA>"]
    assert _failure(result, "expect_column_values_to_not_be_null", column="d")["sample"] == ["NaT", "NaT"]


def test_unique_single_columns():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, [unique("t", c) for c in COLUMNS]))
    assert _failure(result, "expect_column_values_to_be_unique", column="id") == {
        "table": "t", "expectation": "expect_column_values_to_be_unique", "kwargs": {"column": "id"},
        "unexpected_count": 2, "unexpected_percent": 2 / 6 * 100, "sample": ["a", "a"]}
    assert _failure(result, "expect_column_values_to_be_unique", column="pos")["unexpected_count"] == 3
    assert _failure(result, "expect_column_values_to_be_unique", column="amt")["sample"] == ["1.5", "1.5"]


def test_unique_compound_columns_missing_values_compare_equal_and_all_missing_rows_are_ignored():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, [
        unique("t", "id", "pos"), unique("t", "amt", "big", "x", "b"), unique("t", "d", "ts"), unique("t", "n", "x"),
        unique("t", "b", "st"), unique("t", "pos", "st", "d"),
    ]))
    assert result[0] == 6
    dates = _failure(result, "expect_compound_columns_to_be_unique", column_list=["d", "ts"])
    assert dates["unexpected_count"] == 3
    assert dates["sample"][0] == ("{'d': Timestamp('2024-01-01 00:00:00'), "
                                  "'ts': Timestamp('2024-01-01 00:00:00+0000', tz='UTC')}")


def test_compound_unique_with_partly_missing_keys():
    columns = {"a": "VARCHAR", "p": "BIGINT", "x": "DOUBLE"}
    rows = [("a", 1, 1.0), ("a", 1, 1.0), ("a", None, None), ("a", None, "nan"), (None, None, None),
            (None, None, None), (None, 2, None), (None, 2, "nan"), ("b", 3, 0.0), ("b", 3, -0.0)]
    con = _connection(columns, rows)
    result = _both(con, _view({"t": columns}, [unique("t", "a", "p"), unique("t", "a", "p", "x"), unique("t", "x")]))
    assert _failure(result, "expect_compound_columns_to_be_unique", column_list=["a", "p", "x"])["sample"][:3] == [
        "{'a': 'a', 'p': 1, 'x': 1.0}", "{'a': 'a', 'p': 1, 'x': 1.0}", "{'a': 'a', 'p': None, 'x': nan}"]


def test_between_with_min_max_both_and_strict_bounds():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, [
        between("t", "pos", min_value=1), between("t", "amt", min_value=0.01), between("t", "amt", max_value=100),
        between("t", "pos", 1, 3), between("t", "x", min_value=0), between("t", "n", max_value=1),
        between("t", "big", -1, 1.5), Expectation("t", "between", ("amt",), min_value=0, max_value=1.5),
    ]))
    assert result[0] == 8
    assert _failure(result, "expect_column_values_to_be_between", column="pos", min_value=1.0, max_value=3.0) == {
        "table": "t", "expectation": "expect_column_values_to_be_between",
        "kwargs": {"column": "pos", "min_value": 1.0, "max_value": 3.0}, "unexpected_count": 3,
        "unexpected_percent": 3 / 7 * 100, "sample": ["0", "5", "9"]}
    assert _failure(result, "expect_column_values_to_be_between", column="amt", min_value=0.01)["sample"] == [
        "-1.5", "0.0"]
    assert _failure(result, "expect_column_values_to_be_between", column="x")["unexpected_count"] == 1  # -0.0 is in


def test_an_expectation_gx_refuses_raises_the_same_error():
    con = _connection(COLUMNS, ROWS)
    for rule in (between("t", "st", "c", "o"), between("t", "pos"), Expectation("t", "matches", ("id",))):
        view = _view({"t": COLUMNS}, [rule])
        with pytest.raises(Exception) as expected:
            reference_validate_view(con, view)
        with pytest.raises(type(expected.value)):
            validate_view(con, view)


def test_a_table_missing_from_the_store_raises_as_before():
    con = _connection(COLUMNS, ROWS)
    view = _view({"t": COLUMNS, "absent": {"v": "BIGINT"}}, [unique("t", "id"), *not_null("absent", "v")])
    with pytest.raises(duckdb.CatalogException):
        reference_validate_view(con, view)
    with pytest.raises(duckdb.CatalogException):
        validate_view(con, view)


def test_in_set_on_strings_integers_decimals_and_booleans():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, [
        in_set("t", "st", ("open", "closed")), in_set("t", "pos", (1, 2)), in_set("t", "amt", (1.5, 0)),
        in_set("t", "b", (True,)), in_set("t", "n", (1, 2.0, 7)), in_set("t", "x", (1.5, 1e300)),
        in_set("t", "id", ()),
    ]))
    assert _failure(result, "expect_column_values_to_be_in_set", column="st") == {
        "table": "t", "expectation": "expect_column_values_to_be_in_set",
        "kwargs": {"column": "st", "value_set": ["open", "closed"]}, "unexpected_count": 1,
        "unexpected_percent": 1 / 6 * 100, "sample": ["bad"]}
    assert _failure(result, "expect_column_values_to_be_in_set", column="id")["unexpected_count"] == 6


def test_rules_sql_does_not_translate_go_through_gx_on_their_column_alone():
    con = _connection(COLUMNS, ROWS)
    result = _both(con, _view({"t": COLUMNS}, [
        between("t", "d", min_value="2024-01-02"),  # GX cannot compare dates with text: fails with no count
        between("t", "ts", min_value="2024-01-02"),  # GX parses the bound for a time zone aware column
        between("t", "st", min_value=1),  # text against a number: GX raises
        between("t", "b", max_value=0),
        in_set("t", "st", (1, "open")),
        in_set("t", "d", ("2024-01-01",)),
        in_set("t", "b", (1,)),
        unique("t", "st"),
    ]))
    assert _failure(result, "expect_column_values_to_be_between", column="d")["unexpected_count"] is None
    assert result[1][0]["unexpected_count"] is None  # what raised comes first, as GX orders it


def test_missing_column_duplicated_expectation_empty_table_and_order_of_failures():
    con = _connection(COLUMNS, ROWS)
    con.execute('CREATE TABLE "empty" (k VARCHAR, v BIGINT)')
    view = _view({"t": COLUMNS, "empty": {"v": "BIGINT"}, "unchecked": {"v": "BIGINT"}}, [
        *not_null("t", "st", "nope", "id"), unique("t", "id"), unique("t", "id"), unique("t", "id", "nope"),
        in_set("t", "st", ("open",)), between("t", "pos", min_value=1), unique("t", "st"),
        *not_null("empty", "v"), unique("empty", "k", "v"), between("empty", "v", 0, 1), in_set("empty", "k", ("a",)),
        not_null("other", "v")[0],
    ])
    result = _both(con, view)
    assert result[0] == 8 + 4  # the duplicate counted once, the table the view does not declare not at all
    assert [f["kwargs"].get("column") for f in result[1][:2]] == ["nope", None]


def test_sample_follows_table_order_after_updates_and_deletes():
    columns = {"k": "VARCHAR", "v": "BIGINT"}
    con = _connection(columns, [(f"k{i}", i) for i in range(3000)])
    con.execute("DELETE FROM t WHERE v % 7 = 0")
    con.execute("UPDATE t SET v = -v WHERE v % 5 = 0")
    con.execute("INSERT INTO t VALUES ('new', -1), ('k1', 1)")
    result = _both(con, _view({"t": columns}, [between("t", "v", min_value=0), unique("t", "k")]))
    # the multiples of 5 that are not multiples of 7 (so not 0), and -1
    assert _failure(result, "expect_column_values_to_be_between")["unexpected_count"] == 515


BANK_AND_SHOP = [v for v in load_views("views,shop.views") if v.rules]


def _broken_value(sql_type: str, i: int):
    """Values of a column's type, some of them breaking the views' rules: NULLs, negatives, zeros,
    duplicates (i repeats), text outside any set."""
    if i % 9 == 8:
        return None
    if sql_type == "VARCHAR":
        return ["open", "closed", "Deposited", "Withdrawn", "placed", "bad", "x", "gold"][i % 8] + (
            "" if i % 3 else str(i % 4))
    if sql_type in ("BIGINT", "INTEGER"):
        return [0, 1, 2, -1, 3, 1, 7, 100, 200][i % 9]
    if sql_type == "DOUBLE":
        return [0.5, -0.5, 0.0, 2.5][i % 4]
    if sql_type.startswith("DECIMAL"):
        return ["0.00", "0.01", "-1.00", "12.34", "0.01"][i % 5]
    if sql_type == "BOOLEAN":
        return i % 2 == 0
    if sql_type == "DATE":
        return f"2024-01-0{1 + i % 3}"
    if sql_type == "TIMESTAMPTZ":
        return f"2024-01-0{1 + i % 2} 0{i % 3}:00:00+00"
    raise AssertionError(sql_type)


@pytest.mark.parametrize("view", BANK_AND_SHOP, ids=lambda v: v.name)
def test_the_repository_views_expectations_on_broken_tables(view):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table in view.tables:  # no primary key: the rows may break it
        declared = ", ".join(f'"{c}" {t}' for c, t in table.sql_types.items())
        con.execute(f'CREATE TABLE "{table.name}" ({declared})')
        casts = ", ".join(f"CAST(? AS {t})" for t in table.sql_types.values())
        rows = [[_broken_value(t, i * (j + 2)) for j, t in enumerate(table.sql_types.values())] for i in range(60)]
        con.executemany(f'INSERT INTO "{table.name}" SELECT {casts}', rows)
    evaluated, failures = _both(con, view)
    assert evaluated == len(view.rules) and failures


@pytest.mark.parametrize("view", BANK_AND_SHOP, ids=lambda v: v.name)
def test_the_repository_views_pass_on_clean_tables(view):
    con = duckdb.connect()
    for table in view.tables:
        con.execute(table.ddl())
    assert _both(con, view) == (len(view.rules), [])


# -- random tables --------------------------------------------------------------------------------------------

TYPES = {
    "VARCHAR": st.sampled_from(["a", "b", "c", "é", ""]),
    "BIGINT": st.integers(-3, 3),
    "INTEGER": st.integers(-3, 3),
    "DOUBLE": st.sampled_from([0.0, -0.0, 0.5, -1.5, 2.0, math.nan, math.inf]),
    "DECIMAL(18,2)": st.sampled_from(["0.00", "0.01", "-0.01", "1.50", "2.00"]),
    "BOOLEAN": st.booleans(),
    "DATE": st.sampled_from(["2024-01-01", "2024-01-02"]),
    "TIMESTAMPTZ": st.sampled_from(["2024-01-01 00:00:00+00", "2024-01-01 12:00:00+00"]),
}
BOUNDS = {  # GX takes numbers, dates and times only
    "DATE": st.sampled_from(["2024-01-01", "2024-01-02"]),
    "TIMESTAMPTZ": st.sampled_from(["2024-01-01T06:00:00+00:00"]),
    "BIGINT": st.integers(-2, 2), "INTEGER": st.sampled_from([-2, 0, 1.5]), "DOUBLE": st.sampled_from([-1.0, 0, 0.5]),
    "DECIMAL(18,2)": st.sampled_from([0, 0.01, 1.5]),
}


@st.composite
def tables_and_rules(draw):
    names = ["c0", "c1", "c2", "c3"]
    types = {n: draw(st.sampled_from(sorted(TYPES))) for n in names}
    rows = draw(st.lists(st.tuples(*(st.one_of(st.none(), TYPES[types[n]]) for n in names)), max_size=25))
    rules: list[Expectation] = []
    for _ in range(draw(st.integers(1, 6))):
        column = draw(st.sampled_from(names))
        kind = draw(st.sampled_from(["not_null", "unique", "compound", "between", "in_set"]))
        if kind == "not_null":
            rules.append(not_null("t", column)[0])
        elif kind == "unique":
            rules.append(unique("t", column))
        elif kind == "compound":
            rules.append(unique("t", *draw(st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True))))
        elif kind == "between" and types[column] in BOUNDS:
            low = draw(st.one_of(st.none(), BOUNDS[types[column]]))
            high = draw(BOUNDS[types[column]]) if low is None else draw(st.one_of(st.none(), BOUNDS[types[column]]))
            rules.append(between("t", column, low, high))
        elif kind == "in_set":
            values = draw(st.lists(TYPES[types[column]], max_size=3, unique_by=str))
            if types[column] in ("DATE", "TIMESTAMPTZ"):
                values = []  # GX compares datetimes with no text
            rules.append(in_set("t", column, tuple(values)))
    return types, rows, rules


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables_and_rules())
def test_random_tables_agree_with_gx_on_pandas(case):
    types, rows, rules = case
    con, view = _connection(types, rows), _view({"t": types}, rules)
    try:
        validate_view_on_pandas(con, view)
    except Exception as refused:  # GX refuses the rule (a minimum above the maximum...): so must this
        with pytest.raises(type(refused)):
            validate_view(con, view)
        return
    _both(con, view)


ANY_BOUND = st.one_of(st.none(), st.integers(-10**30, 10**30), st.booleans(), st.decimals(allow_nan=False),
                   st.floats(allow_nan=False), st.dates(), st.text(max_size=3))
SET_VALUES = st.one_of(st.none(), st.text(max_size=5), st.integers(), st.booleans(), st.floats(allow_nan=False),
                       st.decimals(allow_nan=False), st.dates())


@st.composite
def declared_rules(draw) -> Expectation:
    columns = tuple(draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)))
    rule = draw(st.sampled_from(["not_null", "unique", "between", "in_set"]))
    if rule in ("not_null", "between", "in_set"):
        columns = columns[:1]
    return Expectation("t", rule, columns, min_value=draw(ANY_BOUND), max_value=draw(ANY_BOUND),
                       value_set=tuple(draw(st.lists(SET_VALUES, max_size=4))))


@settings(max_examples=examples(300), deadline=None)
@given(declared_rules())
def test_rules_configured_without_gx_are_configured_as_gx_does(e):
    """The check imports GX only for rules `declared_config` leaves to it: for every other rule, the type
    and kwargs must be GX's own, value for value and type for type."""
    from pipelines.observe.expectations import _gx, declared_config, gx_expectation

    declared = declared_config(e)
    if declared is None:
        return
    config = gx_expectation(_gx(), e).configuration
    assert declared == (config.type, dict(config.kwargs))
    assert [type(v) for v in declared[1].values()] == [type(v) for v in config.kwargs.values()]
    assert [type(v) for v in declared[1].get("value_set", [])] == [type(v) for v in config.kwargs.get("value_set", [])]


def test_the_suite_reads_as_gx_results_a_row_per_expectation_with_typed_samples_and_their_keys():
    columns = {"k": "VARCHAR", "pos": "BIGINT", "amt": "DECIMAL(18,2)", "st": "VARCHAR"}
    rows = [("r1", 6, "1.50", "open"), ("r2", 1, "-5.00", "6"), ("r3", 2, "2.00", "open"), ("r4", 6, "3.00", None)]
    con = _connection(columns, rows)
    view = _view({"t": columns}, [between("t", "pos", max_value=5), between("t", "amt", min_value=0),
                                  in_set("t", "st", ("open",)), unique("t", "pos"), not_null("t", "st")[0],
                                  unique("t", "k"), in_set("t", "pos", (1, "2"))])
    suite = validate_suite(con, view)
    assert suite.suite == "v" and suite.failures == validate_view(con, view)[1]
    table = suite_markdown(suite).splitlines()
    assert table[0] == "| " + " | ".join(SUITE_HEADER) + " |" and len(table) == 2 + 7
    # the integer 6 is 6 and the text "6" is '6', each with the key of its row
    assert "| ✗ | expect_column_values_to_be_between | t.pos | max_value=5.0 | 2 | 50.00 % | 6 (k='r1'); 6 (k='r4') |" \
        in table
    assert "| ✗ | expect_column_values_to_be_in_set | t.st | value_set=['open'] | 1 | 33.33 % | '6' (k='r2') |" in table
    assert "| ✗ | expect_column_values_to_be_between | t.amt | min_value=0.0 | 1 | 25.00 % | -5.00 (k='r2') |" in table
    assert "| ✓ | expect_column_values_to_be_unique | t.k | - | 0 | 0.00 % | - |" in table
    assert "| ✗ | expect_column_values_to_not_be_null | t.st | - | 1 | 25.00 % | NULL (k='r4') |" in table
    # a rule GX evaluates itself on pandas (a set of mixed types) lists its values alone: GX gives no rows
    assert "| ✗ | expect_column_values_to_be_in_set | t.pos | value_set=[1, '2'] | 3 | 75.00 % | 6; 2; 6 |" in table
