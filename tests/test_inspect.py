"""Inspection: every record becomes a message or a `malformed` row with a reason; files that
cannot be read are rejected whole. The engine's normalisation must agree with the model's."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.inspect import RejectedFile, SourceMapping, inspect_file
from tests.reference_model import normalise as model_normalise

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


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                           max_leaves=6)
records = st.dictionaries(st.sampled_from(["stream_id", "seq", "type", "payload", "occurred_at", "event_id",
                                           "stream_type"]),
                          json_values | st.sampled_from(["", "7", "07", " 7", "acct", "-1", "1.0"]), max_size=7)


@settings(max_examples=300, deadline=None)
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
