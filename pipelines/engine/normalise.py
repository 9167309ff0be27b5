"""CONCEPTS §2 step 1: read a landing file and normalise its records.

Every record either becomes a normalised message or a `malformed` row with its line and reason;
a file that cannot be read at all is rejected whole with a reason. Nothing is dropped silently.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Iterable, Iterator, Mapping, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.message import Message
from pipelines.records import arrow_columns

RAW_LIMIT = 4096
MAX_SEQ = (1 << 63) - 1
MAX_DEPTH = 128  # objects and arrays nested inside each other, the record itself being level 1
MAX_ID_BYTES = 1024  # stream_id, stream_type, type and event_id are identifiers, not documents
BOM = b"\xef\xbb\xbf"
SUPPORTED_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}

# the archive's columns: a message's (`Message`'s fields and types) and its stream id, in the order written here
MESSAGE_SCHEMA = pa.schema([*arrow_columns(Message, ("entry_idx", "batch_id", "line")), ("stream_id", pa.string()),
                            *arrow_columns(Message, ("stream_type", "seq", "event_type", "payload", "occurred_at",
                                                     "event_id"))])
_MESSAGE_FIELDS = pa.struct(list(MESSAGE_SCHEMA)[3:])  # what `normalise` returns, in its order


class Malformed(ValueError):
    """A record that cannot be normalised; the message is its reason."""


class RejectedFile(ValueError):
    """A file that cannot be read at all; the message is its reason."""


def _reject_constant(token: str) -> Any:
    raise Malformed(f"invalid JSON: {token} is not a JSON number")


TOO_DEEP = f"JSON is nested deeper than {MAX_DEPTH} levels"


def _too_deep(value: Any, limit: int) -> bool:
    """Whether objects/arrays nest deeper than `limit` levels in `value` (iterative: never recurses)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _control(text: str) -> str | None:
    """The first control character (U+0000–U+001F, U+007F) in `text`, if any."""
    if text.isprintable():
        return None
    return next((ch for ch in text if ch < " " or ch == "\x7f"), None)


def _check_id(text: str | None, what: str) -> None:
    if text is None:
        return
    size = len(text) if len(text) * 4 <= MAX_ID_BYTES else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_BYTES:
        raise Malformed(f"{what} is {size} bytes, over the {MAX_ID_BYTES}-byte limit for identifiers")
    bad = _control(text)
    if bad is not None:
        raise Malformed(f"{what} contains the control character U+{ord(bad):04X}")


