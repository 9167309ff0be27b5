"""What a projection did, summed over its passes: `ProjectionStats`, counted from each pass's summary
records (pipelines/engine/output.py) and the driver's timings."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.engine.output import WALKED_METRIC
from pipelines.engine.pass_data import OutputKind
from pipelines.engine.outcomes import Outcome


@dataclass
class ProjectionStats:
    passes: int = 0
    entries: int = 0
    selected: int = 0
    handler_calls: int = 0
    walk_seconds: float = 0.0  # time inside the ordering walk and handlers, summed over executors
    walk_cpu_seconds: float = 0.0  # the same walks' CPU time
    spark_start_seconds: float = 0.0  # getting the session: a JVM start, or a warm server's session
    spark_seconds: float = 0.0  # wall time of the Spark passes (load state, shuffle, sort, walk, write out)
    commit_seconds: float = 0.0
    by_view: dict[str, dict[str, int]] = field(default_factory=dict)  # outcome counts of this projection
    streams_touched: dict[str, int] = field(default_factory=dict)
    # pipelines/serve/publish.py's Publication (serve/ imports this room), to PostgreSQL when it serves reads
    publications: list = field(default_factory=list)
    publish_seconds: float = 0.0
    publish_error: str | None = None  # publishing failed (DuckDB is committed; a later publication catches up)
    refused: dict[str, str] = field(default_factory=dict)  # view -> why it was not projected (one line)
    rebuild_due: list[str] = field(default_factory=list)  # views with on_change="rebuild" whose code changed
    rebuilt: list[str] = field(default_factory=list)

    def merge(self, other: "ProjectionStats") -> None:
        """Add another projection's figures to these (a rebuild's replay and catch-up, say)."""
        for name in ("passes", "entries", "selected", "handler_calls", "walk_seconds", "walk_cpu_seconds",
                     "spark_start_seconds", "spark_seconds", "commit_seconds", "publish_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for view, counts in other.by_view.items():
            mine = self.by_view.setdefault(view, {})
            for name, n in counts.items():
                mine[name] = mine.get(name, 0) + n
        for view, n in other.streams_touched.items():
            self.streams_touched[view] = self.streams_touched.get(view, 0) + n
        self.publications += other.publications
        self.publish_error = self.publish_error or other.publish_error
        self.refused.update(other.refused)
        self.rebuilt += other.rebuilt

    def add(self, summary: pa.Table) -> None:
        """Count a pass's `PassResult.summary` (its counts and metrics), grouped by Arrow."""
        def totals(kind: OutputKind, keys: list[str]) -> list[dict]:
            of_kind = summary.filter(pc.equal(summary["kind"], kind.value))
            return of_kind.group_by(keys).aggregate([("n", "sum"), ("kind", "count")]).to_pylist()

        for metric in totals(OutputKind.METRIC, ["view", "name"]):
            if metric["name"] == "walk_us":
                self.walk_seconds += metric["n_sum"] / 1e6
            elif metric["name"] == "walk_cpu_us":
                self.walk_cpu_seconds += metric["n_sum"] / 1e6
            elif metric["name"] == WALKED_METRIC:
                view = metric["view"]
                self.streams_touched[view] = self.streams_touched.get(view, 0) + metric["n_sum"]
        for count in totals(OutputKind.COUNT, ["view", "name"]):
            view, name, n = count["view"], count["name"], count["n_sum"]
            per_view = self.by_view.setdefault(view, {})
            per_view[name] = per_view.get(name, 0) + n
            if name == Outcome.SELECTED:
                self.selected += n
            elif name in (Outcome.APPLIED, Outcome.HANDLER_ERROR):  # the messages a handler was called for
                self.handler_calls += n
