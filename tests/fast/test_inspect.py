"""Inspection: every record becomes a message or a `malformed` row with a reason; files that
cannot be read are rejected whole. The engine's normalisation must agree with the model's."""

from __future__ import annotations

import csv
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.engine.normalise import MAX_DEPTH, TOO_DEEP, InspectedBatch, RejectedFile, SourceMapping, inspect_file
from pipelines.engine.sources import load_source
from tests.reference_model import normalise as model_normalise
from tests.profiles import examples

GOOD = '{"stream_id": "acct-1", "seq": 1, "type": "AccountOpened", "payload": {"owner": "ada"}}'

MALFORMED = {
    "invalid JSON": "{bad",
    "NaN": '{"stream_id": "a", "seq": 1, "type": "X", "payload": NaN}',
    "Infinity": '{"stream_id": "a", "seq": 1, "type": "X", "payload": [-Infinity]}',
    "not an object": "[1, 2]",
    "empty line": "   ",
    "missing stream_id": '{"seq": 1, "type": "X"}',
    "empty stream_id": '{"stream_id": "", "seq": 1, "type": "X"}',
    "bool stream_id": '{"stream_id": true, "seq": 1, "type": "X"}',
    "missing seq": '{"stream_id": "a", "type": "X"}',
    "float seq": '{"stream_id": "a", "seq": 1.0, "type": "X"}',
    "bool seq": '{"stream_id": "a", "seq": false, "type": "X"}',
    "seq 1e3": '{"stream_id": "a", "seq": 1e3, "type": "X"}',
    "seq string with spaces": '{"stream_id": "a", "seq": " 3", "type": "X"}',
    "negative seq": '{"stream_id": "a", "seq": -3, "type": "X"}',
    "seq below first_seq": '{"stream_id": "a", "seq": 0, "type": "X"}',
    "seq 2^63": '{"stream_id": "a", "seq": 9223372036854775808, "type": "X"}',
    "missing type": '{"stream_id": "a", "seq": 1}',
    "empty type": '{"stream_id": "a", "seq": 1, "type": ""}',
    "lone surrogate": '{"stream_id": "a\\ud800", "seq": 1, "type": "X"}',
    "deeply nested": '{"stream_id": "a", "seq": 1, "type": "X", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "BOM": "\ufeff" + GOOD,
}


def inspect_lines(tmp_path, lines: list[bytes], name="b1.jsonl", mapping=SourceMapping()):
    path = tmp_path / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return inspect_file(path, path.stem, 1, mapping)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_each_kind_of_malformed_record(tmp_path, case):
    raw = MALFORMED[case].encode("utf-8")
    batch = inspect_lines(tmp_path, [GOOD.encode(), raw, GOOD.replace('"seq": 1', '"seq": 2').encode()])
    assert batch.messages.num_rows == 2 and batch.records == 3
    ((line, text, reason),) = batch.malformed
    assert line == 2 and reason and text == raw[:4096].decode("utf-8", "replace")
    assert model_normalise(raw) is None  # the reference model agrees


def test_invalid_utf8_and_oversized_records(tmp_path):
    mapping = SourceMapping(max_record_bytes=200)
    batch = inspect_lines(tmp_path, [b'{"stream_id": "a\xff", "seq": 1, "type": "X"}',
                                     ('{"stream_id": "a", "seq": 2, "type": "X", "pad": "' + "x" * 300 + '"}').encode(),
                                     GOOD.encode()], mapping=mapping)
    reasons = [reason for _, _, reason in batch.malformed]
    assert "UTF-8" in reasons[0] and "max_record_bytes" in reasons[1] and batch.messages.num_rows == 1


def test_normalised_fields_and_digit_string_seq(tmp_path):
    batch = inspect_lines(tmp_path, [
        b'{"stream_id": 17, "seq": "007", "type": "Deposited", "payload": {"b": 1.50, "a": "\xc3\xa9"}, "event_id": 9}'])
    row = batch.messages.to_pylist()[0]
    assert (row["stream_id"], row["seq"], row["payload"], row["event_id"], row["stream_type"]) == (
        "17", 7, '{"a":"é","b":1.50}', "9", "account")


