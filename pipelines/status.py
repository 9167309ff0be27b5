"""What the read store says about each view: outcome totals, buffers, blocked and parked streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import duckdb

from pipelines.store import OUTCOME_COLUMNS, Home, Store, us_from_utc
from pipelines.view import View


@dataclass
class ViewStatus:
    view: str
    streams: int = 0
    selected: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOME_COLUMNS, 0))
    pending: int = 0
    ledger_pending: int = 0
    blocked_streams: int = 0
    oldest_wait_seconds: float | None = None
    parked_streams: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    gaps_skipped: int = 0
    last_batch: str | None = None
    rows: int = 0

    @property
    def conserved(self) -> bool:
        """DESIGN §3: selected = applied + ignored + handler_error + duplicate + late + conflict + pending."""
        return self.selected == sum(self.outcomes.values()) + self.pending and self.pending == self.ledger_pending


@dataclass
class StoreStatus:
    views: list[ViewStatus]
    batches: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    records: int = 0
    malformed: int = 0
    normalised: int = 0
    logical_time: str | None = None


def read_status(con: duckdb.DuckDBPyConnection, views: Sequence[View]) -> StoreStatus:
    now_row = con.execute("SELECT max(received_at) FROM inorder.ingest_log").fetchone()
    now_us = us_from_utc(now_row[0])
    status = StoreStatus(views=[], logical_time=now_row[0].isoformat() if now_row[0] else None)
    status.batches, status.records, status.malformed, status.normalised = con.execute(
        "SELECT count(*), coalesce(sum(records), 0), coalesce(sum(malformed), 0), coalesce(sum(normalised), 0) "
        "FROM inorder.ingest_log WHERE kind = 'batch' AND status = 'archived'").fetchone()
    status.rejected = con.execute(
        "SELECT batch_id, reason FROM inorder.ingest_log WHERE status = 'rejected' ORDER BY entry_idx").fetchall()
    for view in views:
        s = ViewStatus(view.name)
        totals = con.execute(
            f"SELECT coalesce(sum(selected), 0), {', '.join(f'coalesce(sum({c}), 0)' for c in OUTCOME_COLUMNS)}, "
            "coalesce(sum(gaps_skipped), 0), arg_max(pending, entry_idx), arg_max(batch_id, entry_idx) "
            "FILTER (WHERE kind = 'batch') FROM inorder.batches WHERE view = ?", [view.name]).fetchone()
        s.selected = int(totals[0])
        s.outcomes = {c: int(v) for c, v in zip(OUTCOME_COLUMNS, totals[1:7])}
        s.gaps_skipped, s.ledger_pending, s.last_batch = int(totals[7]), int(totals[8] or 0), totals[9]
        s.streams, s.blocked_streams, s.parked_streams, oldest = con.execute(
            "SELECT count(*), count(blocked_at), count(*) FILTER (WHERE parked), min(blocked_since) "
            "FROM inorder.watermarks WHERE view = ?", [view.name]).fetchone()
        if oldest is not None and now_us is not None:
            s.oldest_wait_seconds = (now_us - us_from_utc(oldest)) / 1e6
        s.pending = con.execute("SELECT count(*) FROM inorder.pending WHERE view = ?", [view.name]).fetchone()[0]
        s.errors_by_kind = dict(con.execute(
            "SELECT kind, count(*) FROM inorder.errors WHERE view = ? GROUP BY kind ORDER BY kind",
            [view.name]).fetchall())
        s.rows = sum(con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in view.tables)
        status.views.append(s)
    return status


def newest_errors(con: duckdb.DuckDBPyConnection, view: str | None = None, limit: int = 10) -> str:
    """A markdown table of the newest error rows (of one view, or of all)."""
    rows = con.execute(
        "SELECT error_id, kind, coalesce(view, '-'), coalesce(stream_id, '-'), coalesce(seq::VARCHAR, '-'), "
        "batch_id, line, coalesce(reason, message, '') FROM inorder.errors "
        "WHERE ? IS NULL OR view = ? ORDER BY error_id DESC LIMIT ?", [view, view, limit]).fetchall()
    if not rows:
        return "no errors"

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")[:120]

    lines = ["| id | kind | view | stream | seq | batch:line | reason |", "|---|---|---|---|---|---|---|"]
    for error_id, kind, v, stream, seq, batch_id, line, reason in rows:
        lines.append(f"| {error_id} | {kind} | {cell(v)} | {cell(stream)} | {seq} | {cell(batch_id)}:{line} | "
                     f"{cell(reason)} |")
    return "\n".join(lines)


def open_read_only(home: Home) -> duckdb.DuckDBPyConnection:
    """A read-only connection, waiting (up to INORDER_LOCK_WAIT) while a run holds the file."""
    return Store.open_read_only(home).con


def format_status(status: StoreStatus) -> str:
    lines = [f"logical time {status.logical_time or '-'}; {status.batches} batches, {status.records} records "
             f"({status.normalised} normalised, {status.malformed} malformed), {len(status.rejected)} rejected files"]
    for batch_id, reason in status.rejected:
        lines.append(f"  rejected {batch_id}: {reason}")
    header = ("view", "streams", "selected", "applied", "ignored", "errors", "dupes", "late", "conflicts",
              "pending", "blocked", "oldest wait", "parked", "gaps", "rows", "conserved")
    table = [header]
    for s in status.views:
        wait = "-" if s.oldest_wait_seconds is None else f"{s.oldest_wait_seconds:.0f}s"
        table.append((s.view, s.streams, s.selected, s.outcomes["applied"], s.outcomes["ignored"],
                      s.outcomes["handler_error"], s.outcomes["duplicate"], s.outcomes["late"],
                      s.outcomes["conflict"], s.pending, s.blocked_streams, wait, s.parked_streams,
                      s.gaps_skipped, s.rows, "yes" if s.conserved else "NO"))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
    for s in status.views:
        kinds = ", ".join(f"{k} {n}" for k, n in s.errors_by_kind.items()) or "none"
        lines.append(f"{s.view}: errors by kind: {kinds}; last batch {s.last_batch or '-'}")
    return "\n".join(lines)
