"""The pass contract: what a pass's walk reads and writes, as named types and Arrow schemas.

A pass crosses two boundaries: the driver's DuckDB → the executors' walk (the inputs, below), and the
walk → the driver's commit, the publication, the run's figures and the in-memory test kit
(`output_schema`, built from the records of a `PassOutput`). Both are typed columns: a view table's
rows travel in the table's own column types (one struct column per view table, named by
`row_column`), the engine's fields in theirs. docs/STORE.md ("The pass") describes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Iterable, Iterator, NamedTuple

import pyarrow as pa

from pipelines.message import Message
from pipelines.columns import decimal_precision_scale
from pipelines.records import UTC_MICROS, WATERMARK_STATE, Micros, WatermarkRecord, arrow_columns
from pipelines.view import Table, View

_ARROW_TYPES = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(),
                "BOOLEAN": pa.bool_(), "DATE": pa.date32(), "TIMESTAMPTZ": UTC_MICROS}


def arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type of a view column's declared type (pipelines/view.py's fixed list)."""
    if sql_type.startswith("DECIMAL"):
        return pa.decimal128(*decimal_precision_scale(sql_type))
    return _ARROW_TYPES[sql_type]


def row_type(table: Table) -> pa.StructType:
    """One row of `table`, a field per column in its declared type."""
    return pa.struct([(column, arrow_type(sql_type)) for column, sql_type in table.sql_types.items()])


def row_column(view_name: str, table_name: str) -> str:
    """The pass column that carries a view table's rows. A colon cannot occur in a view's or a table's
    name (identifiers), so no two tables share one and no engine column is named like one; and unlike a
    dot, Spark reads it as part of the name, not as a path into a struct."""
    return f"{view_name}:{table_name}"


class InputKind(IntEnum):
    """What an input row is (its `rec_type`), in the order a stream's rows reach the walk."""

    STATE = 0  # a (view, stream)'s stored state: watermark fields, skipped ranges, its rows of the view's tables
    WALKED = 1  # the copy a (view, stream) walked at a seq at or below its watermark that a NEW message resends
    PENDING = 2  # a message buffered for a (view, stream)
    NEW = 3  # a message of the pass, once, routed to each view of `views`


class OutputKind(StrEnum):
    """What an output record is; its `kind` column."""

    WATERMARK = "watermark"  # a walked (view, stream)'s new watermark
    PENDING = "pending"  # a message that stays buffered
    ERROR = "error"  # a late, conflict or handler_error row of inorder.errors (its kind in `name`)
    GAP = "gap"  # a skipped range (its reason in `name`)
    ROWS = "rows"  # a row of a stream's keyed table (all of them), or one it appended (table in `name`)
    AGGREGATE = "aggregate"  # a partition's partial sums of one aggregate key (table in `name`)
    COUNT = "count"  # an outcome count per (view, entry): `name`, `n`
    METRIC = "metric"  # a partition's figure: `name`, `n` (and `view`, for a view's)
    FATAL = "fatal"  # a handler bug of an on_bug="fail" view: the pass must not be committed


class PendingRecord(NamedTuple):
    view: str
    stream_id: str
    msg: Message


class ErrorRecord(NamedTuple):
    """One row of inorder.errors for a message: `kind` late | conflict | handler_error; the handler's
    exception fields only for handler_error."""

    view: str
    stream_id: str
    entry_idx: int
    kind: str
    msg: Message
    reason: str
    logged_at: Micros
    exception_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    error_class: str | None = None  # reject | bug
    attempt: int | None = None

    def details(self) -> dict:
        """The error's own fields (the message aside) under their column names, times in microseconds."""
        fields = ERROR_DETAILS if self.kind == "handler_error" else ERROR_DETAILS[:2]
        return {name: getattr(self, name) for name in fields}


ERROR_DETAILS = ErrorRecord._fields[5:]  # an error's own columns: its reason and time, then a handler error's


class GapRecord(NamedTuple):
    view: str
    stream_id: str
    entry_idx: int
    reason: str  # timeout | capacity
    first_missing: int
    last_missing: int
    waited_us: int
    batch_id: str  # the entry whose walk skipped it
    skipped_at: Micros