def test_numbers_are_kept_exactly_never_through_a_binary_float(tmp_path):
    batch = inspect_lines(tmp_path, [
        b'{"stream_id": "a", "seq": 1, "type": "Deposited", "payload": {"amount": 1234567890123456.78, '
        b'"tiny": 1e-7, "big": 1e400, "cents": 2.50}}'])
    payload = batch.messages.to_pylist()[0]["payload"]
    assert payload == '{"amount":1234567890123456.78,"big":1E+400,"cents":2.50,"tiny":1E-7}'
    assert json.loads(payload)["amount"] == 1234567890123456.78  # still valid JSON


def test_source_mapping_nested_and_composite(tmp_path):
    mapping = SourceMapping.from_dict({"name": "order", "stream_id": ["meta.tenant", "meta.id"],
                                       "seq": "meta.version", "event_type": "kind", "payload": "data"})
    batch = inspect_lines(tmp_path, [json.dumps({"meta": {"tenant": "t1", "id": 42, "version": "3"},
                                                 "kind": "OrderPlaced", "data": {"x": 1}}).encode()], mapping=mapping)
    row = batch.messages.to_pylist()[0]
    assert (row["stream_id"], row["seq"], row["event_type"], row["stream_type"]) == ("t1:42", 3, "OrderPlaced", "order")
    with pytest.raises(ValueError, match="unknown source mapping keys"):
        SourceMapping.from_dict({"stream": "x"})


def test_csv_batches(tmp_path):
    path = tmp_path / "b2.csv"
    path.write_text('stream_id,seq,type,payload\nacct-1,1,AccountOpened,"{""owner"":\n ""ab""}"\n'
                    "acct-1,2\nacct-1,x,Deposited,{}\n")
    batch = inspect_file(path, "b2", 1, SourceMapping())
    assert batch.messages.num_rows == 1 and json.loads(batch.messages.to_pylist()[0]["payload"]) == {"owner": "ab"}
    assert [(line, "fields" in reason or "seq" in reason) for line, _, reason in batch.malformed] == [
        (2, True), (3, True)]


def test_parquet_batches_and_unreadable_files(tmp_path):
    path = tmp_path / "b3.parquet"
    pq.write_table(pa.table({"stream_id": ["a", None], "seq": [1, 2], "type": ["X", "X"],
                             "payload": ['{"k": 1}', "{}"]}), path)
    batch = inspect_file(path, "b3", 1, SourceMapping())
    assert batch.messages.num_rows == 1 and batch.malformed[0][0] == 2
    broken = tmp_path / "b4.parquet"
    broken.write_bytes(path.read_bytes()[:40])
    with pytest.raises(RejectedFile, match="Parquet"):
        inspect_file(broken, "b4", 1, SourceMapping())
    with pytest.raises(RejectedFile, match="unsupported"):
        inspect_file(tmp_path / "b5.xml", "b5", 1, SourceMapping())


def _csv_and_parquet(tmp_path, name: str, rows: list[dict]):
    """The same rows as a CSV file and as a Parquet file (seq an int64 column, None an empty CSV field)."""
    columns = list(rows[0])
    csv_path, parquet_path = tmp_path / f"{name}.csv", tmp_path / f"{name}.parquet"
    with csv_path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows([["" if r[c] is None else r[c] for c in columns] for r in rows])
    data = {c: [r[c] for r in rows] for c in columns}
    pq.write_table(pa.table({**data, "seq": pa.array(data["seq"], pa.int64())}), parquet_path)
    return csv_path, parquet_path


