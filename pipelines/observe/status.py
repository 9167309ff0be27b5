"""What the read store says about each view: outcome totals, buffers, blocked and parked streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple, Sequence

import duckdb

from pipelines.store.layout import Layout, table_columns
from pipelines.observe.markdown import markdown_table
from pipelines.records import select
from pipelines.serve.publish import Positions
from pipelines.engine.routing import describe_unrouted, subscribed_types, unrouted
from pipelines.store.database import us_from_utc
from pipelines.engine.outcomes import OUTCOME_COLUMNS, EntryKind
from pipelines.store.versions import ViewVersion, read_versions, stored_view_names
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
    # messages a handler raised on, each once however many attempts: a Reject (a business refusal) or any
    # other exception (a bug); a parked message is among them, and a skipped one in outcomes["handler_error"]
    rejects: int = 0
    bugs: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)  # rows of the error log: one per failed attempt
    gaps_skipped: int = 0
    last_batch: str | None = None
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows: a view's tables are never added together
    version: ViewVersion | None = None  # the view's code against what built its rows
    rebuild_shadow: str | None = None  # the schema of a rebuild of the view under way, or interrupted

    @property
    def conserved(self) -> bool:
        """CONCEPTS §3: selected = applied + ignored + handler_error + duplicate + late + conflict + pending."""
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
    unrouted: dict[str, int] = field(default_factory=dict)  # stream type -> records no view subscribes to
    subscribed: list[str] = field(default_factory=list)  # the stream types the views subscribe to
    reingested: list[tuple[str, str, int]] = field(default_factory=list)  # (batch, re-ingest's batch, records)
    not_loaded: list[str] = field(default_factory=list)  # views the store holds that INORDER_VIEWS did not load


# an ingest_log entry no re-ingest superseded (the newest entry of its batch)
NEWEST_OF_ITS_BATCH = ("entry_idx NOT IN (SELECT r.reingest_of FROM inorder.ingest_log r "
                       "WHERE r.reingest_of IS NOT NULL)")


def read_status(con: duckdb.DuckDBPyConnection, views: Sequence[View]) -> StoreStatus:
    now_row = con.execute("SELECT max(received_at) FROM inorder.ingest_log").fetchone()
    now_us = us_from_utc(now_row[0])
    status = StoreStatus(views=[], logical_time=now_row[0].isoformat() if now_row[0] else None)
    # a batch's records count once: a re-ingest's records are the lines the entry it supersedes left
    # undelivered (its unrouted and malformed ones), so those count under the re-ingest alone
    status.batches, status.records, status.malformed = con.execute(
        f"""SELECT count(*) FILTER (WHERE reingest_of IS NULL),
                   coalesce(sum(records), 0) - coalesce(sum(records) FILTER (WHERE reingest_of IS NOT NULL), 0),
                   coalesce(sum(malformed) FILTER (WHERE {NEWEST_OF_ITS_BATCH}), 0)
            FROM inorder.ingest_log WHERE kind = 'batch' AND status = 'archived'""").fetchone()
    status.normalised = status.records - status.malformed
    status.rejected = con.execute(
        "SELECT batch_id, reason FROM inorder.ingest_log WHERE status = 'rejected' ORDER BY entry_idx").fetchall()
    # the newest entry of each batch counts: a re-ingest carried the lines the entry it supersedes left unrouted
    types = dict(con.execute(
        f"""SELECT t.key, sum(t.value) FROM (SELECT unnest(map_entries(stream_types)) AS t FROM inorder.ingest_log
            WHERE kind = 'batch' AND status = 'archived' AND {NEWEST_OF_ITS_BATCH}) GROUP BY ALL""").fetchall())
    status.unrouted, status.subscribed = unrouted(types, views), subscribed_types(views)
    status.reingested = con.execute(
        """SELECT o.batch_id, r.batch_id, r.records FROM inorder.ingest_log r
           JOIN inorder.ingest_log o ON o.entry_idx = r.reingest_of ORDER BY r.entry_idx""").fetchall()
    status.not_loaded = [name for name in stored_view_names(con) if name not in {v.name for v in views}]
    versions = read_versions(con, views)
    schemas = {name for (name,) in con.execute("SELECT schema_name FROM duckdb_schemas()").fetchall()}
    for view in views:
        shadow = Layout.shadow(view.name).state
        s = ViewStatus(view.name, version=versions[view.name], rebuild_shadow=shadow if shadow in schemas else None)
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
        s.rejects, s.bugs = con.execute(  # a message's class is its newest attempt's
            "SELECT count(*) FILTER (WHERE error_class = 'reject'), count(*) FILTER (WHERE error_class = 'bug') "
            "FROM (SELECT arg_max(error_class, error_id) AS error_class FROM inorder.errors "
            "WHERE view = ? AND kind = 'handler_error' GROUP BY stream_id, seq)", [view.name]).fetchone()
        s.rows = {t.name: con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in view.tables
                  if not s.version.refused or table_columns(con, "main", t.name)}
        status.views.append(s)
    return status


def version_line(version: ViewVersion) -> str:
    """`<view>: code <fingerprint>, store <fingerprint>: <what it means>` (status, the UI)."""
    return f"{version.view}: code {version.code}, store {version.stored or '-'}: {version.describe()}"


ERROR_KINDS = ("malformed", "handler_error", "late", "conflict")  # the kinds of rows in inorder.errors


class ErrorRow(NamedTuple):
    """One row of the error log, as `inorder errors` shows it."""

    error_id: int
    kind: str
    error_class: str | None  # handler_error only: reject (the handler refused the message) or bug
    view: str | None  # None for malformed records: no view saw them
    stream_id: str | None
    seq: int | None
    event_type: str | None
    batch_id: str | None
    line: int | None
    logged_at: datetime | None  # the logical time of the batch (or tick) that logged it
    reason: str
    superseded_by: str | None  # a malformed row: the re-ingest that inspected its line again (it counts there)

    def cells(self) -> tuple:
        """The row under ERROR_HEADER."""
        superseded = f" (superseded by {self.superseded_by})" if self.superseded_by else ""
        return (self.error_id, self.kind, self.view, self.stream_id, self.seq, f"{self.batch_id}:{self.line}",
                _iso(self.logged_at), self.reason + superseded)


ERROR_HEADER = ("id", "kind", "view", "stream", "seq", "batch:line", "logged at", "reason")


class ErrorLog(NamedTuple):
    total: int  # rows matching the filters (with `superseded`, the superseded ones among them)
    newest: list[ErrorRow]  # the newest of them, newest first, at most `limit`
    superseded: int  # malformed rows matching the filters that a re-ingest superseded (left out unless asked)


def read_errors(con: duckdb.DuckDBPyConnection, view: str | None = None, kind: str | None = None,
                batch_id: str | None = None, since: datetime | None = None, limit: int = 100,
                superseded: bool = False, stream_id: str | None = None) -> ErrorLog:
    """The error log, newest first, filtered by view, kind, batch, stream and logged_at >= `since`. The malformed
    rows a re-ingest superseded no longer count (`status` counts their lines under the re-ingest): they are left
    out, and counted apart, unless `superseded` asks for them."""
    where = ("(? IS NULL OR view = ?) AND (? IS NULL OR kind = ?) AND (? IS NULL OR batch_id = ?) "
             "AND (? IS NULL OR stream_id = ?) AND (?::TIMESTAMPTZ IS NULL OR logged_at >= ?::TIMESTAMPTZ)")
    params = [view, view, kind, kind, batch_id, batch_id, stream_id, stream_id, since, since]
    counting, hidden = con.execute(
        "SELECT count(*) FILTER (WHERE superseded_by IS NULL), count(superseded_by) "
        f"FROM inorder.errors WHERE {where}", params).fetchone()
    rows = con.execute(
        f"SELECT {select('e', ErrorRow._fields[:-2])}, coalesce(e.reason, e.message, '') AS reason, e.superseded_by "
        f"FROM inorder.errors e WHERE {where} "
        "AND (? OR superseded_by IS NULL) ORDER BY error_id DESC LIMIT ?", [*params, superseded, limit]).fetchall()
    return ErrorLog(counting + hidden if superseded else counting, [ErrorRow(*row) for row in rows], hidden)


def read_error(con: duckdb.DuckDBPyConnection, error_id: int) -> dict[str, object] | None:
    """One row of the error log whole, every column of `inorder.errors` (payload, raw text, traceback…), or None."""
    cursor = con.execute("SELECT * FROM inorder.errors WHERE error_id = ?", [error_id])
    row = cursor.fetchone()
    return None if row is None else dict(zip((d[0] for d in cursor.description), row))


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def newest_errors(con: duckdb.DuckDBPyConnection, view: str | None = None, limit: int = 10) -> str:
    """A markdown table of the newest error rows (of one view, or of all), the reason before the columns
    a narrow panel can lose (the UI's metadata list cuts a wide table at its right edge); a view's own
    table leaves out the view column."""
    errors = read_errors(con, view=view, limit=limit).newest
    if not errors:
        return "no errors"
    header = ("id", "kind", *(() if view else ("view",)), "stream", "seq", "reason", "batch:line", "logged at")
    return markdown_table(header, [(e.error_id, e.kind, *(() if view else (e.view,)), e.stream_id, e.seq, e.reason,
                                     f"{e.batch_id}:{e.line}", _iso(e.logged_at)) for e in errors])


class BlockedStream(NamedTuple):
    """A (view, stream) that cannot move on: waiting for a missing seq, or parked by a handler error."""

    view: str
    stream_id: str
    waiting_for_seq: int  # last_seq + 1: the missing message, or the parked one that failed
    pending: int  # messages buffered behind it
    blocked_since: datetime | None  # logical time; for a parked stream, when that message first failed
    times_out_at: datetime | None  # blocked_since + the view's gap_timeout; None when parked (no timer)
    parked: bool

    def cells(self) -> tuple:
        """The row under BLOCKED_HEADER."""
        return (self.view, self.stream_id, self.waiting_for_seq, self.pending, _iso(self.blocked_since),
                "parked" if self.parked else _iso(self.times_out_at))


BLOCKED_HEADER = ("view", "stream", "waiting for seq", "pending", "blocked since", "times out at")


class BlockedStreams(NamedTuple):
    """(view, stream) pairs that cannot move on: a stream two views subscribe to counts once per view."""

    total: int  # blocked + parked: the pairs matching the filter
    blocked: int  # waiting for a missing seq (the `blocked` of `inorder status`)
    parked: int  # waiting for an operator after a handler error (the `parked` of `inorder status`)
    streams: int  # distinct stream ids among them
    oldest: list[BlockedStream]  # the oldest blocked of them first, at most `limit`

    def describe(self) -> str:
        """`3 streams cannot move on: 2 blocked by a gap, 1 parked`, as `inorder status` counts them; a stream
        that several views subscribe to counts once per view, and then the line says so."""
        pairs = plural(self.total, "stream") if self.streams == self.total else \
            f"{plural(self.total, '(view, stream) pair')} ({plural(self.streams, 'distinct stream')})"
        return f"{pairs} cannot move on: {self.blocked:,} blocked by a gap, {self.parked:,} parked"


def blocked_streams(con: duckdb.DuckDBPyConnection, views: Sequence[View], view: str | None = None,
                    limit: int = 20) -> BlockedStreams:
    """The streams of `views` (or of the one named `view`) that wait for a gap or are parked, oldest
    blocked first (`inorder pending`, the views' Dagster metadata)."""
    names = [v.name for v in views if view is None or v.name == view]
    blocked = "FROM inorder.watermarks w WHERE list_contains(?, w.view) AND (w.blocked_at IS NOT NULL OR w.parked)"
    # as read_status counts them: a parked stream keeps no blocked_at, a blocked one is not parked
    blocked_count, parked, streams = con.execute(
        f"SELECT count(w.blocked_at), count(*) FILTER (WHERE w.parked), "
        f"count(DISTINCT w.stream_id) {blocked}", [names]).fetchone()
    rows = con.execute(
        # a parked stream keeps no blocked_since: it has waited since its message's first failed attempt
        "SELECT w.view, w.stream_id, w.last_seq + 1, w.pending_count, CASE WHEN w.parked THEN "
        "(SELECT min(e.logged_at) FROM inorder.errors e WHERE e.view = w.view AND e.stream_id = w.stream_id "
        "AND e.kind = 'handler_error' AND e.seq = w.last_seq + 1) ELSE w.blocked_since END AS since, w.parked "
        f"{blocked} ORDER BY since NULLS LAST, w.view, w.stream_id LIMIT ?", [names, limit]).fetchall()
    timeouts = {v.name: timedelta(microseconds=v.gap_timeout_us) for v in views}  # as the walk counts
    return BlockedStreams(blocked_count + parked, blocked_count, parked, streams, [
        BlockedStream(name, stream_id, seq, pending, since,
                      None if parked or since is None else since + timeouts[name], parked)
        for name, stream_id, seq, pending, since, parked in rows])


def blocked_streams_markdown(blocked: BlockedStreams) -> str:
    """The oldest blocked streams as a markdown table (a view's Dagster metadata)."""
    if not blocked.total:
        return "no blocked or parked streams"
    more = blocked.total - len(blocked.oldest)
    return (f"{blocked.describe()}\n\n" + markdown_table(BLOCKED_HEADER, [s.cells() for s in blocked.oldest])
            + (f"\n\n… and {more} more (`inorder pending`)" if more > 0 else ""))


class ActedOn(NamedTuple):
    """A stream after an operator's retry or skip (`inorder retry`, `inorder skip`)."""

    stream_id: str
    parked: bool  # parked after the action: on the retried message, or anew on a later one
    last_seq: int  # where its watermark stands now
    attempts: int  # failed attempts of the message it is parked on
    pending: int  # messages still buffered
    parked_at: int  # the watermark the action found (`prev_last_seq`): the message acted on is the next seq

    @property
    def failed_again(self) -> bool:
        """The retried message itself failed again (the stream did not move)."""
        return self.parked and self.last_seq == self.parked_at


_ACTED_ON = {"pending": "pending_count", "parked_at": "prev_last_seq"}  # ActedOn's fields' columns


def acted_on(con: duckdb.DuckDBPyConnection, view: str, streams: Sequence[str]) -> list[ActedOn]:
    return [ActedOn(*row) for row in con.execute(
        f"SELECT {select('w', ActedOn._fields, source=_ACTED_ON)} FROM inorder.watermarks w "
        "WHERE view = ? AND list_contains(?, stream_id) ORDER BY stream_id", [view, list(streams)]).fetchall()]


def _listed(streams: Sequence[ActedOn], each) -> str:
    return ", ".join(map(each, streams[:10])) + (" …" if len(streams) > 10 else "")


def describe_operator_outcome(action: str, view: str, streams: Sequence[ActedOn]) -> str:
    """What a retry or skip did to each stream: its message applied (or skipped) and how far the stream then
    moved; parked anew on a later message; or, for a retry, the retried message failed again."""
    moved = [s for s in streams if not s.parked]
    anew = [s for s in streams if s.parked and not s.failed_again]
    again = [s for s in streams if s.failed_again]
    done = "its parked message skipped (counted as handler_error)" if action == EntryKind.SKIP else "the retried message applied"
    why = f"; `inorder errors --view {view} --kind handler_error` says why"
    parts = []
    if moved:
        parts.append(f"{plural(len(moved), 'stream')} moved on ({done}, now at "
                     + _listed(moved, lambda s: f"{s.stream_id} seq {s.last_seq}") + ")")
    if anew:
        parts.append(f"{plural(len(anew), 'stream')} parked anew on a later message ({done}, then "
                     + _listed(anew, lambda s: f"{s.stream_id} seq {s.parked_at + 1} to {s.last_seq}, parked at seq "
                                               f"{s.last_seq + 1}, attempt {s.attempts}") + ("" if again else why) + ")")
    if again:
        parts.append(f"{plural(len(again), 'stream')} parked again: the retried message failed again ("
                     + _listed(again, lambda s: f"{s.stream_id} seq {s.last_seq + 1}, attempt {s.attempts}") + why + ")")
    return f"{action} of {plural(len(streams), 'parked stream')} of {view} committed: " + "; ".join(parts)


def plural(n: int, word: str, word_plural: str | None = None) -> str:
    """`1 batch`, `2 batches`, `1,234 records`: every count the terminal prints, in one format."""
    return f"{n:,} {word if n == 1 else word_plural or word + 's'}"


STATUS_COLUMNS = ("view", "streams", "selected", "applied", "rejects", "bugs", "pending", "blocked", "parked",
                  "conserved")  # what fits 100 columns; --wide adds the rest
WIDE_COLUMNS = ("ignored", "handler_error", "dupes", "late", "conflicts", "gaps", "oldest wait")


def _status_cells(s: ViewStatus) -> dict[str, object]:
    wait = "-" if s.oldest_wait_seconds is None else f"{s.oldest_wait_seconds:,.0f}s"
    return {"view": s.view, "streams": s.streams, "selected": s.selected, "applied": s.outcomes["applied"],
            "rejects": s.rejects, "bugs": s.bugs, "pending": s.pending, "blocked": s.blocked_streams,
            "parked": s.parked_streams, "conserved": "yes" if s.conserved else "NO",
            "ignored": s.outcomes["ignored"], "handler_error": s.outcomes["handler_error"],
            "dupes": s.outcomes["duplicate"], "late": s.outcomes["late"], "conflicts": s.outcomes["conflict"],
            "gaps": s.gaps_skipped, "oldest wait": wait}


def format_status(status: StoreStatus, wide: bool = False) -> str:
    lines = [f"logical time {status.logical_time or '-'}; {plural(status.batches, 'batch', 'batches')}, "
             f"{plural(status.records, 'record')} ({status.normalised:,} normalised, {status.malformed:,} malformed), "
             f"{plural(len(status.rejected), 'rejected file')}"]
    for batch_id, reason in status.rejected:
        lines.append(f"  rejected {batch_id}: {reason}")
    header = STATUS_COLUMNS[:-1] + WIDE_COLUMNS + STATUS_COLUMNS[-1:] if wide else STATUS_COLUMNS
    table = [header] + [tuple(_status_cells(s)[name] for name in header) for s in status.views]
    text = [[f"{v:,}" if isinstance(v, int) else str(v) for v in row] for row in table]
    widths = [max(len(row[i]) for row in text) for i in range(len(header))]
    for row in text:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
    for batch_id, again, records in status.reingested:
        lines.append(f"re-ingested {batch_id} as {again}: {records} records it had left undelivered")
    lines.append(f"unrouted: {describe_unrouted(status.unrouted, status.subscribed)}" if status.unrouted else
                 f"unrouted: none (the views subscribe to {', '.join(status.subscribed)})")
    for s in status.views:
        rows = ", ".join(f"{table} {n:,}" for table, n in s.rows.items()) or "-"
        logged = ", ".join(f"{k} {n:,}" for k, n in s.errors_by_kind.items()) or "none"
        lines.append(f"{s.view}: rows {rows}; error log rows {logged} (a row per failed attempt); "
                     f"last batch {s.last_batch or '-'}")
    lines += [version_line(s.version) for s in status.views]
    if status.not_loaded:
        lines.append(f"the store also holds {', '.join(status.not_loaded)}, which INORDER_VIEWS did not load: not "
                     f"projected while it does not (`inorder remove-view VIEW` takes a view out of the store)")
    lines += [shadow_line(s) for s in status.views if s.rebuild_shadow]
    return "\n".join(lines)


def shadow_line(s: ViewStatus) -> str:
    return (f"{s.view}: a rebuild's shadow (schema {s.rebuild_shadow}) is in the store: a rebuild is under way, or "
            f"one was interrupted (`inorder rebuild {s.view}` starts it afresh; the live view is whole either way)")


def status_document(status: StoreStatus, positions: Positions) -> dict:
    """`inorder status --json`: what format_status prints, and where PostgreSQL stands (`read_positions`:
    `postgres` is null when publishing is not configured, and holds the error's text when PostgreSQL cannot
    be read). docs/CLI.md lists the keys."""
    return {
        "logical_time": status.logical_time,
        "batches": status.batches,
        "records": status.records,
        "normalised": status.normalised,
        "malformed": status.malformed,
        "rejected": [{"batch_id": batch_id, "reason": reason} for batch_id, reason in status.rejected],
        "unrouted": dict(status.unrouted),
        "subscribed_stream_types": list(status.subscribed),
        "views_not_loaded": list(status.not_loaded),
        "reingested": [{"batch_id": batch_id, "as": again, "records": records}
                       for batch_id, again, records in status.reingested],
        "views": [{
            "view": s.view, "streams": s.streams, "selected": s.selected, "outcomes": dict(s.outcomes),
            "pending": s.pending, "blocked_streams": s.blocked_streams, "oldest_wait_seconds": s.oldest_wait_seconds,
            "parked_streams": s.parked_streams, "rejects": s.rejects, "bugs": s.bugs,
            "gaps_skipped": s.gaps_skipped, "rows": dict(s.rows),
            "conserved": s.conserved, "errors_by_kind": dict(s.errors_by_kind), "last_batch": s.last_batch,
            "code": {"fingerprint": s.version.code, "stored_fingerprint": s.version.stored,
                     "matches": s.version.matches, "change": s.version.change, "what": s.version.what,
                     "older_code_since_batch": s.version.since_batch, "state": s.version.describe()},
            "rebuild_shadow": s.rebuild_shadow,
        } for s in status.views],
        "postgres": None if not positions.configured else {
            "error": positions.error,
            "views": [{
                "view": p.view, "committed_entry": p.committed, "published_entry": p.published,
                "behind_entries": p.behind, "current": p.current} for p in positions.entries],
        },
    }
