"""Independent pure-Python reference model of inorder (docs/CONCEPTS.md §1–§3, docs/STORE.md).

It keeps everything in dicts, processes entries one by one exactly as STORE.md states the
rules, and returns the stored rows so they can be compared with the real engine row for row.
Only the view declarations (duck-typed `View`/`Table` from pipelines/view.py) are used.
"""

from __future__ import annotations

import csv
import io
import json
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
import math
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow.parquet as pq

from pipelines.view import Reject  # the API a handler raises: part of the contract, not of the engine

COUNTERS = ("applied", "ignored", "handler_error", "duplicate", "late", "conflict")
CONTENT = ("event_type", "payload", "occurred_at", "event_id")
MESSAGE_FIELDS = ("stream_id", "seq", "event_type", "payload", "occurred_at", "event_id", "batch_id", "line")
BIGINT_MAX = (1 << 63) - 1


@dataclass
class Entry:
    """One ingest-log entry. `lines` is a list of records (str or bytes), or a whole file (str/bytes)."""

    kind: str  # 'batch' | 'tick' | 'retry' | 'skip'
    batch_id: str
    T: float
    lines: list[str | bytes] | str | bytes | None = None
    target_view: str | None = None
    target_stream: str | None = None
    fmt: str = "jsonl"  # a batch's file format; "csv" and "parquet" batches hold their file's bytes in `lines`


def canonical(obj: Any) -> str:
    """Sorted keys, no spaces; JSON numbers keep the exact text they were written with."""
    if isinstance(obj, dict):
        return "{" + ",".join(f"{canonical(k)}:{canonical(obj[k])}" for k in sorted(obj)) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(canonical(v) for v in obj) + "]"
    if isinstance(obj, Decimal):
        return str(obj)
    return json.dumps(obj, ensure_ascii=False)  # strings, ints, true/false/null


def split_lines(data: str | bytes) -> list[str | bytes]:
    """A file's records: split on "\\n"; a final newline does not make an extra empty record."""
    parts = data.split(b"\n" if isinstance(data, bytes) else "\n")
    if parts and not parts[-1]:
        parts.pop()
    return parts


# --------------------------------------------------------------------------- normalisation

def _bad_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


MAX_DEPTH = 128  # CONCEPTS §2 / STORE.md: a record nests objects and arrays at most 128 levels (itself = 1)
MAX_ID_BYTES = 1024  # stream_id, stream_type, type, event_id: at most 1 KiB of UTF-8, no control characters
BOM = "\ufeff"


def _depth(obj: Any, limit: int) -> int:
    """Nesting levels of objects/arrays in `obj`, counting no further than limit + 1."""
    if limit < 0 or not isinstance(obj, (dict, list)):
        return 0
    children = obj.values() if isinstance(obj, dict) else obj
    return 1 + max((_depth(c, limit - 1) for c in children), default=0)