def test_an_oversized_parquet_record_is_malformed_as_in_json_lines(tmp_path):
    mapping = SourceMapping(max_record_bytes=1000)
    big = {"stream_id": "a", "seq": 2, "type": "Deposited", "payload": json.dumps({"blob": "x" * 5000})}
    rows = [{**big, "seq": 1, "payload": "{}"}, big, {**big, "seq": 3, "payload": '{"k": 1}'}]
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in big}), path)
    batch = inspect_file(path, "big", 1, mapping)
    assert batch.messages["line"].to_pylist() == [1, 3] and batch.records == 3
    ((line, raw, reason),) = batch.malformed
    assert line == 2 and "over max_record_bytes 1000" in reason
    assert len(raw) == 4096 and raw.startswith('{"stream_id": "a", "seq": 2')  # truncated like a JSON line's
    as_jsonl = {**big, "payload": json.loads(big["payload"])}
    ((_, _, jsonl_reason),) = inspect_lines(tmp_path, [json.dumps(as_jsonl).encode()], mapping=mapping).malformed
    assert "over max_record_bytes 1000" in jsonl_reason


def test_a_parquet_row_measures_what_the_same_csv_row_measures(tmp_path):
    """Each value's UTF-8 text (null is empty) plus one byte between columns: at the limit a row is
    normalised, one byte over it malformed, in CSV and Parquet alike."""
    payload = json.dumps({"t": "é" * 40})  # "é" is 2 bytes of UTF-8: sizes are bytes, not characters
    mapping = SourceMapping(max_record_bytes=len("é-1".encode()) + 1 + 1 + len(payload.encode()) + 0 + 4)
    for stream_id, ok in (("é-1", True), ("é-12", False)):
        rows = [{"stream_id": stream_id, "seq": 1, "type": "X", "payload": payload, "occurred_at": None},
                {"stream_id": "é-1", "seq": 2, "type": "X", "payload": "{}", "occurred_at": None}]
        for path in _csv_and_parquet(tmp_path, f"b-{ok}", rows):
            batch = inspect_file(path, path.stem, 1, mapping)
            assert batch.messages["line"].to_pylist() == ([1, 2] if ok else [2]), path.name
            assert ok or (batch.malformed[0][0] == 1 and "over max_record_bytes" in batch.malformed[0][2])


def test_a_parquet_row_of_every_column_type_is_measured_by_its_values_text(tmp_path):
    at = datetime(2024, 3, 1, 10, 0, tzinfo=timezone.utc)
    row = {"stream_id": "名前-1", "seq": 12, "type": "X", "payload": '{"k": "é"}', "amount": 10.25, "flag": True,
           "at": at, "tags": ["a", "é"], "meta": {"n": 1, "s": "ü"}, "blob": b"\x00\xff", "big": -123456789,
           "nothing": None}
    texts = ["名前-1", "12", "X", '{"k": "é"}', "10.25", "True", str(at), '["a", "é"]', '{"n": 1, "s": "ü"}',
             "", "-123456789", ""]
    size = sum(len(t.encode()) for t in texts) + 2 + len(row) - 1  # the binary's 2 bytes, a byte between columns
    path = tmp_path / "types.parquet"
    pq.write_table(pa.table({k: pa.array([v], pa.string() if v is None else None) for k, v in row.items()}), path)
    assert inspect_file(path, "types", 1, SourceMapping(max_record_bytes=size)).messages.num_rows == 1
    ((line, _, reason),) = inspect_file(path, "types", 1, SourceMapping(max_record_bytes=size - 1)).malformed
    assert line == 1 and reason == f"record is {size} bytes, over max_record_bytes {size - 1}"

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                           max_leaves=6)
records = st.dictionaries(st.sampled_from(["stream_id", "seq", "type", "payload", "occurred_at", "event_id",
                                           "stream_type"]),
                          json_values | st.sampled_from(["", "7", "07", " 7", "acct", "-1", "1.0"]), max_size=7)


@settings(max_examples=examples(300), deadline=None)
@given(records)
def test_engine_and_model_agree_on_any_record(tmp_path_factory, record):
    line = json.dumps(record).encode()
    batch = inspect_lines(tmp_path_factory.mktemp("r"), [line])
    expected = model_normalise(line)
    if expected is None:
        assert batch.messages.num_rows == 0 and len(batch.malformed) == 1
    else:
        got = batch.messages.to_pylist()[0]
        assert {k: got[k] for k in expected} == expected


