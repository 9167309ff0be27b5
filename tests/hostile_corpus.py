"""A seeded generator of hostile input: bad records and bad files, each with what it must end as.

Nothing here is stored as a blob: `build(seed)` makes the corpus, `Corpus.write(landing, outside)` puts
it in a landing folder. Every case is one record (a line of JSON Lines, a record of CSV, a row of
Parquet) or one whole file, and carries its expected end:

- ``("malformed", reason substring)``: a `malformed` error row at that file's batch and line;
- ``("rejected", reason substring)``: the file set aside as a rejected batch with that reason;
- ``("normalised", "")``: a good record (mixed in between the bad ones), archived and projected.

Good records are also kept as JSON Lines (`Corpus.good_lines`), so the reference model can project
them and the views can be compared with the engine's.
"""

from __future__ import annotations

import csv
import io
import json
import random
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

TEN_MB = 10 << 20
BOM = b"\xef\xbb\xbf"

# Stream ids that are valid (so they must be processed) but hostile to anything that pastes values into SQL
# or compares text loosely: quotes, semicolons, SQL, Unicode in two normal forms, bidi text, 1 KiB exactly.
HOSTILE_GOOD_IDS = [
    "'; DROP TABLE accounts; --",
    'Robert"); DELETE FROM inorder.watermarks; --',
    "a' OR '1'='1",
    "x;y;z",
    "%_*?[]\\",
    unicodedata.normalize("NFC", "café-ü"),
    unicodedata.normalize("NFD", "café-ü"),  # looks the same, is another stream: ids are compared exactly
    "\u202egnp.exe",
    "🙂 名前 ñ",
    "k" * 1024,
]


@dataclass(frozen=True)
class Case:
    file: str  # landing file name
    line: int | None  # 1-based line / CSV record / Parquet row; None for a whole-file case
    end: str  # "malformed" | "rejected" | "normalised"
    reason: str  # a substring of the stored reason ("" for normalised)
    what: str  # which hostile kind this is


@dataclass
class Corpus:
    files: dict[str, bytes] = field(default_factory=dict)  # written into the landing folder
    cases: list[Case] = field(default_factory=list)
    good_lines: dict[str, list[str]] = field(default_factory=dict)  # file name → its good records as JSON Lines
    symlinks: dict[str, str] = field(default_factory=dict)  # landing name → file name outside the landing folder
    outside: dict[str, bytes] = field(default_factory=dict)  # files outside the landing folder (never read)
    changed: dict[str, bytes] = field(default_factory=dict)  # files to rewrite after the first run

    def write(self, landing: Path, outside: Path) -> None:
        outside.mkdir(parents=True, exist_ok=True)
        for name, data in self.outside.items():
            (outside / name).write_bytes(data)
        for name, data in self.files.items():
            (landing / name).write_bytes(data)
        for name, target in self.symlinks.items():
            (landing / name).symlink_to(outside / target)

    def bad(self) -> list[Case]:
        return [c for c in self.cases if c.end != "normalised"]


def record(stream: str, seq, event_type: str = "Deposited", payload=None, **extra) -> dict:
    out = {"stream_id": stream, "seq": seq, "type": event_type,
           "payload": {"amount": 10.5} if payload is None else payload,
           "occurred_at": "2024-03-01T10:00:00+00:00", "event_id": f"{stream[:40]}-{seq}"}
    out.update(extra)
    return out


def good_stream(stream: str, events: int) -> list[dict]:
    """AccountOpened then deposits and a withdrawal, seq 1.., all valid for the bank views."""
    out = [record(stream, 1, "AccountOpened", {"owner": "ada"})]
    for seq in range(2, events + 1):
        kind = "Withdrawn" if seq % 4 == 0 else "Deposited"
        out.append(record(stream, seq, kind, {"amount": seq + 0.25}))
    return out


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


# --------------------------------------------------------------------------- bad JSON Lines records
# Each maker: (rng, a valid template record) -> (raw line bytes, reason substring, kind)

