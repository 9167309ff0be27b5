"""The views' expectations as GX 1.x validates them on pandas, each WHOLE table loaded: what the `expectations`
check ran before issue 12, kept as the reference that the DuckDB evaluation (`validate_suite`) is tested against
(tests/fast/test_expectations.py). It loads every table into memory, so it is for small tables only."""

from __future__ import annotations

import duckdb

from pipelines.observe.expectations import (ROWS_PER_PASS, _gx, _gx_failure, _gx_pandas_source, _gx_validate_frame,
                                            validate_suite)
from pipelines.store.layout import quoted
from pipelines.view import View


def validate_view_on_pandas(con: duckdb.DuckDBPyConnection, view: View) -> tuple[int, list[dict]]:
    """(expectations evaluated, failures), as GX on pandas finds them."""
    gx = _gx()
    source = _gx_pandas_source(gx, view.name)
    evaluated, failures = 0, []
    for table in view.tables:
        expectations = [e for e in view.rules if e.table == table.name]
        if not expectations:
            continue
        frame = con.execute(f"SELECT * FROM {quoted(table.name)}").df()
        for r in _gx_validate_frame(gx, source, view.name, table.name, frame, expectations):
            evaluated += 1
            if not r.success:
                failures.append(_gx_failure(table.name, r))
    return evaluated, failures


def validate_view(con: duckdb.DuckDBPyConnection, view: View, rows_per_pass: int = ROWS_PER_PASS) -> tuple[int, list[dict]]:
    """The same (expectations evaluated, failures), evaluated in DuckDB by the check's `validate_suite`."""
    suite = validate_suite(con, view, rows_per_pass)
    return len(suite.results), suite.failures