def _good_id(text: str) -> bool:
    return (len(text.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
            and not any(ord(ch) < 32 or ord(ch) == 127 for ch in text))


def normalise(raw: str | bytes, first_seq: int = 1, max_record_bytes: int = 1 << 20) -> dict | None:
    """The normalised message of one record line, or None when the record is malformed."""
    cr = b"\r" if isinstance(raw, bytes) else "\r"
    if raw.endswith(cr):
        raw = raw[:-1]
    try:
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeError:
        return None
    if len(data) > max_record_bytes:
        return None
    try:
        obj = json.loads(text, parse_constant=_bad_constant, parse_float=Decimal)
    except (ValueError, RecursionError):
        return None
    return normalise_record(obj, first_seq)


def normalise_record(obj: Any, first_seq: int = 1) -> dict | None:
    """The normalised message of one parsed record (a JSON object, or a CSV or Parquet row), or None."""
    if not isinstance(obj, dict) or _depth(obj, MAX_DEPTH) > MAX_DEPTH:
        return None
    stream_id = obj.get("stream_id")
    if isinstance(stream_id, bool) or not isinstance(stream_id, (str, int)) or stream_id == "":
        return None
    seq = obj.get("seq")
    if isinstance(seq, str) and seq and all("0" <= ch <= "9" for ch in seq):
        digits = seq.lstrip("0") or "0"
        seq = int(digits) if len(digits) <= 19 else None  # beyond BIGINT anyway
    if isinstance(seq, bool) or not isinstance(seq, int) or not first_seq <= seq <= BIGINT_MAX:
        return None
    event_type = obj.get("type")
    if not isinstance(event_type, str) or not event_type:
        return None
    occurred_at = obj.get("occurred_at")
    if occurred_at is not None and not isinstance(occurred_at, str):
        return None
    event_id = obj.get("event_id")
    if isinstance(event_id, bool) or not isinstance(event_id, (str, int, type(None))):
        return None
    stream_type = obj.get("stream_type", "account")
    if not isinstance(stream_type, str) or not stream_type:
        return None
    message = {
        "stream_id": str(stream_id), "stream_type": stream_type, "seq": seq, "event_type": event_type,
        "payload": canonical(obj["payload"]) if "payload" in obj else "{}",
        "occurred_at": occurred_at, "event_id": None if event_id is None else str(event_id),
    }
    ids = [message[k] for k in ("stream_id", "stream_type", "event_type", "event_id") if message[k] is not None]
    if not all(_good_id(i) for i in ids):
        return None
    try:  # lone surrogates from \\ud800 escapes cannot be stored (fields the record does not map are never stored)
        for value in message.values():
            if isinstance(value, str):
                value.encode("utf-8")
    except UnicodeError:
        return None
    return message


def table_records(data: bytes, fmt: str) -> list[tuple[str, dict | None]] | None:
    """A CSV or Parquet file's records as (raw text, the record as an object, or None when its row
    cannot be one), as STORE.md reads them: a header; an empty CSV field is null; a `payload` column
    holds the payload as JSON text. None when the file has no header to read."""
    rows: list[tuple[str, dict | None]] = []
    if fmt == "csv":
        reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        header = next(reader, None)
        if header is None:
            return None
        for row in reader:
            raw = ",".join(row)
            record = dict(zip(header, (v if v != "" else None for v in row))) if len(row) == len(header) else None
            rows.append((raw, _with_payload(record)))
        return rows
    table = pq.read_table(io.BytesIO(data))
    for record in table.to_pylist():
        parsed = _with_payload(dict(record))
        # a Parquet row's raw text: the row as JSON, its payload parsed (numbers as their text)
        rows.append((json.dumps(record if parsed is None else parsed, default=str), parsed))
    return rows


def _with_payload(record: dict | None) -> dict | None:
    """The record with its `payload` column's JSON text parsed (None when it is not JSON)."""
    if record is None or not isinstance(record.get("payload"), str):
        return record
    try:
        return {**record, "payload": json.loads(record["payload"], parse_constant=_bad_constant, parse_float=Decimal)}
    except (ValueError, RecursionError):
        return None


RAW_LIMIT = 4096  # STORE.md: a malformed record's raw text is kept truncated


def raw_text(raw: str | bytes) -> str:
    """A malformed record's raw text as the error log keeps it: at most 4 KiB of its bytes, as UTF-8
    (an undecodable byte shown as U+FFFD), without the line's carriage return."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if data.endswith(b"\r"):
        data = data[:-1]
    return data[:RAW_LIMIT].decode("utf-8", errors="replace")[:RAW_LIMIT]


def last_line(text: str | None) -> str | None:
    """A traceback's last line: the exception and its message (the frames above are the caller's)."""
    return None if text is None else (text.strip().splitlines() or [""])[-1]


# --------------------------------------------------------------------------- table values

def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise TypeError(f"{value!r} is not a number")
    return value


def _norm_value(sql_type: str, value: Any) -> Any:
    """A value as the read store holds it and hands it back: of its column's Python type (CONCEPTS §5,
    issue 10); a value of another type is a bug (TypeError), one the column cannot hold is `Reject`."""
    if value is None:
        return None
    if sql_type.startswith("DECIMAL"):
        precision, scale = (int(x) for x in sql_type[8:-1].split(","))
        exact = Decimal(str(_number(value)))
        if not exact.is_finite():
            raise Reject(f"{value} does not fit {sql_type}")
        try:  # with every digit the column holds (the default context's 28 would refuse a DECIMAL(38,10) value)
            q = exact.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=Context(prec=precision + 1))
        except InvalidOperation:
            raise Reject(f"{value} does not fit {sql_type}") from None
        if q.copy_abs() >= Decimal(10) ** (precision - scale):  # abs() would round to the context's 28 digits
            raise Reject(f"{value} does not fit {sql_type}")
        return q
    if sql_type in ("BIGINT", "INTEGER"):
        if not math.isfinite(_number(value)) or int(value) != value:
            raise TypeError(f"{value!r} is not an integer")
        limit = BIGINT_MAX if sql_type == "BIGINT" else (1 << 31) - 1
        if not -limit - 1 <= int(value) <= limit:
            raise Reject(f"{value} does not fit {sql_type}")
        return int(value)
    if sql_type == "DOUBLE":
        if abs(_number(value)) >= 2 ** 1024 or not math.isfinite(value):
            raise Reject(f"{value} does not fit DOUBLE")
        return float(value)
    if sql_type == "BOOLEAN":
        if not isinstance(value, bool):
            raise TypeError(f"{value!r} is not a boolean")
        return value
    if sql_type == "DATE":
        if isinstance(value, str):
            try:
                return date.fromisoformat(value)
            except ValueError:
                raise Reject(f"{value!r} is not a date") from None
        if isinstance(value, datetime) or not isinstance(value, date):
            raise TypeError(f"{value!r} is not a date")
        return date(value.year, value.month, value.day)
    if sql_type == "TIMESTAMPTZ":
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise Reject(f"{value!r} is not a time") from None
        if not isinstance(value, datetime):
            raise TypeError(f"{value!r} is not a datetime")
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    if sql_type == "VARCHAR":
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a string")
        return str(value)
    raise TypeError(f"unknown column type {sql_type}")


def _plain(value: Any) -> Any:
    """Typed values in the shape tests/harness.py reads the engine's store in."""
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(microseconds=1) / 1e6
    if isinstance(value, date):
        return value.isoformat()
    return value


