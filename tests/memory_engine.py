"""The engine in memory, for the project's own tests: views over a whole ingest log, with no Spark and
no store. Batch files (JSON Lines, CSV or Parquet), ticks and operators' retry/skip, each at its logical
time, one run per entry as `inorder run` would (or several entries a pass), with the state a run keeps
in the store carried from one entry to the next.

It runs the engine's own inspection (`pipelines/engine/normalise.py`), walk (`pipelines/engine/order.py`)
and apply code; a view's pass and commit over dicts are the test kit's (`pipelines.testing.ViewState`, with
the engine's rule of which buffered streams a pass walks), and the logs and ledger are kept here, with the
engine's rule of the ledger's `pending` (`pipelines/engine/rules.py`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable, Sequence

from pipelines.engine.normalise import InspectedBatch, RejectedFile, SourceMapping, inspect_file
from pipelines.engine.order import HandlerBugFailure, NotParked, PassEntry
from pipelines.engine.rules import running_pending
from pipelines.message import Message
from pipelines.store.database import us_from_utc
from pipelines.engine.outcomes import OUTCOME_COLUMNS
from pipelines.testing import ViewState
from pipelines.view import View

__all__ = ["HandlerBugFailure", "ReplayEntry", "ReplayedStore", "replay_entries"]


@dataclass(frozen=True)
class ReplayEntry:
    """One entry of the ingest log for `replay_entries`, at logical time `received_at`: a batch file
    (`data`, its format from `file_name`'s suffix; its batch id is the name's stem), a tick, or an
    operator's retry/skip of a parked stream of `target_view`."""

    kind: str  # batch | tick | retry | skip
    received_at: datetime
    data: bytes = b""
    file_name: str = ""
    target_view: str | None = None
    target_stream: str | None = None

    @property
    def batch_id(self) -> str:
        return Path(self.file_name).stem


@dataclass
class ReplayedStore:
    """What the read store would hold after the entries: each table's rows (typed values, sorted by
    primary key) and the engine tables' rows under their column names (docs/STORE.md), times in
    microseconds; `rejected` (batch id, reason) for files set aside, `refused` (view, stream, why) for
    operator actions on streams that were not parked (refused, nothing recorded)."""

    tables: dict[str, list[dict]] = field(default_factory=dict)
    watermarks: list[dict] = field(default_factory=list)
    pending: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Projected:
    """An entry of the ingest log as a pass projects it: its messages by stream, its ledger's base counts,
    and for an operator's action the view it concerns."""

    entry: PassEntry
    by_stream: dict[str, list[Message]]
    base: dict
    target_view: str | None = None


def replay_entries(views: Sequence[View], entries: Iterable[ReplayEntry], mapping: SourceMapping | None = None,
                   entries_per_pass: int = 1) -> ReplayedStore:
    """Run `views` over an ingest log in memory, as `inorder run` would: a batch already ingested is
    skipped, an unreadable or empty file is set aside, a tick is recorded only when logical time moved,
    and an operator action on a stream that is not parked is refused. Each run projects one entry
    (`entries_per_pass=1`), or up to that many waiting entries in one pass, as a run does that finds
    several (each stream walks them all at once; an operator's action is checked once what came before
    it is committed)."""
    mapping = mapping or SourceMapping()
    states = {v.name: ViewState(v, mapping.first_seq) for v in views}
    updated: dict[str, dict[str, tuple[int, int | None]]] = {v.name: {} for v in views}  # see _project_pass
    subscribed = {t for v in views for t in v.subscribes}
    store = ReplayedStore()
    seen: set[str] = set()
    waiting: list[_Projected] = []
    entry_idx, last_us = 0, None

    def commit_waiting() -> None:
        for view in views:
            mine = [w for w in waiting if w.target_view in (None, view.name)]
            if mine:
                _project_pass(states[view.name], updated[view.name], mine, store)
        waiting.clear()

    for e in entries:
        t_us = us_from_utc(e.received_at)
        by_stream: dict[str, list[Message]] = {}
        base = dict.fromkeys(("records", "malformed", "normalised", "unrouted"), 0)
        if e.kind == "batch":
            if e.batch_id in seen:
                continue
            seen.add(e.batch_id)
            entry_idx, last_us = entry_idx + 1, t_us
            try:
                inspected = _inspect(e, entry_idx, mapping)
            except RejectedFile as exc:
                store.rejected.append((e.batch_id, str(exc)))
                continue
            for line, raw, reason in inspected.malformed:
                store.errors.append({"view": None, "stream_id": None, "seq": None, "kind": "malformed",
                                     "batch_id": e.batch_id, "line": line, "raw": raw, "reason": reason,
                                     "logged_at": t_us, "entry_idx": entry_idx})
            rows = inspected.messages.to_pylist()
            base.update(records=inspected.records, malformed=len(inspected.malformed), normalised=len(rows),
                        unrouted=sum(r["stream_type"] not in subscribed for r in rows))
            for row in rows:
                by_stream.setdefault(row["stream_id"], []).append(Message(**{n: row[n] for n in Message._fields}))
            entry = PassEntry(entry_idx, e.batch_id, "batch", t_us)
        elif e.kind == "tick":
            if last_us is not None and t_us <= last_us:
                continue
            entry_idx, last_us = entry_idx + 1, t_us
            entry = PassEntry(entry_idx, f"tick-{entry_idx}", "tick", t_us)
        elif e.kind in ("retry", "skip"):
            commit_waiting()  # `inorder retry/skip` checks the stream against what is committed
            watermark = states[e.target_view].watermarks.get(e.target_stream)
            if watermark is None or not watermark["parked"]:
                store.refused.append((e.target_view, e.target_stream, str(NotParked(
                    f"stream {e.target_stream!r} of view {e.target_view} is not parked"))))
                continue
            entry_idx = entry_idx + 1
            entry = PassEntry(entry_idx, f"{e.kind}-{entry_idx}", e.kind, last_us, e.target_stream)
        else:
            raise ValueError(f"unknown entry kind {e.kind!r}")
        waiting.append(_Projected(entry, by_stream, base, e.target_view if e.kind in ("retry", "skip") else None))
        if len(waiting) >= entries_per_pass:
            commit_waiting()
    commit_waiting()
    store.batches.sort(key=lambda row: row["entry_idx"])  # the ledger in ingest order (stable: views in order)
    for vs in states.values():
        _store_view(vs, updated[vs.view.name], store)
    return store