class RowsRecord(NamedTuple):
    """A stream's rows of one table: a keyed table's every row after the pass (none: all deleted), or
    the rows the pass appended to an append table."""

    view: str
    stream_id: str  # the commit reads the rows alone; the replay kit (pipelines.testing) files a keyed table's by it
    table: str
    rows: list[dict]


class Metric(NamedTuple):
    """A partition's figure (a METRIC record): the walk's clocks, and per view the streams it walked."""

    name: str
    n: int
    view: str | None = None


SUMMARY_KINDS = (OutputKind.COUNT, OutputKind.METRIC)  # the records a run's figures are counted from
SUMMARY_COLUMNS = ["kind", "view", "name", "n"]


@dataclass(frozen=True)
class HandlerBug:
    """A handler of a view with on_bug="fail" raised on this message, in this entry (a "fatal" record)."""

    view: str
    stream_id: str
    seq: int
    entry_idx: int
    reason: str


class PassOutput:
    """Everything a walk produces, accumulated per executor partition (or in memory, by the test kit)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, str], int] = {}  # (view, entry_idx, outcome) -> n
        self.watermarks: list[WatermarkRecord] = []
        self.pending: list[PendingRecord] = []
        self.errors: list[ErrorRecord] = []
        self.gaps: list[GapRecord] = []
        self.rows: list[RowsRecord] = []
        self.fatal: list[HandlerBug] = []  # on_bug="fail": the pass must not be committed

    def count(self, view: str, entry_idx: int, outcome: str, n: int = 1) -> None:
        key = (view, entry_idx, outcome)
        self.counts[key] = self.counts.get(key, 0) + n

    def __len__(self) -> int:
        """How many records it holds (counts aside): a partition writes them out every so many."""
        return (len(self.watermarks) + len(self.pending) + len(self.errors) + len(self.gaps) + len(self.rows)
                + len(self.fatal))

    def clear_records(self) -> None:
        for records in (self.watermarks, self.pending, self.errors, self.gaps, self.rows, self.fatal):
            records.clear()


# -- the Arrow form -----------------------------------------------------------------------------------

# The inputs (pipelines/engine/inputs.py writes them), sorted by (stream_id, rec_type, view, entry_idx, line)
# before the walk. Every row has `view` (None for a NEW message: its `views`), `stream_id`, `rec_type`,
# `entry_idx`, `line`.
# - STATE: the watermark's fields (`stream_type`, `last_seq`, `blocked_at`, `blocked_since`, `parked`,
#   `attempts`; all null for a stream with rows but no watermark), `skipped` (its logged gap ranges, in seq
#   order), and per table of the view (`row_column`): a keyed table's rows of the stream (a list of
#   `row_type`), an append table's newest row (a `row_type`, null for none);
# - WALKED, PENDING and NEW: the message's fields (MESSAGE_SCHEMA's), NEW its `views` too.


# A message's columns are its fields, its entry_idx as msg_entry_idx (a record's own entry_idx is the entry
# that wrote it). Pending messages, errors and fatal records fill them.
MESSAGE_IN_PASS = {"entry_idx": "msg_entry_idx"}
_RECORD_COLUMNS = [("kind", pa.string()), ("view", pa.string()), ("stream_id", pa.string()),
                   ("entry_idx", pa.int64()), ("name", pa.string()), ("n", pa.int64())]
GAP_FIELDS = ("first_missing", "last_missing", "waited_us", "skipped_at")  # batch_id is the message's column
# a watermark's stream_type is the message column of that name
_ENGINE_OUTPUT = pa.schema(_RECORD_COLUMNS + arrow_columns(Message, Message._fields, MESSAGE_IN_PASS)
                           + arrow_columns(WatermarkRecord, WATERMARK_STATE[1:])
                           + arrow_columns(ErrorRecord, ERROR_DETAILS) + arrow_columns(GapRecord, GAP_FIELDS))


def view_row_fields(views: Iterable[View]) -> list[pa.Field]:
    return [pa.field(row_column(v.name, t.name), row_type(t)) for v in views for t in v.tables]


def output_schema(views: Iterable[View]) -> pa.Schema:
    """The pass output's columns: the engine's, then one struct column per view table (`row_column`)."""
    return pa.schema(list(_ENGINE_OUTPUT) + view_row_fields(views))


def _batch(schema: pa.Schema, length: int, columns: dict[str, Any]) -> pa.RecordBatch:
    """A batch of `schema` with `columns` (name -> values) filled and every other column null."""
    arrays = [pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(length, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _message_columns(messages: list[Message]) -> dict[str, list]:
    return {MESSAGE_IN_PASS.get(name, name): list(values) for name, values in zip(Message._fields, zip(*messages))}


def _fields(records: list[NamedTuple]) -> dict[str, tuple]:
    """`records`' values by field name."""
    return dict(zip(records[0]._fields, zip(*records)))