def _zero(sql_type: str) -> Any:
    if sql_type.startswith("DECIMAL") or sql_type in ("BIGINT", "INTEGER", "DOUBLE"):
        return _norm_value(sql_type, 0)
    return None


class _Handle:
    """`tables.<name>` as a handler sees it: reads see this attempt's writes, writes stay in the tx."""

    def __init__(self, tx: "_Tx", table: Any) -> None:
        self._tx, self._t = tx, table

    def _row(self, row: dict) -> dict:
        unknown = set(row) - set(self._t.columns)
        if unknown:
            raise KeyError(f"table {self._t.name} has no columns {sorted(unknown)}")
        out = {c: _norm_value(t, row.get(c)) for c, t in self._t.sql_types.items()}
        if any(out[c] is None for c in self._t.primary_key):
            raise ValueError(f"table {self._t.name}: a primary key column is None")
        if self._t.stream_key is not None and out[self._t.stream_key] != self._tx.stream_id:
            raise ValueError(f"table {self._t.name}: a row of another stream")
        return out

    def _key(self, values: tuple) -> tuple:
        if len(values) != len(self._t.primary_key) or any(v is None for v in values):
            raise TypeError(f"table {self._t.name}: primary key is {self._t.primary_key}")
        return tuple(_norm_value(self._t.sql_types[c], v) for c, v in zip(self._t.primary_key, values))

    def _rows(self) -> dict:
        rows = dict(self._tx.store[self._t.name])
        for (name, pk), row in self._tx.writes.items():
            if name == self._t.name:
                rows[pk] = row
        return {pk: row for pk, row in rows.items() if row is not None}

    def _read(self, pk: tuple) -> dict | None:
        """The row under `pk`, if the handler's stream may see it: a stream-keyed table's rows belong to
        their stream (CONCEPTS §5), so another stream's row is not there for it."""
        if (self._t.name, pk) in self._tx.writes:
            row = self._tx.writes[(self._t.name, pk)]
        else:
            row = self._tx.store[self._t.name].get(pk)
        return row if row is None or self._own(row) else None

    def _own(self, row: dict) -> bool:
        return self._t.stream_key is None or row[self._t.stream_key] == self._tx.stream_id

    def _write(self, pk: tuple, row: dict | None) -> None:
        self._tx.writes[(self._t.name, pk)] = row

    def _need(self, *kinds: str) -> None:
        if self._t.kind not in kinds:
            raise TypeError(f"table {self._t.name} is {self._t.kind}")

    # keyed
    def get(self, *pk: Any) -> dict | None:
        self._need("keyed")
        row = self._read(self._key(pk))
        return None if row is None else dict(row)

    def put(self, row: dict) -> None:
        self._need("keyed")
        row = self._row(row)
        self._write(tuple(row[c] for c in self._t.primary_key), row)

    def delete(self, *pk: Any) -> None:
        self._need("keyed")
        key = self._key(pk or (self._own_key(),))
        if self._read(key) is not None:  # another stream's row is not the handler's to delete
            self._write(key, None)

    def all(self) -> list[dict]:
        self._need("keyed")
        return [dict(r) for _, r in sorted(self._rows().items()) if self._own(r)]

    # keyed by the stream id alone (Table.per_stream)
    @property
    def row(self) -> dict | None:
        return self.get(self._own_key())

    def save(self, **changes: Any) -> None:
        current = self.get(self._own_key())
        self.put({**current, **changes} if current is not None else {**changes, self._t.stream_key: self._tx.stream_id})

    def _own_key(self) -> str:
        self._need("keyed")
        if self._t.primary_key != (self._t.stream_key,):
            raise TypeError(f"table {self._t.name}: row and save() need a table keyed by the stream id alone")
        return self._tx.stream_id

    # append
    def last(self) -> dict | None:
        self._need("append")
        mine = [(pk, r) for pk, r in self._rows().items() if r[self._t.stream_key] == self._tx.stream_id]
        return dict(max(mine, key=lambda item: item[0])[1]) if mine else None

    def append(self, row: dict) -> None:
        self._need("append")
        row = self._row(row)
        pk = tuple(row[c] for c in self._t.primary_key)
        if self._read(pk) is not None:
            raise KeyError(f"table {self._t.name}: duplicate key {pk}")
        self._write(pk, row)

    # aggregate
    def add(self, key: dict, **increments: Any) -> None:
        self._need("aggregate")
        pk = self._key(tuple(key[c] for c in self._t.primary_key))
        row = self._read(pk)
        if row is None:
            row = {c: _zero(t) for c, t in self._t.sql_types.items()} | dict(zip(self._t.primary_key, pk))
        row = dict(row)
        for column, amount in increments.items():
            if column not in self._t.value_columns:
                raise KeyError(f"table {self._t.name}: {column} is not a value column")
            row[column] = row[column] + _norm_value(self._t.sql_types[column], amount)
        self._write(pk, self._row(row))


