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
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

SKETCH_SIZE = 256  # hashes kept per sketch: estimates within about 1/sqrt(256) = 6 %
DEFAULT_MAX_RECORDS = 6_000_000
DEFAULT_MAX_PAIRS = 4_000_000
# what a batch's sketch holds, computed by DuckDB at ingest. DuckDB's `hash` may change with its version:
# sketches of two versions then share no hash, and their union counts every stream of both, never fewer.
SKETCH_SQL = f"min(hash(stream_id), {SKETCH_SIZE})"


def _bound(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip().replace("_", "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name} must be a positive whole number, not {os.environ[name]!r}")
    return int(text)


@dataclass(frozen=True)
class PassBounds:
    """At most `records` normalised records and about `pairs` (view, stream) pairs per pass."""

    records: int = DEFAULT_MAX_RECORDS
    pairs: int = DEFAULT_MAX_PAIRS

    @classmethod
    def from_env(cls) -> "PassBounds":
        """INORDER_PASS_RECORDS and INORDER_PASS_STREAMS (pairs), each a positive whole number."""
        return cls(_bound("INORDER_PASS_RECORDS", DEFAULT_MAX_RECORDS), _bound("INORDER_PASS_STREAMS", DEFAULT_MAX_PAIRS))


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