def output_batches(out: PassOutput, schema: pa.Schema, aggregates: dict[str, dict[str, list[dict]]] | None = None,
                   metrics: list[Metric] | None = None, with_counts: bool = False) -> Iterator[pa.RecordBatch]:
    """`out`'s records as batches of `schema`, one batch per kind (and per view table for rows), then
    (given) its counts, the partition's `metrics` and aggregate partial sums (view -> table
    -> rows)."""
    if out.watermarks:
        kinds = [OutputKind.WATERMARK.value] * len(out.watermarks)
        yield _batch(schema, len(out.watermarks), {"kind": kinds, **_fields(out.watermarks)})
    if out.pending:
        views, streams, messages = zip(*out.pending)
        yield _batch(schema, len(messages), {
            "kind": [OutputKind.PENDING.value] * len(messages), "view": views, "stream_id": streams,
            "entry_idx": [m.entry_idx for m in messages], **_message_columns(list(messages))})
    if out.errors:
        columns = _fields(out.errors)  # the error's kind goes in `name`, its message in the message's columns
        name, messages = columns.pop("kind"), _message_columns(list(columns.pop("msg")))
        yield _batch(schema, len(out.errors), {**columns, **messages, "name": name,
                                               "kind": [OutputKind.ERROR.value] * len(out.errors)})
    if out.gaps:
        columns = _fields(out.gaps)  # the gap's reason goes in `name`
        name = columns.pop("reason")
        yield _batch(schema, len(out.gaps), {**columns, "name": name, "kind": [OutputKind.GAP.value] * len(out.gaps)})
    by_table: dict[tuple[str, str], list[RowsRecord]] = {}
    for record in out.rows:
        by_table.setdefault((record.view, record.table), []).append(record)
    for (view, table), records in by_table.items():
        rows = [row for r in records for row in r.rows]
        if rows:
            yield _batch(schema, len(rows), {
                "kind": [OutputKind.ROWS.value] * len(rows), "view": [view] * len(rows),
                "name": [table] * len(rows),
                row_column(view, table): rows})
    if out.fatal:
        bugs = out.fatal
        yield _batch(schema, len(bugs), {
            "kind": [OutputKind.FATAL.value] * len(bugs), "view": [b.view for b in bugs],
            "stream_id": [b.stream_id for b in bugs], "seq": [b.seq for b in bugs],
            "entry_idx": [b.entry_idx for b in bugs], "reason": [b.reason for b in bugs]})
    if with_counts and out.counts:
        keys = list(out.counts)
        yield _batch(schema, len(keys), {
            "kind": [OutputKind.COUNT.value] * len(keys), "view": [k[0] for k in keys],
            "entry_idx": [k[1] for k in keys], "name": [k[2] for k in keys], "n": list(out.counts.values())})
    if metrics:
        names, values, views = zip(*metrics)
        yield _batch(schema, len(metrics), {"kind": [OutputKind.METRIC.value] * len(metrics), "view": views,
                                            "name": names, "n": values})
    for view, tables in (aggregates or {}).items():
        for table, rows in tables.items():
            if rows:
                yield _batch(schema, len(rows), {
                    "kind": [OutputKind.AGGREGATE.value] * len(rows), "view": [view] * len(rows),
                    "name": [table] * len(rows), row_column(view, table): rows})