def _nested(rng: random.Random) -> str:
    depth = rng.choice([129, 130, 200, 600, 1000, 5000, 100_000])
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def _bad_seq(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice([
        ("1e3", "seq must be an integer", "seq 1e3"),
        ("9223372036854775808", "out of range", "seq 2^63"),
        ('"9223372036854775808"', "out of range", "seq \"2^63\""),
        ("18446744073709551616", "out of range", "seq 2^64"),
        ("-1", "below first_seq", "negative seq"),
        ("-9223372036854775809", "below first_seq", "seq below -2^63"),
        ("0", "below first_seq", "seq 0"),
        ("1.0", "seq must be an integer", "float seq"),
        ("2.5", "seq must be an integer", "float seq"),
        ("true", "seq must be an integer", "bool seq"),
        ("false", "seq must be an integer", "bool seq"),
        ('"  12 "', "seq must be an integer", "seq string with spaces"),
        ('"1 2"', "seq must be an integer", "seq string with spaces"),
        ('"１２"', "seq must be an integer", "seq full-width digits"),
        ('"0x10"', "seq must be an integer", "seq hex string"),
        ('"-5"', "seq must be an integer", "seq negative string"),
        ('""', "seq must be an integer", "seq empty string"),
        ("null", "seq is missing", "seq null"),
        ("[1]", "seq must be an integer", "seq list"),
        ('{"n": 1}', "seq must be an integer", "seq object"),
    ])


def _with(rng: random.Random, template: dict, key: str, raw_value: str) -> bytes:
    """The template with one field's JSON text put in verbatim (so any text can go in), at a random place."""
    fields = [f"{dumps(k)}: {dumps(v)}" for k, v in template.items() if k != key]
    fields.insert(rng.randint(0, len(fields)), f"{dumps(key)}: {raw_value}")
    return ("{" + ", ".join(fields) + "}").encode("utf-8", "surrogatepass")


def _bad_stream_id(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice([
        ('"acct\\u0000x"', "control character U+0000", "NUL in stream id"),
        ('"acct\\nx"', "control character U+000A", "newline in stream id"),
        ('"acct\\r\\nx"', "control character U+000D", "CRLF in stream id"),
        ('"\\tacct"', "control character U+0009", "tab in stream id"),
        ('"acct\\u007f"', "control character U+007F", "DEL in stream id"),
        ('"\\u001b[31mred"', "control character U+001B", "ANSI escape in stream id"),
        (dumps("x" * 10_240), "over the 1024-byte limit", "10 KB stream id"),
        (dumps("é" * 513), "over the 1024-byte limit", "1026-byte stream id"),
        ('"acct\\ud800"', "surrogate", "lone surrogate in stream id"),
        ('"\\udfff"', "surrogate", "lone surrogate in stream id"),
        ('""', "stream_id is empty", "empty stream id"),
        ("null", "stream_id is missing", "null stream id"),
        ("true", "stream_id must be a string", "bool stream id"),
        ("1.5", "stream_id must be a string", "float stream id"),
        ('["a"]', "stream_id must be a string", "list stream id"),
        ('{"id": "a"}', "stream_id must be a string", "object stream id"),
    ])


def bad_jsonl_record(rng: random.Random, template: dict) -> tuple[bytes, str, str]:
    kind = rng.randrange(16)
    text = dumps(template).encode()
    if kind == 0:
        whole = dumps(template)
        return whole[:rng.randint(1, len(whole) - 1)].encode(), "invalid JSON", "truncated JSON"
    if kind == 1:
        bad = rng.choice([b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
        return text.replace(b'"stream_id": "', b'"stream_id": "' + bad, 1), "invalid UTF-8", "invalid UTF-8"
    if kind == 2:
        return BOM + text, "invalid JSON", "BOM in the middle of a file"
    if kind == 3:
        return _with(rng, template, "payload", _nested(rng)), "nested deeper than 128", "deeply nested payload"
    if kind == 4:
        return _with(rng, template, "junk", _nested(rng)), "nested deeper than 128", "deeply nested unmapped field"
    if kind == 5:
        token = rng.choice(["NaN", "Infinity", "-Infinity"])
        return (_with(rng, template, "payload", f'{{"amount": {token}}}'), "is not a JSON number",
                f"{token.lstrip('-')} in payload")
    if kind in (6, 7, 8):
        raw, reason, what = _bad_seq(rng)
        return _with(rng, template, "seq", raw), reason, what
    if kind in (9, 10):
        raw, reason, what = _bad_stream_id(rng)
        return _with(rng, template, "stream_id", raw), reason, what
    if kind == 11:
        return rng.choice([
            (_with(rng, template, "type", '""'), "type must be a non-empty string", "empty type"),
            (_with(rng, template, "type", '"Deposited\\n"'), "type contains the control character", "newline in type"),
            (_with(rng, template, "type", "7"), "type must be a non-empty string", "number type"),
            (_with(rng, template, "event_id", '"e\\u0000"'), "event_id contains the control character", "NUL event id"),
            (_with(rng, template, "event_id", dumps("e" * 2000)), "1024-byte limit", "2 KB event id"),
            (_with(rng, template, "stream_type", '""'), "stream_type must be a non-empty string", "empty stream type"),
            (_with(rng, template, "occurred_at", "17"), "occurred_at must be a string", "number occurred_at"),
            (_with(rng, template, "payload", '{"note": "\\ud83d"}'), "surrogate", "lone surrogate in payload"),
        ])
    if kind == 12:
        return rng.choice([
            (b"[1, 2, 3]", "must be a JSON object", "array record"),
            (b'"just text"', "must be a JSON object", "string record"),
            (b"42", "must be a JSON object", "number record"),
            (b"null", "must be a JSON object", "null record"),
            (b"", "empty line", "empty line"),
            (b" \t ", "empty line", "blank line"),
        ])
    if kind == 13:
        raw = text.replace(b'"stream_id": "', b'"stream_id": "\x00', 1)  # a raw NUL byte, not an escape
        return raw, "invalid JSON", "raw NUL byte in stream id"
    if kind == 14:
        big = "9" * rng.choice([4301, 6000])  # more digits than Python parses as an int
        return _with(rng, template, "payload", f'{{"amount": {big}}}'), "invalid JSON", "4300+ digit number"
    drop = rng.choice(["stream_id", "seq", "type"])
    return (dumps({k: v for k, v in template.items() if k != drop}).encode(), f"{drop} is missing",
            f"missing {drop}")


def ten_mb_line(rng: random.Random, template: dict) -> bytes:
    return _with(rng, template, "payload", dumps({"blob": "x" * TEN_MB}))


# --------------------------------------------------------------------------- builders per file

def _mixed(rng: random.Random, corpus: Corpus, name: str, streams: list[str], events: int, bad: int,
           make_bad: Callable[[random.Random, dict], tuple[object, str, str]]) -> list[tuple[object, dict | None]]:
    """Good records of `streams` (in seq order per stream) with `bad` bad ones interleaved at random.
    Returns [(bad raw or the good record, None or the good record)] in file order, and records the cases."""
    good = [r for s in streams for r in good_stream(s, events)]
    templates = good or good_stream("ghost", events)  # an all-bad file still needs something to spoil
    rng.shuffle(good)  # streams interleave...
    good.sort(key=lambda r: r["seq"])  # ...but each stream keeps its seq order (no gaps, nothing pending)
    items: list[tuple[object, dict | None]] = [(r, r) for r in good]
    for _ in range(bad):
        items.insert(rng.randint(0, len(items)), (None, None))
    out, lines = [], []
    for line, (raw, good_record) in enumerate(items, start=1):
        if good_record is None:
            raw, reason, what = make_bad(rng, rng.choice(templates))
            corpus.cases.append(Case(name, line, "malformed", reason, what))
        else:
            corpus.cases.append(Case(name, line, "normalised", "", "good record"))
            lines.append(dumps(good_record))
        out.append((raw, good_record))
    corpus.good_lines[name] = lines
    return out


def _jsonl(rng: random.Random, corpus: Corpus, name: str, streams: list[str], bad: int, big: int = 0) -> None:
    def make_bad(rng, template):
        nonlocal big
        if big:
            big -= 1
            return ten_mb_line(rng, template), "over max_record_bytes", "10 MB line"
        return bad_jsonl_record(rng, template)

    items = _mixed(rng, corpus, name, streams, 4, bad, make_bad)
    raws = [raw if isinstance(raw, bytes) else dumps(raw).encode() for raw, _ in items]
    corpus.files[name] = BOM + b"\n".join(raws) + b"\n"  # a BOM at the start of a file is accepted


CSV_COLUMNS = ["stream_id", "seq", "type", "payload", "occurred_at", "event_id"]


def _csv_row(values: list) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue().encode("utf-8", "surrogatepass")


def bad_csv_record(rng: random.Random, template: dict) -> tuple[bytes, str, str]:
    row = [template["stream_id"], str(template["seq"]), template["type"], dumps(template["payload"]),
           template["occurred_at"], template["event_id"]]
    kind = rng.randrange(10)
    if kind == 0:
        return _csv_row(row[:rng.randint(1, 5)]), "fields, the header has 6", "CSV row with missing columns"
    if kind == 1:
        return _csv_row(row + ["extra"]), "7 fields, the header has 6", "CSV row with an extra column"
    if kind == 2:
        return _csv_row(row).replace(row[0].encode(), row[0].encode() + b"\xff", 1), "invalid UTF-8", "invalid UTF-8"
    if kind == 3:
        row[0] = row[0] + rng.choice(["\n", "\r\n", "\x00", "\x1b"])  # quoted: an embedded newline or control
        return _csv_row(row), "control character", "CSV stream id with an embedded newline or control character"
    if kind == 4:
        row[1] = rng.choice(["  12 ", "1e3", "-1", "1.0", "true", "２", "0"])
        return _csv_row(row), "seq", "CSV bad seq"
    if kind == 5:
        row[3] = rng.choice(["{not json", '{"amount": NaN}', "[" * 300 + "]" * 300, '{"a": 1'])
        return _csv_row(row), "JSON", "CSV bad payload"
    if kind == 6:
        row[0] = ""
        return _csv_row(row), "stream_id is missing", "CSV empty stream id"
    if kind == 7:
        row[0] = "s" * 5000
        return _csv_row(row), "1024-byte limit", "CSV 5 KB stream id"
    if kind == 8:
        row[2] = ""
        return _csv_row(row), "type must be a non-empty string", "CSV empty type"
    row[3] = '{"amount":\n 1, "deep": ' + "[[]]}"  # valid JSON over two lines...
    row[1] = str(-template["seq"])  # ...but a negative seq
    return _csv_row(row), "seq must be an integer", "CSV negative seq with an embedded newline in the payload"


def _csv(rng: random.Random, corpus: Corpus, name: str, streams: list[str], bad: int) -> None:
    big_done = False

    def make_bad(rng, template):
        nonlocal big_done
        if not big_done:
            big_done = True
            return (_csv_row([template["stream_id"], "2", "Deposited", dumps({"blob": "x" * TEN_MB}), "", ""]),
                    "over max_record_bytes", "CSV 10 MB field")
        return bad_csv_record(rng, template)

    items = _mixed(rng, corpus, name, streams, 3, bad, make_bad)
    body = []
    for raw, good in items:
        if good is not None:  # good rows carry a payload spread over two lines (an embedded newline)
            payload = dumps(good["payload"]).replace(", ", ",\n ").replace("{", "{\n", 1)
            raw = _csv_row([good["stream_id"], str(good["seq"]), good["type"], payload, good["occurred_at"],
                            good["event_id"]])
        body.append(raw)
    # last: an unterminated quote swallows the rest of the file into one record, which is then malformed
    body.append(b'late,9,Deposited,{},2024-03-01,"e-1\nlost,1,Deposited,{},,\n')
    corpus.cases.append(Case(name, len(items) + 1, "malformed", "event_id contains the control character U+000A",
                             "CSV unterminated quote"))
    corpus.files[name] = BOM + _csv_row(CSV_COLUMNS) + b"".join(body)


def _parquet_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _parquet(rng: random.Random, corpus: Corpus, name: str, streams: list[str], bad: int) -> None:
    bad_rows = [
        ({"stream_id": None}, "stream_id is missing", "Parquet null stream id"),
        ({"seq": None}, "seq is missing", "Parquet null seq"),
        ({"seq": -7}, "below first_seq", "Parquet negative seq"),
        ({"type": None}, "type must be a non-empty string", "Parquet null type"),
        ({"payload": "{oops"}, "invalid JSON", "Parquet payload not JSON"),
        ({"payload": '{"a": Infinity}'}, "not a JSON number", "Parquet Infinity payload"),
        ({"payload": "[" * 200 + "]" * 200}, "nested deeper than 128", "Parquet deep payload"),
        ({"stream_id": "a\x00b"}, "control character U+0000", "Parquet NUL in stream id"),
        ({"stream_id": "a\nb"}, "control character U+000A", "Parquet newline in stream id"),
    ]

    def make_bad(rng, template):
        change, reason, what = rng.choice(bad_rows)
        return {**template, "payload": dumps(template["payload"]), **change}, reason, what

    items = _mixed(rng, corpus, name, streams, 3, bad, make_bad)
    rows = [raw if good is None else {**good, "payload": dumps(good["payload"])} for raw, good in items]
    columns = {c: [r[c] for r in rows] for c in CSV_COLUMNS}
    corpus.files[name] = _parquet_bytes(pa.table({**columns, "seq": pa.array(columns["seq"], pa.int64())}))


def _all_bad_parquets(corpus: Corpus, rows: int) -> None:
    name = "wrong-schema.parquet"  # the source's columns are not there at all
    corpus.files[name] = _parquet_bytes(pa.table({"id": [f"w-{i}" for i in range(rows)],
                                                  "version": list(range(1, rows + 1)), "kind": ["X"] * rows}))
    corpus.cases += [Case(name, i, "malformed", "stream_id is missing", "Parquet wrong schema")
                     for i in range(1, rows + 1)]
    name = "wrong-types.parquet"  # seq is a float column, occurred_at a timestamp
    corpus.files[name] = _parquet_bytes(pa.table({
        "stream_id": [f"t-{i}" for i in range(rows)], "seq": [float(i) for i in range(1, rows + 1)],
        "type": ["Deposited"] * rows}))
    corpus.cases += [Case(name, i, "malformed", "seq must be an integer", "Parquet float seq column")
                     for i in range(1, rows + 1)]


def _rejected_files(rng: random.Random, corpus: Corpus) -> None:
    good = dumps(good_stream("never-read", 1)[0]).encode() + b"\n"
    parquet = _parquet_bytes(pa.table({"stream_id": ["p"], "seq": [1], "type": ["AccountOpened"]}))
    files = {
        "empty.jsonl": (b"", "empty", "empty file"),
        "truncated.parquet": (parquet[:rng.randint(8, len(parquet) - 8)], "Parquet file cannot be read",
                              "truncated Parquet"),
        "not-parquet.parquet": (bytes(rng.getrandbits(8) for _ in range(512)), "Parquet file cannot be read",
                                "random bytes as Parquet"),
        "dup-header.csv": (b"stream_id,seq,seq,type\na,1,1,X\n", "header has empty or repeated",
                           "CSV header with a repeated column"),
        "notes.txt": (good, "unsupported file type", "unsupported file type"),
        "base.csv": (b"stream_id,seq,type\nbase-0,9,Deposited\n", "already taken",
                     "second file claiming a taken batch id"),
    }
    for name, (data, reason, what) in files.items():
        corpus.files[name] = data
        corpus.cases.append(Case(name, None, "rejected", reason, what))
    corpus.outside["secret.jsonl"] = good
    corpus.symlinks["link-outside.jsonl"] = "secret.jsonl"
    corpus.cases.append(Case("link-outside.jsonl", None, "rejected", "outside the landing folder",
                             "symlink pointing outside the landing folder"))


FIRST_RUN = ("base.jsonl", "changed.jsonl")  # ingested before the hostile run


def build(seed: int = 20260101) -> Corpus:
    """The corpus: ≥1,000 bad records and files. `FIRST_RUN` files are clean and go in first; after that
    run, `changed` holds the new content of a file that was already ingested."""
    rng = random.Random(seed)
    corpus = Corpus()
    base = [r for s in ("base-0", "base-1") for r in good_stream(s, 3)]
    corpus.files["base.jsonl"] = "".join(dumps(r) + "\n" for r in base).encode()
    corpus.good_lines["base.jsonl"] = [dumps(r) for r in base]
    original = good_stream("chg", 2)
    corpus.files["changed.jsonl"] = "".join(dumps(r) + "\n" for r in original).encode()
    corpus.good_lines["changed.jsonl"] = [dumps(r) for r in original]
    corpus.changed["changed.jsonl"] = "".join(dumps(r) + "\n" for r in good_stream("chg", 5)).encode()
    corpus.cases += [Case(n, i, "normalised", "", "good record") for n in FIRST_RUN
                     for i in range(1, len(corpus.good_lines[n]) + 1)]
    corpus.cases.append(Case("changed.jsonl", None, "rejected", "changed after it was ingested",
                             "batch file changed after it was ingested"))

    jsonl_ids = [f"j-{i}" for i in range(6)] + HOSTILE_GOOD_IDS
    _jsonl(rng, corpus, "a..b mixed 'q'; DROP TABLE accounts; --.jsonl", jsonl_ids, bad=760, big=2)
    _jsonl(rng, corpus, "--all bad.jsonl", [], bad=25)
    _csv(rng, corpus, "ünïcödé 名前.csv", [f"c-{i}" for i in range(5)] + ["c'; DROP TABLE x;--"], bad=110)
    _parquet(rng, corpus, "-leading-dash.parquet", [f"p-{i}" for i in range(4)], bad=45)
    _all_bad_parquets(corpus, 40)
    _rejected_files(rng, corpus)
    return corpus