def _inspect(e: ReplayEntry, entry_idx: int, mapping: SourceMapping) -> InspectedBatch:
    """The entry's file, inspected as the landing file it stands for (Parquet is read from a file)."""
    if Path(e.file_name).suffix.lower() != ".parquet":
        return inspect_file(Path(e.file_name), e.batch_id, entry_idx, mapping, e.data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(e.file_name).name
        path.write_bytes(e.data)
        return inspect_file(path, e.batch_id, entry_idx, mapping)


def _project_pass(vs: ViewState, updated: dict[str, tuple[int, int | None]], projected: list[_Projected],
                  store: ReplayedStore) -> None:
    """One run's pass over some entries for one view and its commit (`ViewState.project`), and the rows it
    logs: its errors, gaps and ledger rows, and per stream walked (`updated`) the entry that last walked it
    and its last_seq before."""
    view = vs.view
    new: dict[str, list[Message]] = {}
    for p in projected:
        for sid, msgs in p.by_stream.items():
            new.setdefault(sid, []).extend(msgs)
    last_seqs = {sid: watermark["last_seq"] for sid, watermark in vs.watermarks.items()}
    pending_before = vs.pending_count()
    out = vs.project([p.entry for p in projected], new)
    for watermark in out.watermarks:
        if watermark.view == view.name:
            updated[watermark.stream_id] = (watermark.entry_idx, last_seqs.get(watermark.stream_id))
    for error in out.errors:
        if error.view == view.name:
            store.errors.append({"view": error.view, "stream_id": error.stream_id, **_message(error.msg),
                                 "kind": error.kind, **error.details(), "entry_idx": error.entry_idx})
    for gap in out.gaps:
        if gap.view == view.name:
            store.gaps.append({"view": gap.view, "stream_id": gap.stream_id, "first_missing": gap.first_missing,
                               "last_missing": gap.last_missing, "waited_seconds": gap.waited_us / 1e6,
                               "reason": gap.reason, "batch_id": gap.batch_id, "skipped_at": gap.skipped_at,
                               "entry_idx": gap.entry_idx})
    entry_counts = [{name: out.counts.get((view.name, p.entry.entry_idx, name), 0)
                     for name in ("selected", *OUTCOME_COLUMNS, "gaps_skipped")} for p in projected]
    for p, counts, pending in zip(projected, entry_counts, running_pending(pending_before, entry_counts)):
        store.batches.append({"batch_id": p.entry.batch_id, "view": view.name, "entry_idx": p.entry.entry_idx,
                              "kind": p.entry.kind, "received_at": p.entry.t_us, **p.base, **counts,
                              "pending": pending})


def _message(msg: Message) -> dict:
    return {"seq": msg.seq, "event_type": msg.event_type, "payload": msg.payload, "occurred_at": msg.occurred_at,
            "event_id": msg.event_id, "batch_id": msg.batch_id, "line": msg.line}


def _store_view(vs: ViewState, updated: dict[str, tuple[int, int | None]], store: ReplayedStore) -> None:
    view = vs.view
    for sid, watermark in sorted(vs.watermarks.items()):
        updated_entry, prev = updated[sid]
        store.watermarks.append({
            "view": view.name, "stream_id": sid, "stream_type": watermark["stream_type"],
            "last_seq": watermark["last_seq"], "blocked_at": watermark["blocked_at"],
            "blocked_since": watermark["blocked_since"], "parked": watermark["parked"],
            "pending_count": watermark["pending_count"], "attempts": watermark["attempts"],
            "updated_entry": updated_entry, "prev_last_seq": prev})
        for msg in sorted(vs.pending.get(sid, [])):
            store.pending.append({"view": view.name, "stream_id": sid, "stream_type": msg.stream_type,
                                  **_message(msg), "entry_idx": msg.entry_idx})
    store.tables.update(vs.tables())
