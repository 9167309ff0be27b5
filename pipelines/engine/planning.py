"""How a projection cuts its waiting entries into passes: by the records they hold and by the
(view, stream) pairs they touch, each pass as large as its bounds allow (every pass loads the state
of the streams it touches, so fewer, larger passes cost less).

The driver's memory per pass follows the pairs it touches (their state, buffers and output), so
`PassBounds.pairs` is what bounds it; `PassBounds.records` bounds the shuffle and the output files.
The ingest records each batch's distinct streams per stream type with a sketch of them
(`inorder.ingest_streams`, see pipelines/engine/ingest.py), so a plan never reads the archive: the streams of
several batches together are estimated from the union of their sketches, since batches of the same
streams touch each stream once per pass, not once per batch.

An entry is never split: its ledger rows commit with everything it changed, in one transaction. An
entry alone over a bound is a pass of its own (`PlannedPass.over`), and the driver then holds what
that entry needs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from pipelines.config import DEFAULT_MAX_PAIRS, DEFAULT_MAX_RECORDS, Settings
from pipelines.engine.order import PassEntry
from pipelines.engine.outcomes import OPERATOR_KINDS, EntryKind
from pipelines.store.database import Store, us_from_utc
from pipelines.store.layout import LIVE, Layout, table_columns, uncommitted
from pipelines.view import View

SKETCH_SIZE = 256  # hashes kept per sketch: estimates within about 1/sqrt(256) = 6 %
# what a batch's sketch holds, computed by DuckDB at ingest. DuckDB's `hash` may change with its version:
# sketches of two versions then share no hash, and their union counts every stream of both, never fewer.
SKETCH_SQL = f"min(hash(stream_id), {SKETCH_SIZE})"


@dataclass(frozen=True)
class PassBounds:
    """At most `records` normalised records and about `pairs` (view, stream) pairs per pass."""

    records: int = DEFAULT_MAX_RECORDS
    pairs: int = DEFAULT_MAX_PAIRS

    @classmethod
    def of(cls, settings: Settings) -> "PassBounds":
        """INORDER_PASS_RECORDS and INORDER_PASS_STREAMS (pairs)."""
        return cls(settings.pass_records, settings.pass_streams)


@dataclass(frozen=True)
class StreamSketch:
    """Some distinct stream ids: how many (`count`: exact for one batch, estimated for a union), and the
    SKETCH_SIZE smallest of their hashes (a k-minimum-values sketch). A union's count is the two counts
    less what they share, as the union's smallest hashes show it: exact while the ids are fewer than
    SKETCH_SIZE, an estimate beyond, the same count for a union of the same streams. `unsketched`:
    streams known only by an upper bound (a batch of a store made before sketches were recorded,
    counted by its records), added as if none of them were among the others."""

    hashes: frozenset[int] = frozenset()
    count: float = 0.0
    unsketched: int = 0

    @classmethod
    def recorded(cls, hashes: Iterable[int], streams: int) -> "StreamSketch":
        """A batch's sketch and exact count, as the ingest records them."""
        return cls(frozenset(hashes), float(streams))

    def union(self, other: "StreamSketch") -> "StreamSketch":
        smallest = heapq.nsmallest(SKETCH_SIZE, self.hashes | other.hashes)
        # the share of the union both hold: each of the union's smallest hashes is in a side's sketch
        # exactly when that side has the id (fewer than SKETCH_SIZE of its hashes are smaller)
        both = sum(1 for h in smallest if h in self.hashes and h in other.hashes) / len(smallest) if smallest else 0.0
        count = max((self.count + other.count) / (1 + both), self.count, other.count)  # never below either side
        return StreamSketch(frozenset(smallest), count, self.unsketched + other.unsketched)

    @property
    def streams(self) -> int:
        return round(self.count) + self.unsketched


@dataclass(frozen=True)
class PlannedEntry:
    """An entry as planning sees it: its records, and per view that still has to project it, the streams
    of the entry that view walks."""

    entry_idx: int
    records: int
    streams: dict[str, StreamSketch] = field(default_factory=dict)


@dataclass
class PlannedPass:
    entries: list[PlannedEntry] = field(default_factory=list)
    records: int = 0
    streams: dict[str, StreamSketch] = field(default_factory=dict)  # per view

    @property
    def pairs(self) -> int:
        return _pairs(self.streams)

    def over(self, bounds: PassBounds) -> bool:
        """Over a bound: its first entry alone exceeds it."""
        return self.records > bounds.records or self.pairs > bounds.pairs


def _pairs(streams: dict[str, StreamSketch]) -> int:
    return sum(s.streams for s in streams.values())


def _with(streams: dict[str, StreamSketch], entry: PlannedEntry) -> dict[str, StreamSketch]:
    merged = dict(streams)
    for view, sketch in entry.streams.items():
        merged[view] = merged[view].union(sketch) if view in merged else sketch
    return merged


def cut_passes(entries: Sequence[PlannedEntry], bounds: PassBounds) -> list[PlannedPass]:
    """The entries, in order, in as few passes as the bounds allow: a pass takes the next entry while
    it stays within both bounds, or while the entry adds nothing to the bound it is over (an entry over
    a bound by itself starts a pass that only ticks and entries of the same streams join)."""
    passes: list[PlannedPass] = []
    for entry in entries:
        current = passes[-1] if passes else None
        streams = _with(current.streams, entry) if current else {}
        if current is None or (current.records + entry.records > bounds.records and entry.records) or (
                _pairs(streams) > bounds.pairs and _pairs(streams) > current.pairs):
            current, streams = PlannedPass(), dict(entry.streams)
            passes.append(current)
        current.entries.append(entry)
        current.records += entry.records
        current.streams = streams
    return passes


