"""The engine's DuckDB store equals the reference model's, row for row, on random scenarios."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.harness import assert_same_store, fresh_home, read_store, run_entries
from tests.reference_model import run_model
from tests.strategies import scenarios
from views import ALL_VIEWS

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(entries=scenarios(max_streams=3, max_events=25))
def test_engine_matches_reference_model(spark, entries):
    with tempfile.TemporaryDirectory() as tmp:
        home = fresh_home(Path(tmp))
        run_entries(spark, home, ALL_VIEWS, entries)
        assert_same_store(read_store(home, ALL_VIEWS), run_model(entries, ALL_VIEWS))
