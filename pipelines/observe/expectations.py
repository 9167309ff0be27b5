"""The views' declared expectations, evaluated inside DuckDB: the `expectations` asset check at scale.

Great Expectations defines the rules, DuckDB does the counting. Each `Expectation` a view declares
becomes its GX 1.x expectation, the same class and arguments the check always built (`gx_expectation`):
GX validates the arguments and gives the rule its type and kwargs. The rule is then evaluated in SQL
on the read store: one scan per table counts the rows and every not_null / between / in_set rule at
once, and each uniqueness rule is a grouped count (in hash partitions of at most `ROWS_PER_PASS` rows
on a large table, so that DuckDB's hash table stays small). No table is loaded into pandas: only the
few sample rows of a failing rule cross over, through the same DuckDB -> pandas conversion GX saw.

The semantics are GX's own on pandas, the way the check validated the views before issue 12 (each
whole table read into a DataFrame, as tests/expectations_reference.py still does), kept to the letter and tested
against it (tests/fast/test_expectations.py):

- a value is *missing* when pandas says so: SQL NULL, and NaN in a floating-point column;
- not_null counts the missing values; the other rules leave them out (GX's column-map domain);
- unique counts every row whose value occurs more than once (``duplicated(keep=False)``); compound
  unique does so over the rows where not all of its columns are missing, missing values comparing equal;
- DECIMAL columns reach pandas as float64, so they are compared and grouped as DOUBLE here too;
- a failure's sample is its first 5 failing values in table order (GX's ``partial_unexpected_list``),
  as text: ``str(value)``, or ``str(row)`` of the row's dict for a compound rule; the check's table
  shows the same rows typed, with their primary keys (`suite_markdown`);
- unexpected_percent is of the rows the rule looks at: every row for not_null, the rows whose value is
  not missing for the others (not all missing, for compound unique);
- per table, GX's order: the rules that could not be evaluated first, then the others, grouped by
  their column in order of first appearance (the multi-column rules form one group).

A rule SQL does not translate here (between on a DATE, TIMESTAMPTZ or BOOLEAN column, a set of values
of another type than the column, a minimum above the maximum) is validated by GX itself on pandas, on a
DataFrame of that rule's columns only: its result is GX's by construction. A rule on a column the
table does not have fails with no count, as in GX.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

import duckdb

from pipelines.observe.markdown import markdown_table
from pipelines.store.layout import quoted
from pipelines.view import Expectation, View

SAMPLE = 5
ROWS_PER_PASS = 2_000_000  # a uniqueness rule groups at most about this many rows at once (see _Table.unique)

_FLOATS = ("DOUBLE", "FLOAT", "REAL")
_INTEGERS = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT")


def _gx() -> Any:
    # GX 1.24 sends no usage statistics (it has no analytics code to switch off), so nothing is set here
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    return gx


def gx_expectation(gx: Any, e: Expectation) -> Any:
    """The GX 1.x expectation a declared rule stands for."""
    if e.rule == "not_null":
        return gx.expectations.ExpectColumnValuesToNotBeNull(column=e.columns[0])
    if e.rule == "unique" and len(e.columns) == 1:
        return gx.expectations.ExpectColumnValuesToBeUnique(column=e.columns[0])
    if e.rule == "unique":
        return gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(e.columns))
    if e.rule == "between":
        return gx.expectations.ExpectColumnValuesToBeBetween(column=e.columns[0], min_value=e.min_value,
                                                             max_value=e.max_value)
    if e.rule == "in_set":
        return gx.expectations.ExpectColumnValuesToBeInSet(column=e.columns[0], value_set=list(e.value_set))
    raise ValueError(f"unknown expectation rule {e.rule!r}")


_GX_FLOAT = (int, float, Decimal)  # a between bound GX 1.x configures as a float (bool is an int)
_GX_AS_IS = (str, int, float, type(None))  # a value of a set GX 1.x configures unchanged


def declared_config(e: Expectation) -> tuple[str, dict] | None:
    """The GX expectation type and kwargs of a declared rule, as `gx_expectation(gx, e).configuration`
    gives them (tests/fast/test_expectations.py holds the two equal), for the rules whose arguments GX takes
    as they come: numbers as floats for `between`, plain values for `in_set`. None for the others, which
    GX configures itself. Importing GX takes seconds, a good share of a small run's time: the check
    imports it only for a rule that needs it."""
    column = e.columns[0]
    if e.rule == "not_null":
        return "expect_column_values_to_not_be_null", {"column": column}
    if e.rule == "unique":
        return (("expect_column_values_to_be_unique", {"column": column}) if len(e.columns) == 1 else
                ("expect_compound_columns_to_be_unique", {"column_list": list(e.columns)}))
    if e.rule == "between" and all(v is None or isinstance(v, _GX_FLOAT) for v in (e.min_value, e.max_value)) \
            and (e.min_value, e.max_value) != (None, None):
        bounds = {k: float(v) for k, v in (("min_value", e.min_value), ("max_value", e.max_value)) if v is not None}
        return "expect_column_values_to_be_between", {"column": column, **bounds}
    if e.rule == "in_set" and all(isinstance(v, _GX_AS_IS) for v in e.value_set):
        return "expect_column_values_to_be_in_set", {"column": column, "value_set": list(e.value_set)}
    return None


def _gx_config(gx: Any, e: Expectation) -> tuple[str, dict]:
    config = gx_expectation(gx, e).configuration
    return config.type, dict(config.kwargs)


def _base(sql_type: str) -> str:
    return sql_type.split("(", 1)[0].strip().upper()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class _Rule:
    """One expectation of a table: the declared rule, its GX type and kwargs, and what evaluating it found."""

    declared: Expectation
    type: str
    kwargs: dict
    columns: list[str]
    raised: bool = False
    unexpected_count: int | None = None
    unexpected_percent: float | None = None  # GX's: of the rows the rule looks at (not_null: all of them)
    sample: list[str] = field(default_factory=list)
    sample_rows: list[dict] = field(default_factory=list)  # the sample's rows: their keys and values, typed

    @property
    def group(self) -> str:  # GX validates a suite's expectations grouped by their "column"
        column = self.kwargs.get("column")
        return column if isinstance(column, str) else "_nocolumn"


class _Table:
    """A table of the read store, its columns' types, and the SQL of the rules on it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, name: str, primary_key: tuple[str, ...]) -> None:
        self.con = con
        self.name = name
        self.primary_key = primary_key
        self.sql_name = quoted(name)
        described = con.execute(f"SELECT * FROM {self.sql_name} LIMIT 0").description
        self.types = {column: str(sql_type).upper() for column, sql_type, *_ in described}

    def base(self, column: str) -> str:
        return _base(self.types[column])

    def numeric(self, column: str) -> bool:
        return self.base(column) in _INTEGERS + _FLOATS + ("DECIMAL",)

    def missing(self, column: str) -> str:
        q = f"t.{quoted(column)}"
        return f"({q} IS NULL OR isnan({q}))" if self.base(column) in _FLOATS else f"({q} IS NULL)"

    def value(self, column: str) -> str:
        """The column as pandas holds it (DECIMAL as float64), to compare its non-missing values."""
        q = f"t.{quoted(column)}"
        return f"CAST({q} AS DOUBLE)" if self.base(column) == "DECIMAL" else q

    def key(self, column: str) -> str:
        """The column as a grouping key: as pandas holds it, every missing value the same (NULL)."""
        if self.base(column) in _FLOATS:
            q = f"t.{quoted(column)}"
            return f"(CASE WHEN isnan({q}) THEN NULL ELSE {q} END)"
        return self.value(column)

    def domain(self, rule: _Rule) -> str:
        """The rows the rule looks at, as GX has them: not_null every row, the other rules the rows
        whose value is not missing, compound unique the rows where not all its values are missing
        (GX's ignore_row_if="all_values_are_missing")."""
        if rule.type == "expect_column_values_to_not_be_null":
            return "TRUE"
        return "NOT (" + " AND ".join(self.missing(c) for c in rule.columns) + ")"

    # -- column-map rules: (unexpected condition, parameters), or None when SQL does not translate it --

    def condition(self, rule: _Rule) -> tuple[str, list] | None:
        column = rule.columns[0]
        if rule.type == "expect_column_values_to_not_be_null":
            return self.missing(column), []
        if rule.type == "expect_column_values_to_be_between":
            return self._between(column, rule.kwargs)
        if rule.type == "expect_column_values_to_be_in_set":
            return self._in_set(column, rule.kwargs.get("value_set"))
        return None

    def _between(self, column: str, kwargs: dict) -> tuple[str, list] | None:
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        bounds = [b for b in (low, high) if b is not None]
        if not bounds:
            return None
        if not (self.numeric(column) and all(_is_number(b) for b in bounds)):
            return None  # dates and times: GX's own comparison (and its errors) on pandas
        if low is not None and high is not None and low > high:
            return None  # GX raises "min_value cannot be greater than max_value"
        v, parts, params = self.value(column), [], []
        if low is not None:
            parts.append(f"{v} {'>' if kwargs.get('strict_min') else '>='} CAST(? AS DOUBLE)")
            params.append(low)
        if high is not None:
            parts.append(f"{v} {'<' if kwargs.get('strict_max') else '<='} CAST(? AS DOUBLE)")
            params.append(high)
        return f"(NOT {self.missing(column)} AND NOT ({' AND '.join(parts)}))", params

    def _in_set(self, column: str, value_set: Any) -> tuple[str, list] | None:
        if value_set is None:
            return None
        values, base = list(value_set), self.base(column)
        if base in _INTEGERS and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            cast = "BIGINT"  # exact, as pandas' isin on integers
        elif self.numeric(column) and all(_is_number(v) for v in values):
            cast = "DOUBLE"
        elif base == "VARCHAR" and all(isinstance(v, str) for v in values):
            cast = "VARCHAR"
        elif base == "BOOLEAN" and all(isinstance(v, bool) for v in values):
            cast = "BOOLEAN"
        else:
            return None
        member = (f"{self.value(column)} IN ({', '.join(f'CAST(? AS {cast})' for _ in values)})"
                  if values else "FALSE")
        return f"(NOT {self.missing(column)} AND NOT ({member}))", values

    # -- uniqueness rules ------------------------------------------------------------------------------------

    def unique(self, rule: _Rule, rows: int, rows_per_pass: int) -> None:
        """Count the rows of the rule's domain whose key occurs more than once in it (all of them, as
        pandas' ``duplicated(keep=False)``), and sample the first of them.

        The count groups by the key; a hash table of 10M keys costs DuckDB ~650 MB, so a large table is
        grouped in passes, each over the keys of one hash partition (the scans are cheap)."""
        columns, domain = rule.columns, self.domain(rule)
        keys = [self.key(c) for c in columns]
        passes = max(1, -(-rows // rows_per_pass))
        counted = ", ".join(f"{k} AS _k{i}" for i, k in enumerate(keys))
        on = " AND ".join(f"{k} IS NOT DISTINCT FROM d._k{i}" for i, k in enumerate(keys))
        total, first = 0, []
        for part in range(passes):
            where = domain if passes == 1 else f"{domain} AND hash({', '.join(keys)}) % {passes} = {part}"
            duplicated = (f"SELECT {counted}, count(*) AS _n FROM {self.sql_name} AS t WHERE {where} "
                          f"GROUP BY ALL HAVING count(*) > 1")
            count, = self.con.execute(f"SELECT coalesce(sum(_n), 0) FROM ({duplicated})").fetchone()
            if count:
                total += int(count)
                first += [r for r, in self.con.execute(
                    f"SELECT t.rowid FROM {self.sql_name} AS t SEMI JOIN ({duplicated}) AS d ON {on} "
                    f"WHERE {where} ORDER BY t.rowid LIMIT {SAMPLE}").fetchall()]
        rule.unexpected_count = total
        if first:
            first = sorted(first)[:SAMPLE]
            self.sample(rule, f"t.rowid IN ({', '.join('?' * len(first))})", first)

    # -- samples ---------------------------------------------------------------------------------------------

    def sample(self, rule: _Rule, where: str, params: list) -> None:
        """The rule's first failing values in table order: as text, exactly as GX's pandas result lists
        them, and as the rows' keys and values with their Python types (6, not "6")."""
        columns = rule.columns
        shown = list(dict.fromkeys([c for c in self.primary_key if c in self.types] + columns))
        rows = self.con.execute(f"SELECT {', '.join(f't.{quoted(c)}' for c in shown)} FROM {self.sql_name} AS t "
                                f"WHERE {where} ORDER BY t.rowid LIMIT {SAMPLE}", params).fetchall()
        rule.sample_rows = [dict(zip(shown, row)) for row in rows]
        rule.sample = self._as_gx_text(columns, where, params)

    def _as_gx_text(self, columns: list[str], where: str, params: list) -> list[str]:
        selected = ", ".join(f"t.{quoted(c)}" for c in columns)
        frame = self.con.execute(f"SELECT {selected} FROM {self.sql_name} AS t WHERE {where} "
                                 f"ORDER BY t.rowid LIMIT {SAMPLE}", params).df()
        for c in columns:
            # pandas holds a VARCHAR column as str (a NULL is nan) unless all its values are NULL (object:
            # None): a sample of NULLs alone must read as the whole column does
            if self.base(c) == "VARCHAR" and frame[c].dtype == object and self._has_values(c):
                frame[c] = frame[c].astype("str")
        if len(columns) == 1:
            return [str(v) for v in list(frame.iloc[:, 0])]
        return [str(row) for row in frame.to_dict("records")]

    def _has_values(self, column: str) -> bool:
        found, = self.con.execute(
            f"SELECT EXISTS (SELECT 1 FROM {self.sql_name} WHERE {quoted(column)} IS NOT NULL)").fetchone()
        return bool(found)


def _evaluate_sql(table: _Table, rules: list[_Rule], rows_per_pass: int) -> list[_Rule]:
    """Evaluate the rules SQL translates; return the others."""
    mapped: list[tuple[_Rule, str, list]] = []
    unique: list[_Rule] = []
    rest: list[_Rule] = []
    for rule in rules:
        if any(c not in table.types for c in rule.columns):
            rule.raised = True  # as in GX: the metric cannot be computed, the result has no count
        elif rule.type in ("expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique"):
            unique.append(rule)
        elif (translated := table.condition(rule)) is not None:
            mapped.append((rule, *translated))
        else:
            rest.append(rule)

    # one scan counts the rows, every column-map rule's unexpected rows, and every rule's domain
    counted = ([f"count(*) FILTER (WHERE {cond})" for _, cond, _ in mapped] +
               [f"count(*) FILTER (WHERE {table.domain(rule)})" for rule in [r for r, _, _ in mapped] + unique])
    rows, *counts = table.con.execute(f"SELECT {', '.join(['count(*)'] + counted)} FROM {table.sql_name} AS t",
                                      [p for _, _, params in mapped for p in params]).fetchone()
    unexpected, domains = counts[:len(mapped)], counts[len(mapped):]
    for (rule, cond, params), count in zip(mapped, unexpected):
        rule.unexpected_count = int(count)
        if count:
            table.sample(rule, cond, params)
    for rule in unique:
        table.unique(rule, rows, rows_per_pass)
    for rule, domain in zip([r for r, _, _ in mapped] + unique, domains):
        rule.unexpected_percent = rule.unexpected_count / domain * 100 if domain else None
    return rest


def _evaluate_with_gx(gx: Any, table: _Table, view: View, rules: list[_Rule]) -> None:
    """GX on pandas, for the rules SQL does not translate, on a DataFrame of their columns only."""
    columns = list(dict.fromkeys(c for rule in rules for c in rule.columns))
    frame = table.con.execute(f"SELECT {', '.join(quoted(c) for c in columns)} FROM {table.sql_name}").df()
    pending = list(rules)
    for r in _gx_validate_frame(gx, _gx_pandas_source(gx, view.name), view.name, table.name, frame,
                                [rule.declared for rule in rules]):
        failure = None if r.success else _gx_failure(table.name, r)
        rule = next(x for x in pending if x.type == r.expectation_config.type and
                    x.kwargs == _kwargs(r.expectation_config))
        pending.remove(rule)
        rule.raised = failure is not None and failure["unexpected_count"] is None
        rule.unexpected_count = 0 if failure is None else failure["unexpected_count"]
        rule.unexpected_percent = r.result.get("unexpected_percent")
        rule.sample = [] if failure is None else failure["sample"]
        # GX on pandas lists the failing values alone, not their rows: no keys to show
        rule.sample_rows = [{rule.columns[0]: getattr(v, "item", lambda v=v: v)()}
                            for v in (r.result.get("partial_unexpected_list") or [])[:SAMPLE]
                            if len(rule.columns) == 1]


# -- GX on pandas --------------------------------------------------------------------------------------------

def _kwargs(config: Any) -> dict:
    return {k: v for k, v in config.kwargs.items() if k != "batch_id"}


def _gx_pandas_source(gx: Any, view_name: str) -> Any:
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    return context.data_sources.add_pandas(f"inorder_{view_name}")


def _gx_validate_frame(gx: Any, source: Any, view_name: str, table_name: str, frame: Any,
                       expectations: list[Expectation]) -> list:
    batch = (source.add_dataframe_asset(name=table_name).add_batch_definition_whole_dataframe("all")
             .get_batch(batch_parameters={"dataframe": frame}))
    suite = gx.ExpectationSuite(name=f"{view_name}.{table_name}")
    for e in expectations:
        suite.add_expectation(gx_expectation(gx, e))
    return batch.validate(suite).results


def _gx_failure(table_name: str, r: Any) -> dict:
    return {
        "table": table_name,
        "expectation": r.expectation_config.type,
        "kwargs": _kwargs(r.expectation_config),
        "unexpected_count": r.result.get("unexpected_count"),
        "unexpected_percent": r.result.get("unexpected_percent"),
        "sample": [str(v) for v in (r.result.get("partial_unexpected_list") or [])[:SAMPLE]],
    }


# -- the check -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExpectationResult:
    """One expectation of a view's suite, as GX reports it, with its failing rows' keys."""

    table: str
    type: str
    kwargs: dict
    success: bool
    unexpected_count: int | None  # None when the rule could not be evaluated (a column the table lacks)
    unexpected_percent: float | None
    sample: list[str]  # GX's partial_unexpected_list, as text
    sample_rows: list[dict]  # the same rows' primary keys and values, typed

    def failure(self) -> dict:
        """The JSON a script reads, and GX on pandas gives (tests/expectations_reference.py)."""
        return {"table": self.table, "expectation": self.type, "kwargs": self.kwargs,
                "unexpected_count": self.unexpected_count, "unexpected_percent": self.unexpected_percent,
                "sample": self.sample}


class SuiteResult(NamedTuple):
    """A view's expectation suite (named after the view), every expectation's result in GX's order."""

    suite: str
    results: list[ExpectationResult]

    @property
    def failures(self) -> list[dict]:
        return [r.failure() for r in self.results if not r.success]


def validate_suite(con: duckdb.DuckDBPyConnection, view: View, rows_per_pass: int = ROWS_PER_PASS) -> SuiteResult:
    """Evaluate the view's expectations on its tables, in DuckDB, as GX would on pandas."""
    gx = functools.cache(_gx)  # imported when a rule needs it
    results: list[ExpectationResult] = []
    for table in view.tables:
        rules: list[_Rule] = []
        for e in view.rules:
            if e.table != table.name:
                continue
            rule_type, kwargs = declared_config(e) or _gx_config(gx(), e)
            if any(r.type == rule_type and r.kwargs == kwargs for r in rules):
                continue  # a GX suite holds an expectation once
            columns = list(kwargs["column_list"]) if "column_list" in kwargs else [kwargs["column"]]
            rules.append(_Rule(e, rule_type, kwargs, columns))
        if not rules:
            continue
        sql_table = _Table(con, table.name, table.primary_key)
        rest = _evaluate_sql(sql_table, rules, rows_per_pass)
        if rest:
            _evaluate_with_gx(gx(), sql_table, view, rest)
        # GX's order: expectations grouped by their "column" (the others as one group), in order of first
        # appearance; the ones whose metrics raised come first
        groups: dict[str, int] = {}
        for rule in rules:
            groups.setdefault(rule.group, len(groups))
        for rule in sorted(rules, key=lambda r: (not r.raised, groups[r.group])):  # stable: declared order
            failed = rule.raised or bool(rule.unexpected_count)
            results.append(ExpectationResult(
                table.name, rule.type, rule.kwargs, not failed, None if rule.raised else rule.unexpected_count,
                None if rule.raised else rule.unexpected_percent, rule.sample if failed and not rule.raised else [],
                rule.sample_rows if failed and not rule.raised else []))
    return SuiteResult(view.name, results)


SUITE_HEADER = ("", "expectation", "table.column", "kwargs", "unexpected", "unexpected %", "sample (row keys)")


def suite_markdown(suite: SuiteResult) -> str:
    """The suite as a GX user reads it: a row per expectation, ✓ or ✗, with the failing rows' typed values."""
    def row(r: ExpectationResult) -> tuple:
        columns = r.kwargs.get("column_list") or [r.kwargs.get("column")]
        kwargs = ", ".join(f"{k}={v!r}" for k, v in r.kwargs.items() if k not in ("column", "column_list"))
        percent = None if r.unexpected_percent is None else f"{r.unexpected_percent:.2f} %"
        return ("✓" if r.success else "✗", r.type, f"{r.table}.{'+'.join(map(str, columns))}", kwargs or None,
                "could not be evaluated" if r.unexpected_count is None else r.unexpected_count, percent,
                "; ".join(sample_row(found, columns) for found in r.sample_rows) or None)
    return markdown_table(SUITE_HEADER, [row(r) for r in suite.results], width=600) if suite.results \
        else "no expectations declared"


def sample_row(found: dict, columns: list[str]) -> str:
    """A failing row: its failing values, typed (6, -5.00, '6', NULL), then its keys."""
    values = ", ".join(_typed(found[c]) for c in columns)
    keys = ", ".join(f"{k}={_typed(v)}" for k, v in found.items() if k not in columns)
    return f"{values} ({keys})" if keys else values


def _typed(value: Any) -> str:
    return "NULL" if value is None else str(value) if isinstance(value, (Decimal, bool, int, float)) else repr(value)
