"""The test kit (`pipelines.testing.replay`) agrees with the full engine (Spark + DuckDB) on the same
records: view tables, error log and watermarks, on random bank scenarios delivered as one batch."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from pipelines.testing import replay
from tests.domains import BANK_VIEWS
from tests.harness import fresh_home, read_store, run_entries
from tests.reference_model import Entry, _plain
from tests.strategies import T0, scenario_lines
from tests.profiles import spark_examples


def _error_key(e: dict) -> tuple:
    return e["kind"], e["stream_id"], e["seq"], e["batch_id"], e["line"], e.get("error_class"), e.get("attempt")


@settings(max_examples=spark_examples(10), deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=scenario_lines(max_streams=3, max_events=25))
def test_replay_agrees_with_the_engine(spark, lines):
    with tempfile.TemporaryDirectory() as tmp:
        home = fresh_home(Path(tmp))
        run_entries(spark, home, BANK_VIEWS, [Entry("batch", "replay", T0, lines=list(lines))])
        store = read_store(home, BANK_VIEWS)
    for view in BANK_VIEWS:
        result = replay(view, [line if isinstance(line, bytes) else line.encode() for line in lines])
        for table in view.tables:
            assert [{c: _plain(v) for c, v in row.items()} for row in result.tables[table.name]] \
                == store[table.name], table.name
        engine_errors = [e for e in store["errors"] if e["view"] in (view.name, None)]
        assert sorted(map(_error_key, result.errors), key=repr) == sorted(map(_error_key, engine_errors), key=repr)
        watermarks = {w["stream_id"]: (w["last_seq"], w["parked"], w["pending_count"])
                      for w in store["watermarks"] if w["view"] == view.name}
        assert {s: (w["last_seq"], w["parked"], w["pending_count"]) for s, w in result.watermarks.items()} \
            == watermarks
        ledgers = [r for r in store["batches"] if r["view"] == view.name]
        if not lines:  # every message dropped: an empty file is set aside, with no ledger row, and nothing counted
            assert ledgers == [] and result.counts == {}
            continue
        (ledger,) = ledgers
        assert {k: n for k, n in result.counts.items() if k != "gaps_skipped"} == \
            {k: ledger[k] for k in ("selected", "applied", "ignored", "handler_error", "duplicate", "late",
                                    "conflict", "pending") if ledger[k]}
