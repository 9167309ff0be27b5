"""Inspection gives byte for byte what it gave before it was made fast: the live `pipelines.engine.normalise` against
the frozen `tests.inspect_reference`, on the hostile corpus, the bank and shop generators, and generated
JSON Lines (decimals, big integers, nesting, Unicode, escapes, duplicate keys, BOM, CRLF, blank lines,
invalid UTF-8, records too deep or too big), under several source mappings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipelines.engine.normalise as live
import tests.inspect_reference as reference
from demos import shop as shop_generator
from tests.hostile_corpus import build
from tests.profiles import examples
from demos import bank as bank_generator

MAPPINGS = {
    "default": {},
    "first_seq 0, small records": {"first_seq": 0, "max_record_bytes": 160},
    "nested paths": {"stream_id": "meta.id", "seq": "meta.seq", "payload": "body", "event_type": "kind"},
    "composite stream id": {"stream_id": ["tenant", "stream_id"], "stream_id_separator": "/"},
    "source name with a control character": {"name": "acc\tount"},
    "source name over the id limit": {"name": "n" * 1025},
}


def _outcome(module, inspect, mapping: dict):
    """What inspection gives, in plain values: every message row, every malformed row, or the rejection."""
    try:
        batch = inspect(module, module.SourceMapping.from_dict(mapping))
    except module.RejectedFile as exc:
        return "rejected", str(exc)
    return str(batch.messages.schema), batch.messages.to_pylist(), batch.malformed, batch.records


def assert_same(inspect, mapping: dict) -> None:
    assert _outcome(live, inspect, mapping) == _outcome(reference, inspect, mapping)


def assert_same_file(path: Path, mapping: dict) -> None:
    """The file as read by inspection, and as handed over already read (ingest reads it once to hash it)."""
    assert_same(lambda module, m: module.inspect_file(path, path.stem, 7, m), mapping)
    handed_over = _outcome(live, lambda module, m: module.inspect_file(path, path.stem, 7, m, path.read_bytes()),
                           mapping)
    assert handed_over == _outcome(reference, lambda module, m: module.inspect_file(path, path.stem, 7, m), mapping)


def assert_same_lines(data: bytes, mapping: dict) -> None:
    assert_same(lambda module, m: module.inspect_json_lines(data, "b", 7, m), mapping)


@pytest.fixture(scope="module")
def hostile_landing(tmp_path_factory) -> Path:
    landing, outside = tmp_path_factory.mktemp("landing"), tmp_path_factory.mktemp("outside")
    build().write(landing, outside)
    return landing


@pytest.mark.parametrize("mapping", sorted(MAPPINGS))
def test_hostile_corpus(hostile_landing, mapping):
    for path in sorted(hostile_landing.iterdir()):
        assert_same_file(path, MAPPINGS[mapping])


@pytest.mark.parametrize("generate", [bank_generator.generate, shop_generator.generate], ids=["bank", "shop"])
def test_generated_demo_batches(tmp_path, generate):
    config = bank_generator.GeneratorConfig(events=4000, streams=200, batches=2, disorder=0.3, duplicates=0.05,
                                            gaps=0.01, poison=0.05)
    for path in generate(tmp_path, config):
        for mapping in ("default", "first_seq 0, small records"):
            assert_same_file(path, MAPPINGS[mapping])


# --- generated JSON Lines: JSON text built piece by piece, so numbers and escapes stay as written ---

def _quoted(pieces: list[str]) -> str:
    return '"' + "".join(pieces) + '"'


_ESCAPES = st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u00e9", "\\u0000",
                            "\\u001f", "\\u007f", "\\u2028", "\\ud83d\\ude00", "\\ud800", "\\udfff", "\\x", "\\u12"])
_CHARS = st.characters(codec="utf-8", exclude_characters='"\\')  # controls too: raw ones are invalid JSON
_STRING = st.lists(st.one_of(_CHARS, _ESCAPES, st.sampled_from(["\ufeff", "\x7f", "é", "🙂", "\u0301"])),
                   max_size=12).map(_quoted)
_NUMBER = st.one_of(
    st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,22})?([eE][-+]?[0-9]{1,4})?", fullmatch=True),
    st.sampled_from(["0.1", "1.50", "12345678901234567890.123", "-0", "-0.0", "1E400", "1e-400", "9" * 4300,
                     "9" * 4301, "1." + "0" * 4400, "01", "1.", ".5", "NaN", "Infinity", "-Infinity", "+1"]))
_SCALAR = st.one_of(_NUMBER, _STRING, st.sampled_from(["true", "false", "null", "True", "nul"]))
_SPACE = st.sampled_from(["", "", " ", "\t", "  ", "\r", "\xa0"])


def _container(children):
    array = st.tuples(st.lists(children, max_size=4), _SPACE).map(lambda t: "[" + ("," + t[1]).join(t[0]) + "]")
    pairs = st.lists(st.tuples(_STRING, _SPACE, children), max_size=4)
    obj = pairs.map(lambda ps: "{" + ",".join(f"{k}{s}:{s}{v}" for k, s, v in ps) + "}")
    return st.one_of(array, obj)


_VALUE = st.recursive(_SCALAR, _container, max_leaves=12)
_DEEP = st.tuples(st.integers(120, 135), st.sampled_from(["[", '{"a":'])).map(
    lambda t: t[1] * t[0] + "1" + ("]" if t[1] == "[" else "}") * t[0])
_ID = st.one_of(st.text(max_size=20).map(json.dumps),
                st.text(max_size=20).map(lambda s: json.dumps(s, ensure_ascii=False)),
                st.sampled_from(["k" * 1024, "k" * 1025, "é" * 512, "é" * 513, "🙂" * 256, "🙂" * 257]).map(json.dumps),
                st.integers(-5, 10 ** 20).map(str), _VALUE)
_SEQ = st.one_of(st.integers(-3, 40).map(str), st.sampled_from([
    str((1 << 63) - 1), str(1 << 63), "1.0", "1e3", '"007"', '" 12"', '"１２"', '"0x10"', '"-5"', "true", "null",
    '"9223372036854775808"', '"0"', '""']), _VALUE)
_FIELDS = {
    "stream_id": _ID, "seq": _SEQ, "type": _ID, "stream_type": _ID, "event_id": _ID,
    "occurred_at": st.one_of(st.just('"2026-11-01T00:00:00Z"'), st.just("null"), _VALUE),
    "payload": st.one_of(_VALUE, _DEEP, st.just('{"amount": 444.52, "owner": "Ada"}')),
    "meta": st.one_of(st.just('{"id": "m-1", "seq": 2}'), _VALUE), "tenant": _ID, "body": _VALUE, "kind": _ID,
}


_GOOD = {"stream_id": '"acct-1"', "seq": "3", "type": '"Deposited"', "payload": '{"b": 1.50, "a": "x"}',
         "occurred_at": '"2026-11-01T00:00:00Z"', "event_id": '"e-3"'}
_MAPPED_ELSEWHERE = {"nested paths": {"meta": '{"id": "m", "seq": 4}', "body": "[1, 2.50]", "kind": '"K"'},
                     "composite stream id": {"tenant": '"t1"'}}


@st.composite
def _record(draw, mapping: str) -> str:
    """A JSON object text with the fields `mapping` reads: usually all of them, often with values of every
    kind, sometimes one missing, repeated, or joined by a field no mapping reads."""
    good = {**_GOOD, **_MAPPED_ELSEWHERE.get(mapping, {})}
    # Hypothesis favours the first of `sampled_from`: here the usual case
    fate = st.sampled_from(["kept"] * 9 + ["changed", "changed", "missing"])
    pairs = [(k, draw(_FIELDS[k]) if f == "changed" else v) for k, v in good.items()
             if (f := draw(fate)) != "missing"]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        key = draw(st.sampled_from(sorted(_FIELDS)))
        pairs.insert(draw(st.integers(0, len(pairs))), (key, draw(_FIELDS[key])))  # duplicate keys: the last counts
    space = draw(_SPACE)
    return "{" + ("," + space).join(f'"{k}":{space}{v}' for k, v in pairs) + "}"


@st.composite
def _json_lines(draw, mapping: str) -> bytes:
    line = st.one_of(_record(mapping), _record(mapping), _record(mapping), _VALUE, _SPACE)
    lines = [draw(line).encode("utf-8", "surrogatepass") for _ in range(draw(st.integers(1, 8)))]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):  # damage: a byte cut out, a stray byte, invalid UTF-8, a BOM
        i = draw(st.integers(0, len(lines) - 1))
        at = draw(st.integers(0, len(lines[i])))
        junk = draw(st.sampled_from([b"", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\x00", b"}", b'"', b"\r"]))
        lines[i] = lines[i][:at] + junk + lines[i][at + 1:]
    ends = [draw(st.sampled_from([b"\n", b"\n", b"\n", b"\r\n", b"\n\n"])) for _ in lines]
    head = draw(st.sampled_from([b"", b"", b"\xef\xbb\xbf"]))
    tail = draw(st.sampled_from([b"", b"", b"\n", b"{"]))
    return head + b"".join(line + end for line, end in zip(lines, ends)) + tail


_MAPPED_LINES = st.sampled_from(sorted(MAPPINGS)).flatmap(lambda name: st.tuples(st.just(name), _json_lines(name)))


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mapped_lines=_MAPPED_LINES)
def test_generated_json_lines(mapped_lines):
    mapping, data = mapped_lines
    assert_same_lines(data, MAPPINGS[mapping])


def test_generated_json_lines_as_files(tmp_path):
    """The same bytes as a landing file (read from disk, BOM and all) and in memory agree as well."""
    lines = [b'\xef\xbb\xbf{"stream_id": "a", "seq": 1, "type": "X", "payload": {"n": 0.10}}\r',
             b"", b"  ", b'{"stream_id": "a", "seq": 2, "type": "X", "payload": 12345678901234567890.123}',
             b'{"stream_id": "a\xff", "seq": 3, "type": "X"}']
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for mapping in MAPPINGS.values():
        assert_same_file(path, mapping)


def _line(**fields) -> str:
    """A record line with the good fields, some replaced (None: left out) by raw JSON text."""
    merged = {**_GOOD, **fields}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in merged.items() if v is not None) + "}"


# the edges of what the fast path takes, each beside what it must leave to the per-line path
EDGES = [
    _line(), " \t" + _line() + " ", _line(payload=None), _line(payload="null"), _line(payload='"text"'),
    _line(payload='{"b": 1, "a": 2, "a": 3}'), _line(payload='{"é": 1, "z": 2, "Z": 3, "😀": 4, "\\uffff": 5}'),
    _line(payload="[0.1, 0.10, 1E400, 1e-400, -0.0, -0, 1.0E+2, 123456789012345678901234567890, "
                  "12345678901234567890.123]"),
    _line(payload="9" * 4300), _line(payload="9" * 4301),
    _line(payload='"\\u2028\\u0000\\u001f\\u007f\\b\\f\\n\\r\\t\\/\\"\\\\"'),
    _line(payload='"\\ud83d\\ude00"'), _line(payload='"\\ud800"'), _line(payload='"\\udc00\\ud800"'),
    *[_line(payload="[" * depth + "]" * depth) for depth in (126, 127, 128)],
    *[_line(payload='{"a":' * depth + "1" + "}" * depth) for depth in (126, 127, 128)],
    *[_line(seq=seq) for seq in ('"1"', "1.0", "true", "0", "-0", "1e3", str((1 << 63) - 1), str(1 << 63), "null")],
    *[_line(event_id=v) for v in ("9", '""', "null", "true", '"\\u0007"', '"e\\u0085"')],
    *[_line(stream_type=v) for v in ("null", '""', '"shop"', '"s\\u007f"', "1")],
    *[_line(occurred_at=v) for v in ("5", "null", '""', '"\\ud800"')],
    *[_line(stream_id=json.dumps(v)) for v in ("k" * 256, "k" * 257, "🙂" * 256, "🙂" * 257, "é" * 512, "é" * 513,
                                              "a\u0001", "a\u0085", "a\u00a0", "a\u200f", "")],
    _line(stream_id="17"), _line(type='"\\u0000"'), _line(type="[]"),
    '{"stream\\u005fid": "a", "seq": 1, "type": "X"}', '{"stream_id": "a", "stream_id": 5, "seq": 1, "type": "X"}',
    '{"stream_id": 5, "stream_id": "a", "seq": 1, "type": "X"}', '{"stream_id": "a", "seq": 1, "type": "X", "x": 1}',
    '{"stream_id": "a", "seq": 1, "type": "X", "x": "\\ud800"}', '{"stream_id": "a", "seq": 1, "type": "X"} ',
    '{"stream_id": "a", "seq": 1, "type": "X"}\x00', "\ufeff" + _line(),
]


@pytest.mark.parametrize("mapping", sorted(MAPPINGS))
def test_fast_path_edges(mapping):
    data = b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in EDGES)
    assert_same_lines(data, MAPPINGS[mapping])
    for max_record_bytes in (len(_line().encode()) - 1, len(_line().encode())):  # the size limit, both sides
        assert_same_lines(data, {**MAPPINGS[mapping], "max_record_bytes": max_record_bytes})
