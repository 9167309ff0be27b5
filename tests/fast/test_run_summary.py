"""`inorder run`'s summary line: a rate only when the engine's passes and commits are most of the run (a small
batch's run is mostly Spark's start, Dagster and the checks, and a rate over it says nothing); else the parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, strategies as st

from inorder.cli import _where_the_time_went
from pipelines.engine.stats import ProjectionStats

seconds = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)


@dataclass
class Report:  # the two fields of a run's report the summary reads
    seconds: float
    projection: ProjectionStats = field(default_factory=ProjectionStats)


@given(start=seconds, passes=seconds, commit=seconds, publish=seconds, rest=seconds,
       records=st.integers(min_value=0, max_value=10**7))
def test_a_rate_only_when_the_engine_is_most_of_the_run_else_where_the_time_went(start, passes, commit, publish, rest,
                                                                                 records):
    stats = ProjectionStats(spark_start_seconds=start, spark_seconds=passes, commit_seconds=commit,
                            publish_seconds=publish)
    total = start + passes + commit + publish + rest
    said = _where_the_time_went(Report(total, stats), records)
    if records and total and passes + commit >= total / 2:
        assert said == f" ({records / total:,.0f} records/s)"
        return
    assert "records/s" not in said and said.endswith("the rest " + f"{max(0.0, total - sum((start, passes, commit, publish))):.1f}"
                                                     "s: imports, ingest, Dagster, checks)")
    for name, value in (("Spark start", start), ("passes", passes), ("commit", commit), ("publish", publish)):
        assert (f"{name} {value:.1f}s" in said) == (value >= 0.05), (name, said)


def test_a_small_batch_on_a_cold_spark_says_its_parts():
    stats = ProjectionStats(spark_start_seconds=4.8, spark_seconds=1.0, commit_seconds=0.1)
    assert _where_the_time_went(Report(8.0, stats), 15) == \
        " (Spark start 4.8s, passes 1.0s, commit 0.1s, the rest 2.1s: imports, ingest, Dagster, checks)"