# Inspection at its edges, in every format: the nesting limit to the level, a CSV field's own line ends,
# null inside a payload, Parquet values JSON cannot hold measured by their text, the bound on a rejection's
# reason. Each is a rule a landing file can reach that the generated tests rarely land exactly on.
def nested(levels: int) -> dict:
    """An object nested exactly `levels` levels (itself level 1), with more brackets than levels: an empty
    array beside each inner object, so that counting brackets alone cannot tell its depth."""
    return {"k": 1} if levels == 1 else {"a": nested(levels - 1), "s": []}


def inspect(path: Path, mapping: SourceMapping = SourceMapping()) -> InspectedBatch:
    return inspect_file(path, path.stem, 1, mapping)


def landing_file(tmp_path: Path, name: str, fmt: str, rows: list[dict]) -> Path:
    """`rows` as a JSON Lines file, or as a CSV or Parquet file (`_csv_and_parquet`) with the payload as
    its JSON text."""
    if fmt == "jsonl":
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    csv_path, parquet_path = _csv_and_parquet(tmp_path, name, [{**r, "payload": json.dumps(r["payload"])} for r in rows])
    return csv_path if fmt == "csv" else parquet_path


def record(payload, seq: int = 1, **more) -> dict:
    return {"stream_id": "a", "seq": seq, "type": "X", "payload": payload, **more}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_record_may_nest_max_depth_levels_and_no_more(tmp_path, fmt):
    """The record is level 1, so its payload may nest MAX_DEPTH - 1 levels, whether it is JSON inside a
    JSON line or JSON text in a CSV or Parquet column."""
    rows = [record(nested(MAX_DEPTH - 1), 1), record(nested(MAX_DEPTH), 2)]
    batch = inspect(landing_file(tmp_path, "deep", fmt, rows))
    assert batch.messages["seq"].to_pylist() == [1]
    assert json.loads(batch.messages["payload"][0].as_py()) == nested(MAX_DEPTH - 1)
    assert [(line, reason) for line, _, reason in batch.malformed] == [(2, TOO_DEEP)]


def test_a_parquet_schema_nested_past_what_parquet_reads_is_rejected_whole(tmp_path):
    """pyarrow reads no schema nested deeper than 100 levels, below MAX_DEPTH: such a file is a rejected
    batch with the reason, never a crash (and no Parquet record reaches the nesting limit)."""
    path = tmp_path / "structs.parquet"
    pq.write_table(pa.table({"stream_id": ["a"], "seq": [1], "type": ["X"], "payload": pa.array([nested(110)])}), path)
    with pytest.raises(RejectedFile, match="too deeply nested"):
        inspect(path)


def test_a_quoted_csv_field_keeps_its_own_line_ends(tmp_path):
    """A quoted field may hold CR LF, LF or CR: they are the field's, not line ends (nor translated)."""
    path = tmp_path / "ends.csv"
    path.write_bytes(b'stream_id,seq,type,payload,occurred_at\r\n'
                     b'a,1,X,"{""note"":\r\n1}","2024-03-01\r\nT10"\r\n'
                     b'a,2,X,{},"2024-03-02\rT10"\r\n')
    batch = inspect(path)
    assert batch.malformed == []
    assert batch.messages["occurred_at"].to_pylist() == ["2024-03-01\r\nT10", "2024-03-02\rT10"]
    assert batch.messages["payload"].to_pylist() == ['{"note":1}', "{}"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_null_and_booleans_inside_a_payload_are_kept_as_json(tmp_path, fmt):
    payload = {"gone": None, "yes": True, "no": False, "list": [None, 1, "x"]}
    # an extra key sends a JSON line down the per-line path, as the other formats always go
    batch = inspect(landing_file(tmp_path, "nulls", fmt, [record(payload, extra="kept out")]))
    assert batch.messages["payload"].to_pylist() == ['{"gone":null,"list":[null,1,"x"],"no":false,"yes":true}']


def test_parquet_lists_and_structs_of_dates_times_and_decimals_are_measured_by_their_text(tmp_path):
    """A list or struct column is measured as its JSON text, with each value JSON cannot hold (a date, a
    timestamp, a decimal) written as its str(): as the same row would measure written out as text."""
    at = datetime(2024, 3, 1, 10, 0, tzinfo=timezone.utc)
    row = {"stream_id": "a", "seq": 1, "type": "X", "payload": "{}",
           "when": [date(2024, 3, 1), date(2024, 3, 2)], "meta": {"at": at, "price": Decimal("10.50")}}
    texts = ["a", "1", "X", "{}", '["2024-03-01", "2024-03-02"]', '{"at": "2024-03-01 10:00:00+00:00", "price": "10.50"}']
    size = sum(len(t.encode()) for t in texts) + len(row) - 1
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({k: [v] for k, v in row.items()}), path)
    assert inspect(path, SourceMapping(max_record_bytes=size)).messages.num_rows == 1
    ((_, _, reason),) = inspect(path, SourceMapping(max_record_bytes=size - 1)).malformed
    assert reason == f"record is {size} bytes, over max_record_bytes {size - 1}"


