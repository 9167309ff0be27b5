"""The engine's rules in Python (pipelines/engine/rules.py, what tests/memory_engine.py runs) agree with
the SQL the engine runs on the store: which buffered streams a pass walks (`DUE_BUFFERS`)."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.engine.inputs import DUE_BUFFERS
from pipelines.engine.rules import buffer_is_due, running_pending
from pipelines.engine.outcomes import OUTCOME_COLUMNS

T0_US = 1_767_225_600_000_000  # 2026-01-01 UTC, in microseconds
times = st.integers(T0_US - 6, T0_US + 2)  # close enough that a timer falls due exactly at the pass's time
watermarks = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5), st.booleans(),
                                st.none() | times), max_size=12)
limits = st.fixed_dictionaries({"a": st.tuples(st.integers(0, 4), st.integers(1, 4)),
                                "b": st.tuples(st.integers(0, 4), st.integers(1, 4))})


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=watermarks, view_limits=limits, t_us=times)
def test_due_buffers_sql_and_python_choose_the_same_streams(rows, view_limits, t_us):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE SCHEMA st")
    con.execute("CREATE TABLE st.watermarks (view VARCHAR, stream_id VARCHAR, pending_count BIGINT, "
                "parked BOOLEAN, blocked_since TIMESTAMPTZ)")
    for i, (view, pending, parked, since) in enumerate(rows):
        con.execute("INSERT INTO st.watermarks VALUES (?, ?, ?, ?, ?)", [
            view, f"s{i}", pending, parked, None if since is None else
            datetime.fromtimestamp(since // 1_000_000, timezone.utc).replace(microsecond=since % 1_000_000)])
    values = [(view, t_us, gap_us, max_pending) for view, (gap_us, max_pending) in view_limits.items()]
    sql = DUE_BUFFERS.format(state="st", limits="(VALUES (?, ?, ?, ?), (?, ?, ?, ?)) "
                                                "l(view, t_us, gap_timeout_us, max_pending)")
    by_sql = set(con.execute(sql, [x for row in values for x in row]).fetchall())
    by_python = {(view, f"s{i}") for i, (view, pending, parked, since) in enumerate(rows)
                 if buffer_is_due(pending, parked, since, *view_limits[view], t_us)}
    assert by_python == by_sql


@given(before=st.integers(0, 50), entries=st.lists(st.fixed_dictionaries(
    {name: st.integers(0, 5) for name in ("selected", *OUTCOME_COLUMNS)}), max_size=6))
def test_running_pending_adds_what_was_selected_less_what_left(before, entries):
    pending = list(running_pending(before, entries))
    assert len(pending) == len(entries)
    for i, counts in enumerate(entries):
        previous = pending[i - 1] if i else before
        assert pending[i] - previous == counts["selected"] - sum(counts[name] for name in OUTCOME_COLUMNS)
