"""A test kit for views: run a view over records in memory, with no Spark and no store.

    from pipelines.testing import replay

    result = replay(ORDERS, [{"stream_id": "ord-1", "stream_type": "order", "seq": 1,
                              "type": "OrderPlaced", "payload": {"customer_id": "c-1"}}])
    assert result.tables["orders"][0]["status"] == "placed"
    assert result.errors == []

The records are one batch in the default record shape (or a source mapping's). They go through the
engine's own inspection (`pipelines.engine.normalise`), ordering walk (`pipelines.engine.order.walk_stream`) and
apply code, so a view behaves here as it does in `inorder run` on the same batch.

(The project's own tests run whole ingest logs in memory with tests/memory_engine.py.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from pipelines.engine.normalise import SourceMapping, inspect_json_lines
from pipelines.message import Message
from pipelines.engine.order import PassEntry, PassOutput, StreamState, walk_stream
from pipelines.store.database import us_from_utc
from pipelines.view import Table, View

REPLAY_BATCH = "replay"


@dataclass
class ReplayResult:
    """What one batch did to a view: its tables (typed values, sorted by primary key), its error log,
    skipped gaps, per-stream watermarks and the outcome counts of CONCEPTS §3."""

    tables: dict[str, list[dict]]
    errors: list[dict]
    gaps: list[dict] = field(default_factory=list)
    watermarks: dict[str, dict] = field(default_factory=dict)  # stream_id -> last_seq, parked, pending_count…
    counts: dict[str, int] = field(default_factory=dict)  # selected, applied, ignored, handler_error…

    @property
    def parked(self) -> list[str]:
        return sorted(s for s, w in self.watermarks.items() if w["parked"])


def _line(record: Any) -> bytes:
    """A record as one JSON Lines line: a str or bytes is taken as the line itself."""
    if isinstance(record, bytes):
        return record
    return (record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)).encode("utf-8")


def replay(view: View, records: Iterable[Any], now: datetime | None = None,
           mapping: SourceMapping | None = None) -> ReplayResult:
    """Run `view` over `records` as one batch received at logical time `now` (default: the clock)."""
    mapping = mapping or SourceMapping()
    t_us = us_from_utc(now or datetime.now(timezone.utc))
    data = b"".join(_line(r) + b"\n" for r in records)
    inspected = inspect_json_lines(data, REPLAY_BATCH, 1, mapping)
    entry = PassEntry(1, REPLAY_BATCH, "batch", t_us)
    streams: dict[str, list[Message]] = {}
    for row in inspected.messages.to_pylist():
        if row["stream_type"] in view.subscribes:
            streams.setdefault(row["stream_id"], []).append(
                Message(**{name: row[name] for name in Message._fields}))
    out = PassOutput()
    aggregates: dict[str, dict] = {}
    for stream_id, messages in streams.items():
        walk_stream(view, stream_id, StreamState(last_seq=mapping.first_seq - 1), [], messages, [entry], out,
                    aggregates)
    errors = [{"kind": "malformed", "stream_id": None, "seq": None, "message": reason, "reason": reason,
               "batch_id": REPLAY_BATCH, "line": line, "raw": raw} for line, raw, reason in inspected.malformed]
    result = ReplayResult(tables={t.name: [] for t in view.tables}, errors=errors)
    for rows in out.rows:
        result.tables[rows.table].extend(rows.rows)
    for error in out.errors:
        msg = error.msg
        result.errors.append({"kind": error.kind, "stream_id": error.stream_id, "seq": msg.seq,
                              "message": error.message or error.reason, **error.details(),
                              "event_type": msg.event_type, "batch_id": msg.batch_id, "line": msg.line})
    for gap in out.gaps:
        result.gaps.append({"stream_id": gap.stream_id, "reason": gap.reason, "first_missing": gap.first_missing,
                            "last_missing": gap.last_missing, "waited_us": gap.waited_us, "batch_id": gap.batch_id,
                            "skipped_at_us": gap.skipped_at_us})
    for watermark in out.watermarks:
        result.watermarks[watermark.stream_id] = watermark.state()
    for (_, _, outcome), n in out.counts.items():
        result.counts[outcome] = result.counts.get(outcome, 0) + n
    for table in view.tables:
        if table.kind == "aggregate":
            result.tables[table.name] = aggregate_rows(table, aggregates.get(table.name, {}))
        keys = table.primary_key
        result.tables[table.name].sort(key=lambda row: tuple(row[c] for c in keys))
    return result


def aggregate_rows(table: Table, sums: dict) -> list[dict]:
    """The summed increments as the table would hold them (a value column no handler added to is 0)."""
    zero = {c: convert(0) for c, convert in table.value_converters.items()}
    single = len(table.primary_key) == 1
    return [{**dict(zip(table.primary_key, (key,) if single else key)), **zero, **values}
            for key, values in sums.items()]