@dataclass
class PassPlan:
    """The entries of one pass, and which of them each view still has to project."""

    entries: list[dict]  # ingest_log rows, in order
    by_view: dict[str, list[PassEntry]] = field(default_factory=dict)
    # (entry_idx, stream_type) -> messages archived for it, filled by `load_inputs` (for the ledger's
    # unrouted count, after the store was let go during the Spark work)
    message_counts: dict[tuple[int, str], int] = field(default_factory=dict)
    pairs: int = 0  # the (view, stream) pairs its entries bring, as planned (pipelines/engine/planning.py)
    over_bounds: bool = False  # one entry that alone exceeds the pass bounds

    @property
    def view_entries(self) -> list[tuple[str, int]]:
        return [(v, e.entry_idx) for v, es in self.by_view.items() for e in es]


def plan_passes(store: Store, views: Iterable[View], bounds: PassBounds | None = None,
                layout: Layout = LIVE) -> list[PassPlan]:
    """Uncommitted entries per view, in ingest order, cut into passes within `bounds` (default: from
    the home's settings, `PassBounds.of`) by their records and the (view, stream) pairs they bring
    (pipelines/engine/planning.py). Not counted: the buffered streams a pass walks only because a gap timer is
    due or a buffer is over max_pending."""
    views = list(views)
    rows = _uncommitted(store, [v.name for v in views], layout)
    sketches: dict[int, dict[str, StreamSketch]] = {}
    # a store made before ingest_streams, opened read-only (the tick schedule's plan) has no such table
    recorded = table_columns(store.con, "inorder", "ingest_streams")
    batch_streams = store.con.execute(
        "SELECT entry_idx, stream_type, streams, sketch FROM inorder.ingest_streams WHERE list_contains(?, entry_idx)",
        [[r[0] for r in rows if r[2] == EntryKind.BATCH]]).fetchall() if recorded else []
    for entry_idx, stream_type, streams, sketch in batch_streams:
        sketches.setdefault(entry_idx, {})[stream_type] = StreamSketch.recorded(sketch, streams)
    subscribes = {v.name: v.subscribes for v in views}
    planned = [PlannedEntry(entry_idx, normalised or 0, _entry_streams(
        kind, normalised or 0, sketches.get(entry_idx), {view: subscribes[view] for view in todo}))
        for entry_idx, _, kind, _, normalised, _, _, todo in rows]
    by_idx = {r[0]: r for r in rows}
    bounds = bounds or PassBounds.of(store.home.settings)
    passes = []
    for cut in cut_passes(planned, bounds):
        plan = PassPlan([], pairs=cut.pairs, over_bounds=cut.over(bounds))
        for planned_entry in cut.entries:
            entry_idx, batch_id, kind, received_at, _, target_view, target_stream, todo = by_idx[planned_entry.entry_idx]
            plan.entries.append({"entry_idx": entry_idx, "batch_id": batch_id, "kind": kind,
                                 "target_view": target_view, "target_stream": target_stream})
            entry = PassEntry(entry_idx, batch_id, kind, us_from_utc(received_at), target_stream)
            for view in todo:
                plan.by_view.setdefault(view, []).append(entry)
        passes.append(plan)
    return passes


def _uncommitted(store: Store, names: list[str], layout: Layout) -> list[tuple]:
    """The archived entries some of the views `names` have not committed, in ingest order: (entry_idx,
    batch_id, kind, received_at, normalised, target_view, target_stream, the views that have it to do)."""
    return store.con.execute(
        f"""SELECT l.entry_idx, l.batch_id, l.kind, l.received_at, l.normalised, l.target_view, l.target_stream,
                  list(v.view ORDER BY v.view) AS todo
           FROM inorder.ingest_log l CROSS JOIN unnest(?::VARCHAR[]) AS v(view)
           WHERE {uncommitted(layout.state, "v.view")}
           GROUP BY ALL ORDER BY l.entry_idx""", [names]).fetchall()


def entries_waiting(store: Store, views: Iterable[View]) -> list[tuple[str, list[str]]]:
    """(batch id, the views that have it to do) of each archived entry other than a tick that some of the
    views have not committed yet (what `plan_passes` would give them to project), in ingest order."""
    return [(batch_id, todo) for _, batch_id, kind, *_, todo in _uncommitted(store, [v.name for v in views], LIVE)
            if kind != EntryKind.TICK]


def views_waiting(store: Store, views: Iterable[View]) -> set[str]:
    """The views that have entries waiting, without cutting passes: a run's plan asks only this."""
    return {view for _, todo in entries_waiting(store, views) for view in todo}


def _entry_streams(kind: str, records: int, by_type: dict[str, StreamSketch] | None,
                   subscribes: dict[str, tuple[str, ...]]) -> dict[str, StreamSketch]:
    """The streams an entry brings to each view that has it to do: a batch's streams of the types the
    view subscribes to (a batch of a store made before sketches were recorded: at most one per record),
    the target stream of an operator's action, none for a tick."""
    if kind in OPERATOR_KINDS:
        return {view: StreamSketch(unsketched=1) for view in subscribes}
    if kind != EntryKind.BATCH or not records:
        return {}
    if by_type is None:
        return {view: StreamSketch(unsketched=records) for view in subscribes}
    out = {}
    for view, types in subscribes.items():
        for sketch in (by_type[t] for t in types if t in by_type):
            out[view] = out[view].union(sketch) if view in out else sketch
    return out