class _Tx:
    def __init__(self, view: Any, store: dict, stream_id: str) -> None:
        self.view, self.store, self.stream_id, self.writes = view, store, stream_id, {}

    def __getattr__(self, name: str) -> _Handle:
        return _Handle(self, self.view.table(name))

    def __getitem__(self, table: Any) -> _Handle:
        return _Handle(self, self.view.table(table if isinstance(table, str) else table.name))

    def commit(self) -> None:
        for (name, pk), row in self.writes.items():
            if row is None:
                self.store[name].pop(pk, None)
            else:
                self.store[name][pk] = row


class _Event:
    def __init__(self, m: dict) -> None:
        for k in ("stream_id", "stream_type", "seq", "event_type", "occurred_at", "event_id", "batch_id"):
            setattr(self, k, m[k])
        self.payload_json = m["payload"]
        self.payload = json.loads(m["payload"], parse_float=Decimal)


# --------------------------------------------------------------------------- ordering

@dataclass
class _Stream:
    stream_type: str
    last_seq: int
    pending: dict[int, dict] = field(default_factory=dict)
    blocked_at: int | None = None
    blocked_since: float | None = None
    parked: bool = False
    attempts: int = 0  # failed attempts of the parked message
    skipped: list[tuple[int, int]] = field(default_factory=list)
    walked: dict[int, dict] = field(default_factory=dict)  # seq -> the copy the walk took at it (applied or not)
    updated_entry: int | None = None  # the last entry whose run walked the stream
    prev_last_seq: int | None = None  # last_seq before that entry (None: the stream was new in it)


class RunFailed(RuntimeError):
    """A handler bug in a view with on_bug="fail": the run fails and commits nothing."""

    def __init__(self, view: str, stream_id: str, seq: int, entry_idx: int) -> None:
        super().__init__(f"view {view}: handler bug on {stream_id} seq {seq} in entry {entry_idx}")
        self.bug = (view, stream_id, seq, entry_idx)