def test_a_one_column_parquet_row_is_its_value_alone(tmp_path):
    """No separator byte is counted when there is one column: a row exactly at the limit is judged on its
    fields (here: no seq), not on its size."""
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"stream_id": ["abcd"]}), path)
    ((line, _, reason),) = inspect(path, SourceMapping(max_record_bytes=4)).malformed
    assert (line, reason) == (1, "seq is missing")


def test_an_unreadable_parquet_files_reason_is_bounded(tmp_path):
    """The reason names the file (pyarrow's message does) but is cut at 500 characters."""
    folder = tmp_path
    for i in range(4):  # a deep landing path makes pyarrow's message long
        folder = folder / (f"{i}" * 120)
    folder.mkdir(parents=True)
    path = folder / "broken.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(RejectedFile) as rejected:
        inspect(path)
    reason = str(rejected.value)
    assert reason.startswith("Parquet file cannot be read: ") and len(reason) == 500


# The fast path (pipelines/engine/normalise.py, issue 13) decodes a plainly well-formed JSON line straight into its
# fields; any other line takes the per-line path (`_jsonl_record`), which judges it and words the reason.
# Both give the same messages (tests/fast/test_inspect_differential.py); this holds which lines go which way,
# since a fast path that quietly sent every line down the slow one would still give the same store.
PLAIN = [
    {"stream_id": "acct-1", "stream_type": "account", "seq": 1, "type": "AccountOpened",
     "payload": {"owner": "Ada", "limits": [1, 2.50, {"x": None, "ok": True}]},
     "occurred_at": "2024-03-01T10:00:00Z", "event_id": "e-1"},
    {"stream_id": "acct-1", "seq": 2, "type": "Deposited"},  # the optional fields left out
    # a line over 2 * MAX_DEPTH bytes with MAX_DEPTH opening brackets, but nested 3 levels: decoded fast (a
    # shorter line cannot hold more opening brackets than MAX_DEPTH: one per level and one closing each)
    {"stream_id": "acct-2", "seq": 1, "type": "X", "payload": {"a": [[]] * (MAX_DEPTH - 3)}, "event_id": None},
]
TO_THE_PER_LINE_PATH = {
    "an unmapped key": {"stream_id": "a", "seq": 1, "type": "X", "extra": 1},
    "seq as digits": {"stream_id": "a", "seq": "1", "type": "X"},
    "a control character in an id": {"stream_id": "a\u0007", "seq": 1, "type": "X"},
    "an id over the limit": {"stream_id": "é" * 513, "seq": 1, "type": "X"},
    "a seq below first_seq": {"stream_id": "a", "seq": 0, "type": "X"},
    "nesting past the limit": {"stream_id": "a", "seq": 1, "type": "X", "payload": nested(MAX_DEPTH)},
}


def per_line_calls(monkeypatch, lines: list[bytes], mapping: SourceMapping = SourceMapping()):
    """Inspect `lines` as one batch; the lines the per-line path was asked to judge, and the batch."""
    import pipelines.engine.normalise as inspection

    judged, judge = [], inspection._jsonl_record
    monkeypatch.setattr(inspection, "_jsonl_record", lambda raw, m: judged.append(raw) or judge(raw, m))
    batch = inspection.inspect_json_lines(b"".join(line + b"\n" for line in lines), "b7", 7, mapping)
    return judged, batch