_encode_string = json.encoder.encode_basestring  # the C encoder json.dumps uses with ensure_ascii=False


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, and numbers exactly as they were written (never through a binary float:
    money must not change on the way in)."""
    parts: list[str] = []
    _canonical(value, parts.append)
    return "".join(parts)


def _canonical(value: Any, out) -> None:
    kind = type(value)
    if kind is str:
        out(_encode_string(value))
    elif kind is dict:
        out("{")
        for i, key in enumerate(sorted(value)):
            if type(key) is not str:
                raise TypeError(f"object key {key!r} is not a string")
            out("," if i else "")
            out(_encode_string(key))
            out(":")
            _canonical(value[key], out)
        out("}")
    elif kind is list or kind is tuple:
        out("[")
        for i, item in enumerate(value):
            out("," if i else "")
            _canonical(item, out)
        out("]")
    elif value is None:
        out("null")
    elif value is True or value is False:
        out("true" if value else "false")
    elif kind is int or kind is Decimal:
        out(str(value))  # a Decimal parsed from JSON text is finite and keeps its digits
    elif kind is float:  # from Parquet columns
        if not math.isfinite(value):
            raise ValueError(f"number {value} is not finite")
        out(float.__repr__(value))
    else:
        raise TypeError(f"{kind.__name__} is not a JSON value")


@dataclass(frozen=True)
class SourceMapping:
    """How raw records map onto messages: configuration, not code.

    Field references are dotted paths into the record (``"meta.stream.id"``); ``stream_id`` may list
    several paths whose values are joined with ``stream_id_separator``. The stream type is read
    from ``stream_type`` when the record has it, else it is the source's ``name``.
    """

    name: str = "account"
    stream_id: str | Sequence[str] = "stream_id"
    stream_id_separator: str = ":"
    seq: str = "seq"
    event_type: str = "type"
    payload: str = "payload"
    occurred_at: str = "occurred_at"
    event_id: str = "event_id"
    stream_type: str = "stream_type"
    first_seq: int = 1
    max_record_bytes: int = 1 << 20

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SourceMapping":
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown source mapping keys: {sorted(unknown)}")
        values = dict(data)
        if isinstance(values.get("stream_id"), list):
            values["stream_id"] = tuple(values["stream_id"])
        return cls(**values)

    # a source.json of one mapping reads every file of landing/ with it, and no sub-folder of landing/, as
    # every home did before a home could hold several (pipelines/engine/sources.py)
    reads_subfolders = False

    def mapping_for(self, name: PurePosixPath) -> "SourceMapping":
        return self


_ABSENT = object()


def _get(record: Mapping[str, Any], path: str) -> Any:
    if "." not in path:  # the usual case; `record` is a dict (normalise checks)
        return record.get(path, _ABSENT)
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _text_or_int(value: Any, what: str, required: bool) -> str | None:
    if value is _ABSENT or value is None:
        if required:
            raise Malformed(f"{what} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise Malformed(f"{what} must be a string, got {type(value).__name__}")
    text = str(value)
    if required and not text:
        raise Malformed(f"{what} is empty")
    return text


def _seq(value: Any, first_seq: int) -> int:
    if value is _ABSENT or value is None:
        raise Malformed("seq is missing")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"seq must be an integer, got {str(value)[:40]!r}")
    if value < first_seq:
        raise Malformed(f"seq {value} is below first_seq {first_seq}")
    if value > MAX_SEQ:
        raise Malformed("seq is out of range")
    return value


def normalise(record: Any, mapping: SourceMapping) -> tuple:
    """(stream_id, stream_type, seq, event_type, payload, occurred_at, event_id) or Malformed."""
    if not isinstance(record, dict):
        raise Malformed(f"record must be a JSON object, got {type(record).__name__}")
    if isinstance(mapping.stream_id, str):
        stream_id = _text_or_int(_get(record, mapping.stream_id), "stream_id", True)
    else:
        stream_id = mapping.stream_id_separator.join(
            _text_or_int(_get(record, p), f"stream_id part {p}", True) for p in mapping.stream_id)
    seq = _seq(_get(record, mapping.seq), mapping.first_seq)
    event_type = _get(record, mapping.event_type)
    if not isinstance(event_type, str) or not event_type:
        raise Malformed("type is missing" if event_type is _ABSENT else "type must be a non-empty string")
    stream_type = _get(record, mapping.stream_type)
    if stream_type is _ABSENT:
        stream_type = mapping.name
    elif not isinstance(stream_type, str) or not stream_type:
        raise Malformed("stream_type must be a non-empty string")
    payload = _get(record, mapping.payload)
    payload = {} if payload is _ABSENT else payload
    occurred_at = _get(record, mapping.occurred_at)
    if occurred_at is _ABSENT:
        occurred_at = None
    elif occurred_at is not None and not isinstance(occurred_at, str):
        raise Malformed("occurred_at must be a string")
    event_id = _text_or_int(_get(record, mapping.event_id), "event_id", False)
    for text, what in ((stream_id, "stream_id"), (stream_type, "stream_type"), (event_type, "type"),
                       (event_id, "event_id")):
        _check_id(text, what)
    try:
        payload_text = canonical_json(payload)
        for text in (stream_id, stream_type, event_type, payload_text, occurred_at, event_id):
            if text is not None:
                text.encode("utf-8")
    except UnicodeEncodeError:
        raise Malformed("text contains an unpaired UTF-16 surrogate escape") from None
    except RecursionError:
        raise Malformed(TOO_DEEP) from None
    except (ValueError, TypeError) as exc:
        raise Malformed(f"payload cannot be stored as JSON: {exc}") from None
    return stream_id, stream_type, seq, event_type, payload_text, occurred_at, event_id


def _as_value(exc: Malformed) -> Malformed:
    """A caught Malformed kept as a value (a line's verdict): without its traceback and context, whose frames
    (through their callers') would hold the whole file's lines in a reference cycle until a full collection."""
    exc.__traceback__ = exc.__context__ = None
    return exc


def _normalised(record: Any, mapping: SourceMapping) -> tuple | Malformed:
    """`normalise` of a parsed record (or the Malformed it already is), with the reason as a value."""
    if isinstance(record, Malformed):
        return record
    try:
        return normalise(record, mapping)
    except Malformed as exc:
        return _as_value(exc)


# one decoder for every line (json.loads with options would build a new one per call)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=Decimal)


def _parse_json_line(text: str, levels: int = MAX_DEPTH) -> Any:
    """Parse JSON text that may nest `levels` levels (fewer for a payload inside a record)."""
    try:
        value = _DECODER.decode(text)
    except Malformed:
        raise
    except RecursionError:
        raise Malformed(TOO_DEEP) from None
    except ValueError as exc:
        raise Malformed(f"invalid JSON: {exc}") from None
    if text.count("[") + text.count("{") > levels and _too_deep(value, levels):  # cheap test first
        raise Malformed(TOO_DEEP)
    return value


def _raw(data: bytes | str) -> str:
    if isinstance(data, bytes):
        data = data[:RAW_LIMIT].decode("utf-8", errors="replace")
    return data[:RAW_LIMIT]


def _json_lines(data: bytes) -> list[bytes]:
    """The lines of a JSON Lines file, without their line ends (line i + 1 is element i)."""
    if data.startswith(BOM):  # a UTF-8 byte order mark at the start of the file is not part of line 1
        data = data[len(BOM):]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [raw[:-1] if raw.endswith(b"\r") else raw for raw in lines]


def _jsonl_record(raw: bytes, mapping: SourceMapping) -> Any:
    """One line parsed by the per-line path, or Malformed with its reason."""
    try:
        if len(raw) > mapping.max_record_bytes:
            raise Malformed(f"record is {len(raw)} bytes, over max_record_bytes {mapping.max_record_bytes}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Malformed(f"invalid UTF-8 at byte {exc.start}") from None
        if not text.strip():
            raise Malformed("empty line")
        return _parse_json_line(text)
    except Malformed as exc:
        return _as_value(exc)


# The fast path (issue 13): a line whose record is plainly well formed is decoded by msgspec straight into
# its fields, typed and bounded as a message needs them; any other line takes the per-line path, which
# judges it and words the reason. msgspec accepts a subset of what `_DECODER` accepts and decodes it to
# the same values (floats as Decimal from their own digits, big integers exactly, the last of duplicate
# keys); it refuses lone surrogates, which `_DECODER` keeps. Its sorted encoder writes `canonical_json`'s
# text (`encode_basestring`'s escapes, `str` of ints and Decimals). tests/fast/test_inspect_differential.py
# holds the two paths to the frozen per-line normaliser.
_PLAIN_ID_CHARS = MAX_ID_BYTES // 4  # no text of this many characters is over MAX_ID_BYTES in UTF-8
_PlainId = Annotated[str, msgspec.Meta(min_length=1, max_length=_PLAIN_ID_CHARS)]
_CANONICAL_ENCODER = msgspec.json.Encoder(order="sorted", decimal_format="number")


def _plain_decoder(mapping: SourceMapping) -> msgspec.json.Decoder | None:
    """A decoder of the records the fast path takes under `mapping`: every mapped field a distinct top-level
    key, no other key, ids plain strings, seq an integer in range. None when the mapping has dotted paths,
    a composite stream id or a source name that is no plain identifier: every line takes the per-line path."""
    keys = {"stream_id": mapping.stream_id, "stream_type": mapping.stream_type, "seq": mapping.seq,
            "event_type": mapping.event_type, "payload": mapping.payload, "occurred_at": mapping.occurred_at,
            "event_id": mapping.event_id}
    name = mapping.name
    if (not all(isinstance(key, str) and "." not in key for key in keys.values())
            or len(set(keys.values())) < len(keys) or not 0 < len(name) <= _PLAIN_ID_CHARS or not name.isprintable()):
        return None
    record = msgspec.defstruct("PlainRecord", [
        ("stream_id", _PlainId), ("stream_type", _PlainId, name),
        ("seq", Annotated[int, msgspec.Meta(ge=mapping.first_seq, le=MAX_SEQ)]), ("event_type", _PlainId),
        ("payload", Any, msgspec.UNSET), ("occurred_at", str | None, None), ("event_id", _PlainId | None, None),
    ], rename=keys, forbid_unknown_fields=True, kw_only=True, gc=False)  # an unmapped key: per-line path
    return msgspec.json.Decoder(record, float_hook=Decimal)  # floats keep their digits, as in `_DECODER`


def _plain_message(raw: bytes, decoder: msgspec.json.Decoder, max_record_bytes: int) -> tuple | None:
    """The message `normalise` would make of a plainly well-formed line; None for any other line."""
    # A line msgspec accepts holds two brackets per level, so only a longer one can be nested too deep.
    if len(raw) > max_record_bytes or (len(raw) > 2 * MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH):
        return None
    try:
        record = decoder.decode(raw)
    except ValueError:  # msgspec's DecodeError, or UnicodeDecodeError: the per-line path says why
        return None
    if not (record.stream_id + record.stream_type + record.event_type + (record.event_id or "")).isprintable():
        return None  # perhaps a control character
    payload = "{}" if record.payload is msgspec.UNSET else _CANONICAL_ENCODER.encode(record.payload).decode()
    return (record.stream_id, record.stream_type, record.seq, record.event_type, payload, record.occurred_at,
            record.event_id)


def _inspect_json_lines(data: bytes, batch_id: str, entry_idx: int, mapping: SourceMapping) -> InspectedBatch:
    """Every line through the fast path, then only the lines it left through the per-line path; a chunk
    of lines at a time, so the driver holds Python objects for one chunk, not for the whole file."""
    raws = _json_lines(data)
    decoder = _plain_decoder(mapping)
    limit = mapping.max_record_bytes
    tables, malformed = [], []
    for start in range(0, len(raws), CHUNK_RECORDS):
        chunk = raws[start:start + CHUNK_RECORDS]
        messages = [_plain_message(raw, decoder, limit) for raw in chunk] if decoder else [None] * len(chunk)
        bad_before = len(malformed)
        for i in _positions_of_none(messages):
            outcome = _normalised(_jsonl_record(chunk[i], mapping), mapping)
            if type(outcome) is tuple:
                messages[i] = outcome
            else:
                malformed.append((start + i + 1, _raw(chunk[i]), str(outcome)))
        lines = range(start + 1, start + len(chunk) + 1)
        if len(malformed) > bad_before:  # the lines that are messages (a message is a non-empty tuple)
            lines, messages = list(compress(lines, messages)), list(filter(None, messages))
        tables.append(_message_table(batch_id, entry_idx, lines, messages))
    return InspectedBatch(pa.concat_tables(tables) if tables else MESSAGE_SCHEMA.empty_table(), malformed)


def _positions_of_none(items: list) -> Iterator[int]:
    """Where `items` holds None, in order (list.index finds each in C: they are few)."""
    position = -1
    while True:
        try:
            position = items.index(None, position + 1)
        except ValueError:
            return
        yield position


def _unlimited_row(reader: Iterator[list[str]]) -> list[str]:
    """`next(reader)` with no field size limit of its own (the default 128 KiB would reject the field, not
    measure the record): the whole file is in memory already, and max_record_bytes bounds each record.
    The limit is the csv module's, for the whole process: lifted for this one row, then put back."""
    before = csv.field_size_limit(sys.maxsize)
    try:
        return next(reader)
    finally:
        csv.field_size_limit(before)


def _csv_records(data: bytes, mapping: SourceMapping) -> Iterator[tuple[int, bytes | str, Any]]:
    text = data.decode("utf-8-sig", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = _unlimited_row(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        raise RejectedFile(f"CSV header cannot be read: {exc}") from None
    if len(set(header)) != len(header) or not all(header):
        raise RejectedFile("CSV header has empty or repeated column names")
    number = 0
    while True:
        try:
            row = _unlimited_row(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            number += 1
            yield number, "", Malformed(f"CSV row cannot be parsed: {exc}")
            continue
        number += 1
        raw = ",".join(row)
        try:
            if len(raw.encode("utf-8", errors="surrogateescape")) > mapping.max_record_bytes:
                raise Malformed(f"record is over max_record_bytes {mapping.max_record_bytes}")
            try:
                raw.encode("utf-8")
            except UnicodeEncodeError:
                raise Malformed("invalid UTF-8") from None
            if len(row) != len(header):
                raise Malformed(f"row has {len(row)} fields, the header has {len(header)}")
            record: dict[str, Any] = {k: (v if v != "" else None) for k, v in zip(header, row)}
            payload = record.get(mapping.payload)
            if isinstance(payload, str):
                record[mapping.payload] = _parse_json_line(payload, MAX_DEPTH - 1)
            yield number, raw, _normalised(record, mapping)
        except Malformed as exc:
            yield number, raw.encode("utf-8", "surrogateescape"), _as_value(exc)


def _value_bytes(value: Any) -> int:
    """One Parquet value's size: its text in UTF-8, as `csv.writer` would write it (null is empty, binary is
    its bytes, a list or struct is its JSON text, any other scalar is `str(value)`)."""
    if value is None:
        return 0
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (dict, list)):
        try:
            value = json.dumps(value, ensure_ascii=False, default=str)
        except RecursionError:  # nested far deeper than MAX_DEPTH: malformed for that reason anyway
            return 0
    elif not isinstance(value, str):
        value = str(value)
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


_ARROW_MEASURED = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
                   pa.types.is_integer)


def _parquet_record_sizes(batch: pa.RecordBatch, records: list[dict]) -> list[int]:
    """Each row's size: what the same values measure as a CSV row, their `_value_bytes` plus one byte between
    columns. Text, binary and integer columns are measured by Arrow (the same numbers, with no Python work per
    value), other columns value by value from `records` (the batch's rows)."""
    sizes = pa.array([max(batch.num_columns - 1, 0)] * batch.num_rows, pa.int64())
    others = []
    for name, column in zip(batch.schema.names, batch.columns):
        if not any(test(column.type) for test in _ARROW_MEASURED):
            others.append(name)
            continue
        if pa.types.is_integer(column.type):
            column = pc.cast(column, pa.string())  # the decimal digits str() writes
        sizes = pc.add(sizes, pc.cast(pc.fill_null(pc.binary_length(column), 0), pa.int64()))
    if not others:
        return sizes.to_pylist()
    return [size + sum(_value_bytes(record.get(name)) for name in others)
            for size, record in zip(sizes.to_pylist(), records)]


def _parquet_records(path: Path, mapping: SourceMapping) -> Iterator[tuple[int, bytes | str, Any]]:
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise RejectedFile(f"Parquet file cannot be read: {type(exc).__name__}: {exc}"[:500]) from None
    nested = any(pa.types.is_nested(f.type) for f in table.schema)
    number = 0
    for batch in table.to_batches(max_chunksize=65_536):
        records = batch.to_pylist()
        for record, size in zip(records, _parquet_record_sizes(batch, records)):
            number += 1
            payload = record.get(mapping.payload)
            try:
                if nested and _too_deep(record, MAX_DEPTH):
                    raise Malformed(TOO_DEEP)
                if size > mapping.max_record_bytes:
                    raise Malformed(f"record is {size} bytes, over max_record_bytes {mapping.max_record_bytes}")
                if isinstance(payload, str):
                    record[mapping.payload] = _parse_json_line(payload, MAX_DEPTH - 1)
                yield number, _raw(json.dumps(record, default=str)), _normalised(record, mapping)
            except Malformed as exc:
                yield number, _raw(json.dumps(record, default=str)), _as_value(exc)


CHUNK_RECORDS = 65_536  # records turned into Python objects at a time, then into Arrow


@dataclass
class InspectedBatch:
    messages: pa.Table
    malformed: list[tuple[int, str, str]] = field(default_factory=list)  # (line, raw, reason)

    @property
    def records(self) -> int:
        return self.messages.num_rows + len(self.malformed)


def inspect_file(path: Path, batch_id: str, entry_idx: int, mapping: SourceMapping,
                 data: bytes | None = None) -> InspectedBatch:
    """Normalise every record of a landing file. Raises RejectedFile when the file is unreadable.
    `data`: its content when the caller has read it already (ingest hashes it); Parquet is read from `path`."""
    fmt = SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise RejectedFile(f"unsupported file type {path.suffix!r} (expected .jsonl, .csv or .parquet)")
    if fmt == "parquet":
        return inspect_records(_parquet_records(path, mapping), batch_id, entry_idx)
    try:
        data = path.read_bytes() if data is None else data
    except OSError as exc:
        raise RejectedFile(f"file cannot be read: {exc.strerror}") from None
    if not data:
        raise RejectedFile("the file is empty (0 bytes): nothing to ingest")
    if fmt == "jsonl":
        return _inspect_json_lines(data, batch_id, entry_idx, mapping)
    return inspect_records(_csv_records(data, mapping), batch_id, entry_idx)


def inspect_json_lines(data: bytes, batch_id: str, entry_idx: int, mapping: SourceMapping) -> InspectedBatch:
    """A JSON Lines batch held in memory, inspected exactly as the same bytes in a landing file."""
    return _inspect_json_lines(data, batch_id, entry_idx, mapping)


def inspect_records(records: Iterable[tuple[int, bytes | str, tuple | Malformed]], batch_id: str,
                    entry_idx: int) -> InspectedBatch:
    """(line, raw text, message or Malformed) of one batch -> its messages table and malformed lines, a
    chunk of messages at a time."""
    tables: list[pa.Table] = []
    lines: list[int] = []
    messages: list[tuple] = []
    malformed: list[tuple[int, str, str]] = []
    for number, raw, message in records:
        if type(message) is tuple:
            lines.append(number)
            messages.append(message)
            if len(messages) == CHUNK_RECORDS:
                tables.append(_message_table(batch_id, entry_idx, lines, messages))
                lines, messages = [], []
        else:
            malformed.append((number, _raw(raw), str(message)))
    tables.append(_message_table(batch_id, entry_idx, lines, messages))
    return InspectedBatch(pa.concat_tables(tables), malformed)


def _message_table(batch_id: str, entry_idx: int, lines: Sequence[int], messages: list[tuple]) -> pa.Table:
    """These messages (each at its line) as archive rows."""
    n = len(lines)
    # Arrow takes the tuples apart itself (a struct array, flattened): no Python list per column
    fields = pa.array(messages, _MESSAGE_FIELDS).flatten()
    return pa.table([pa.repeat(pa.scalar(entry_idx, pa.int64()), n), pa.repeat(pa.scalar(batch_id, pa.string()), n),
                     pa.array(lines, pa.int64()), *fields], schema=MESSAGE_SCHEMA)