class Model:
    def __init__(self, views: Any, first_seq: int = 1, max_record_bytes: int = 1 << 20) -> None:
        self.views = {v.name: v for v in views}
        self.first_seq, self.max_record_bytes = first_seq, max_record_bytes
        self.streams: dict[str, dict[str, _Stream]] = {v: {} for v in self.views}
        self.store = {t.name: {} for v in self.views.values() for t in v.tables}
        self.errors: list[dict] = []
        self.gaps: list[dict] = []
        self.ledger: list[dict] = []
        self.seen: set[str] = set()
        self.last_T: float | None = None  # the latest logical time recorded
        # (view, stream) of each retry/skip refused: the stream was not parked (nothing is recorded)
        self.refused: list[tuple[str, str]] = []
        self.entry_idx = 0  # entries recorded in the ingest log: new batches (rejected too), ticks, actions
        self.T: float | None = None  # the logical time of the entry being processed

    def process(self, e: Entry) -> None:
        if e.kind == "batch":
            if e.batch_id in self.seen:  # re-running a committed batch changes nothing
                return
            self.seen.add(e.batch_id)
            self.last_T = self.T = e.T
            self.entry_idx += 1
            if e.fmt != "jsonl":
                records = table_records(e.lines, e.fmt)
                if records is None:
                    return  # a file with no header or no rows to read: set aside, as an empty file is
                self._batch(e, [(raw, normalise_record(obj, self.first_seq) if obj is not None else None)
                                for raw, obj in records])
                return
            lines = split_lines(e.lines) if isinstance(e.lines, (str, bytes)) else list(e.lines or [])
            if not lines:
                return  # an empty file is set aside as a rejected batch: no ledger rows, time does not move
            bom = BOM.encode() if isinstance(lines[0], bytes) else BOM
            if lines[0].startswith(bom):  # a byte order mark at the start of the file is not part of line 1
                lines[0] = lines[0][len(bom):]
            self._batch(e, [(raw, normalise(raw, self.first_seq, self.max_record_bytes)) for raw in lines])
        elif e.kind == "tick":
            if self.last_T is not None and e.T <= self.last_T:
                return  # logical time has not moved: nothing to tick, no entry
            self.last_T = self.T = e.T
            self.entry_idx += 1
            e = replace(e, batch_id=f"tick-{self.entry_idx}")  # the name the engine gives the entry
            for view in self.views.values():
                self._entry_for_view(view, e, [], {})
        elif e.kind in ("retry", "skip"):
            self._operator(e)
        else:
            raise ValueError(f"unknown entry kind {e.kind!r}")

    def _batch(self, e: Entry, records: list[tuple[str | bytes, dict | None]]) -> None:
        """A batch's records, each (raw text, its message or None when malformed), in order."""
        messages = []
        for number, (raw, m) in enumerate(records, 1):
            if m is None:  # (its reason's wording is inspection's: tests/harness.py compares the rest)
                self.errors.append({**dict.fromkeys(("view", *MESSAGE_FIELDS, "error_class", "attempt",
                                                     "exception_type", "message", "traceback")),
                                    "kind": "malformed", "batch_id": e.batch_id, "line": number,
                                    "raw": raw_text(raw), "logged_at": e.T, "entry_idx": self.entry_idx})
            else:
                messages.append(m | {"batch_id": e.batch_id, "line": number, "entry_idx": self.entry_idx})
        routed = {t for v in self.views.values() for t in v.subscribes}
        base = {"records": len(records), "malformed": len(records) - len(messages), "normalised": len(messages),
                "unrouted": sum(m["stream_type"] not in routed for m in messages)}
        for view in self.views.values():
            self._entry_for_view(view, e, messages, base)

    def _entry_for_view(self, view: Any, e: Entry, messages: list[dict], base: dict) -> None:
        c: Counter = Counter()
        streams = self.streams[view.name]
        before = {sid: s.last_seq for sid, s in streams.items()}
        # the run walks the streams the entry brings messages for, and the buffered ones that are due:
        # not parked, and blocked past gap_timeout or holding more than max_pending
        walked = {sid for sid, s in streams.items() if s.pending and not s.parked and (
            s.blocked_since is None or e.T - s.blocked_since >= view.gap_timeout or len(s.pending) > view.max_pending)}
        for m in messages:
            if m["stream_type"] not in view.subscribes:
                continue
            walked.add(m["stream_id"])
            c["selected"] += 1
            s = streams.setdefault(m["stream_id"], _Stream(m["stream_type"], self.first_seq - 1))
            seq = m["seq"]
            if seq <= s.last_seq:
                walked_copy = s.walked.get(seq)
                if any(a <= seq <= b for a, b in s.skipped):
                    c["late"] += 1
                    self._error(view, m, "late", reason=f"seq {seq} arrived after its gap was skipped")
                elif all(walked_copy[k] == m[k] for k in CONTENT):
                    c["duplicate"] += 1
                else:  # DESIGN §2.3: the source rewrote a message the view has walked
                    c["conflict"] += 1
                    self._error(view, m, "conflict", reason=f"seq {seq} differs from the copy walked at that seq "
                                                            f"(batch {walked_copy['batch_id']}, line {walked_copy['line']})")
            elif seq in s.pending:
                if all(s.pending[seq][k] == m[k] for k in CONTENT):
                    c["duplicate"] += 1
                else:
                    c["conflict"] += 1
                    first = s.pending[seq]
                    self._error(view, m, "conflict", reason=f"seq {seq} differs from the first received "
                                                            f"(batch {first['batch_id']}, line {first['line']})")
            else:
                s.pending[seq] = m
        for stream_id, s in streams.items():
            if s.pending and not s.parked:
                self._walk(view, stream_id, s, e, c)
        for stream_id in walked:
            streams[stream_id].updated_entry, streams[stream_id].prev_last_seq = self.entry_idx, before.get(stream_id)
        self._ledger(view, e, c, base)

    def _operator(self, e: Entry) -> None:
        """retry/skip of a parked stream (at the latest logical time); of any other stream it is refused,
        and nothing is recorded (no entry, no ledger row)."""
        view = self.views[e.target_view]
        c: Counter = Counter()
        s = self.streams[view.name].get(e.target_stream)
        if s is None or not s.parked:
            self.refused.append((view.name, e.target_stream))
            return
        self.entry_idx += 1
        # recorded at the latest logical time (an operator's action brings no time of its own), under the
        # name the engine gives the entry
        self.T = self.last_T
        e = replace(e, batch_id=f"{e.kind}-{self.entry_idx}", T=self.last_T)
        s.updated_entry, s.prev_last_seq = self.entry_idx, s.last_seq
        s.parked = False
        if e.kind == "skip":
            s.walked[s.last_seq + 1] = s.pending.pop(s.last_seq + 1)  # the parked message: outcome handler_error
            s.last_seq, s.attempts = s.last_seq + 1, 0
            c["handler_error"] += 1
        self._walk(view, e.target_stream, s, e, c)
        self._ledger(view, e, c, {})

    def _walk(self, view: Any, stream_id: str, s: _Stream, e: Entry, c: Counter) -> None:
        nxt = s.last_seq + 1
        while True:
            while nxt in s.pending:
                attempt = (s.attempts if nxt == s.last_seq + 1 else 0) + 1
                outcome, policy = self._apply(view, s.pending[nxt], attempt)
                if policy in ("park", "fail"):
                    if policy == "fail":
                        raise RunFailed(view.name, stream_id, nxt, self.entry_idx)
                    s.parked, s.attempts = True, attempt  # the message stays in the buffer; the walk stops
                    s.last_seq = nxt - 1
                    s.blocked_at = s.blocked_since = None  # parked, not waiting at a gap
                    return
                s.walked[nxt] = s.pending.pop(nxt)
                c[outcome] += 1
                nxt += 1
            if not s.pending:
                s.blocked_at = s.blocked_since = None
                break
            if s.blocked_at != nxt:
                s.blocked_at, s.blocked_since = nxt, e.T
            if e.T - s.blocked_since >= view.gap_timeout:
                reason = "timeout"
            elif len(s.pending) > view.max_pending:
                reason = "capacity"
            else:
                break
            low = min(s.pending)
            self.gaps.append({"view": view.name, "stream_id": stream_id, "first_missing": nxt,
                              "last_missing": low - 1, "waited_seconds": float(e.T - s.blocked_since),
                              "reason": reason, "batch_id": e.batch_id, "skipped_at": float(e.T),
                              "entry_idx": self.entry_idx})
            s.skipped.append((nxt, low - 1))
            c["gaps_skipped"] += 1
            nxt = low
        s.last_seq, s.attempts = nxt - 1, 0

    def _apply(self, view: Any, m: dict, attempt: int) -> tuple[str, str | None]:
        """(outcome, the policy that applies to a handler_error: on_error for a Reject, on_bug otherwise)."""
        try:
            event = _Event(m)
            handler = view.handlers.get(m["event_type"])
            if handler is None or (view.predicate is not None and not view.predicate(event)):
                return "ignored", None
            tx = _Tx(view, self.store, m["stream_id"])
            handler(event, tx)
        except Reject as exc:
            self._error(view, m, "handler_error", "reject", attempt, exc)
            return "handler_error", view.on_error
        except Exception as exc:
            self._error(view, m, "handler_error", "bug", attempt, exc)
            return "handler_error", view.on_bug
        tx.commit()
        return "applied", None

    def _error(self, view: Any, m: dict, kind: str, error_class: str | None = None, attempt: int | None = None,
               exc: BaseException | None = None, reason: str | None = None) -> None:
        """An error row of the entry being processed; a handler's exception is described by its type,
        its message (at most 2,000 characters) and its traceback's last line."""
        described = dict.fromkeys(("exception_type", "message", "traceback"))
        if exc is not None:
            message = str(exc)[:2000]
            described = {"exception_type": type(exc).__name__, "message": message,
                         "traceback": last_line("".join(traceback.format_exception_only(type(exc), exc)))}
            reason = f"{type(exc).__name__}: {message}"
        self.errors.append({"view": view.name, "kind": kind, **{k: m[k] for k in MESSAGE_FIELDS},
                            "error_class": error_class, "attempt": attempt, "reason": reason, "raw": None,
                            **described, "logged_at": self.T, "entry_idx": self.entry_idx})

    def _ledger(self, view: Any, e: Entry, c: Counter, base: dict) -> None:
        row = {"batch_id": e.batch_id, "view": view.name, "kind": e.kind, "entry_idx": self.entry_idx,
               "received_at": float(e.T)}
        for k in ("records", "malformed", "normalised"):
            row[k] = base.get(k, 0)
        row["selected"] = c["selected"]
        row["unrouted"] = base.get("unrouted", 0)
        row.update({k: c[k] for k in COUNTERS})
        row["pending"] = sum(len(s.pending) for s in self.streams[view.name].values())
        row["gaps_skipped"] = c["gaps_skipped"]
        self.ledger.append(row)

    def result(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for view in self.views.values():
            for t in view.tables:
                out[t.name] = [{c: _plain(v) for c, v in r.items()} for _, r in sorted(self.store[t.name].items())]
        out["watermarks"] = [
            {"view": v, "stream_id": sid, "stream_type": s.stream_type, "last_seq": s.last_seq,
             "blocked_at": s.blocked_at, "blocked_since": None if s.blocked_since is None else float(s.blocked_since),
             "parked": s.parked, "pending_count": len(s.pending), "attempts": s.attempts,
             "updated_entry": s.updated_entry, "prev_last_seq": s.prev_last_seq}
            for v, streams in self.streams.items() for sid, s in sorted(streams.items())]
        out["pending"] = [
            {"view": v, "stream_id": sid, "seq": seq, "stream_type": m["stream_type"],
             **{k: m[k] for k in MESSAGE_FIELDS if k not in ("stream_id", "seq")}, "entry_idx": m["entry_idx"]}
            for v, streams in self.streams.items() for sid, s in sorted(streams.items())
            for seq, m in sorted(s.pending.items())]
        out["errors"] = [dict(r) for r in self.errors]
        out["gaps"] = [dict(r) for r in self.gaps]
        out["batches"] = [dict(r) for r in self.ledger]
        return out


def run_model(entries: list[Entry], views: Any, first_seq: int = 1, max_record_bytes: int = 1 << 20,
              refused: list | None = None) -> dict[str, list[dict]]:
    """The store after `entries`; the retry/skip entries it refused are appended to `refused`."""
    model = Model(views, first_seq, max_record_bytes)
    for entry in entries:
        model.process(entry)
    if refused is not None:
        refused.extend(model.refused)
    return model.result()