RENAMED = {"stream_id": "id", "stream_type": "kind_of", "seq": "n", "event_type": "what", "payload": "body",
           "occurred_at": "at", "event_id": "eid"}


@pytest.mark.parametrize("name, renamed", [("account", False), ("a", False), ("n" * 256, False), ("account", True)])
def test_plainly_well_formed_lines_take_the_fast_path(monkeypatch, name, renamed):
    """Under the default field names or renamed ones (a source whose records say `id`, `n`, `what`…)."""
    rename = RENAMED if renamed else {field: getattr(SourceMapping(), field) for field in RENAMED}
    records = [{rename[k if k != "type" else "event_type"]: v for k, v in r.items()} for r in PLAIN]
    lines = [json.dumps(r).encode() for r in records]
    mapping = SourceMapping.from_dict({**rename, "name": name, "max_record_bytes": max(len(line) for line in lines)})
    judged, batch = per_line_calls(monkeypatch, lines, mapping)
    assert judged == [] and batch.messages["line"].to_pylist() == [1, 2, 3]
    assert set(batch.messages["batch_id"].to_pylist()) == {"b7"}
    assert batch.messages["stream_type"].to_pylist() == ["account", name, name]
    assert batch.messages["payload"][0].as_py() == canonical_payload(PLAIN[0]["payload"])


def canonical_payload(payload) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def test_a_dotted_field_name_is_a_path_never_a_key(monkeypatch):
    """`stream_id = "meta.id"` reads the record's meta object's id: a top-level key named "meta.id" is
    not it (such a mapping has no fast path: every line is judged on the per-line path)."""
    mapping = SourceMapping(stream_id="meta.id")
    lines = [json.dumps({"meta.id": "a", "seq": 1, "type": "X"}).encode(),
             json.dumps({"meta": {"id": "b"}, "seq": 1, "type": "X"}).encode()]
    judged, batch = per_line_calls(monkeypatch, lines, mapping)
    assert judged == lines and batch.messages["stream_id"].to_pylist() == ["b"]
    assert [(line, reason) for line, _, reason in batch.malformed] == [(1, "stream_id is missing")]


@pytest.mark.parametrize("case", sorted(TO_THE_PER_LINE_PATH))
def test_any_other_line_takes_the_per_line_path(monkeypatch, case):
    line = json.dumps(TO_THE_PER_LINE_PATH[case]).encode()
    judged, _ = per_line_calls(monkeypatch, [line])
    assert judged == [line]
    judged, _ = per_line_calls(monkeypatch, [line], SourceMapping(max_record_bytes=len(line) - 1))
    assert judged == [line]  # over the size limit: judged, and malformed for it


def test_a_parquet_struct_payload_is_stored_as_canonical_json(tmp_path):
    """A payload column of struct type: floats by their repr, null/true/false as JSON; a value JSON cannot
    hold (not finite, a date) makes the record malformed with the reason."""
    path = tmp_path / "structs.parquet"
    payloads = [{"x": 1.5, "n": None, "ok": True, "no": False, "d": None},
                {"x": float("inf"), "n": None, "ok": True, "no": False, "d": None},
                {"x": 0.1, "n": None, "ok": False, "no": True, "d": date(2024, 3, 1)}]
    pq.write_table(pa.table({"stream_id": ["a"] * 3, "seq": [1, 2, 3], "type": ["X"] * 3,
                             "payload": pa.array(payloads)}), path)
    batch = inspect(path)
    assert batch.messages["payload"].to_pylist() == ['{"d":null,"n":null,"no":false,"ok":true,"x":1.5}']
    assert [(line, reason) for line, _, reason in batch.malformed] == [
        (2, "payload cannot be stored as JSON: number inf is not finite"),
        (3, "payload cannot be stored as JSON: date is not a JSON value")]


def test_a_landing_file_that_cannot_be_read_is_rejected_with_the_reason(tmp_path):
    with pytest.raises(RejectedFile, match="^file cannot be read: No such file or directory$"):
        inspect(tmp_path / "gone.jsonl")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(RejectedFile, match="^file cannot be read: Is a directory$"):
        inspect(tmp_path / "folder.csv")


def test_no_text_held_in_memory_is_a_batch_of_no_message():
    """A landing file of 0 bytes is set aside (above), but the replay kit's batch is text in memory."""
    from pipelines.engine.normalise import MESSAGE_SCHEMA, inspect_json_lines

    batch = inspect_json_lines(b"", "b1", 1, SourceMapping())
    assert batch.messages.num_rows == 0 and batch.messages.schema == MESSAGE_SCHEMA and batch.malformed == []


def test_a_source_mapping_loads_from_its_file_or_is_the_default(tmp_path):
    path = tmp_path / "source.json"
    assert load_source(path) == SourceMapping()
    path.write_text(json.dumps({"name": "order", "stream_id": ["tenant", "id"], "first_seq": 0}))
    assert load_source(path) == SourceMapping(name="order", stream_id=("tenant", "id"), first_seq=0)
    path.write_text(json.dumps({"stream": "id"}))
    with pytest.raises(ValueError, match=r"unknown source mapping keys: \['stream'\]"):
        load_source(path)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_batch_inspected_a_chunk_at_a_time_is_the_batch_inspected_whole(tmp_path, monkeypatch, fmt):
    """The driver holds Python objects for one chunk of records at a time: chunk boundaries, with malformed
    lines on and beside them, change nothing in the messages, their lines or the malformed rows."""
    import pipelines.engine.normalise as inspect

    good = [{"stream_id": f"s{i % 4}", "seq": i // 4 + 1, "type": "Deposited", "payload": {"amount": i}}
            for i in range(20)]
    path = tmp_path / f"batch.{fmt}"
    if fmt == "jsonl":
        lines = [json.dumps(r) for r in good]
        for at, bad in ((0, "not json"), (4, '{"seq": 1}'), (5, "{"), (11, '{"stream_id": "x", "seq": "a"}')):
            lines.insert(at, bad)
        path.write_text("\n".join(lines) + "\n")
    else:
        rows = [[r["stream_id"], str(r["seq"]), r["type"], json.dumps(r["payload"])] for r in good]
        rows[3][1] = "not a seq"
        rows[9][0] = ""
        with path.open("w", newline="") as f:
            csv.writer(f).writerows([["stream_id", "seq", "type", "payload"], *rows])
    whole = inspect_file(path, "b1", 1, SourceMapping())
    monkeypatch.setattr(inspect, "CHUNK_RECORDS", 3)
    chunked = inspect_file(path, "b1", 1, SourceMapping())
    assert len(whole.malformed) in (2, 4) and whole.messages.num_rows == 20 - (2 if fmt == "csv" else 0)
    assert chunked.messages.to_pylist() == whole.messages.to_pylist()
    assert chunked.malformed == whole.malformed
    assert chunked.messages.schema == whole.messages.schema


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_a_malformed_line_leaves_no_frame_in_a_reference_cycle(tmp_path, suffix):
    """A line's Malformed verdict is kept as a value: with its traceback, its frames and their callers'
    (holding every line of the file) formed a cycle that only a full collection frees, so an inspection
    worker grew by a whole file per file at 10M events (2.7 GiB after four files against 0.7)."""
    import gc

    records = [{"stream_id": "a", "seq": 1, "type": "X", "payload": "{}"}, {"stream_id": "", "seq": "x", "type": "X"},
               {"stream_id": "b", "seq": 1, "type": "X", "payload": "[[["}]
    path = tmp_path / f"b1.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n")
    elif suffix == "csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, ["stream_id", "seq", "type", "payload"])
            writer.writeheader()
            writer.writerows(records)
    else:
        pq.write_table(pa.Table.from_pylist([{k: str(v) for k, v in r.items()} for r in records]), path)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        batch = inspect_file(path, path.stem, 1, SourceMapping())
        assert len(batch.malformed) >= 2
        del batch
        gc.collect()
        frames = [o.f_code.co_name for o in gc.garbage if type(o).__name__ == "frame"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert frames == []
