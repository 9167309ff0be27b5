"""Hostile input (tests/hostile_corpus.py) through the real engine: every bad record ends as a
`malformed` row with its line and reason, every bad file as a rejected batch with its reason; the run
goes on, the good records of mixed batches are processed exactly as the reference model processes
them, and nothing else in the store changes."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest

from assets import build_layer
from assets.tags import RANGE_END_TAG, RANGE_START_TAG
from pipelines.engine.ingest import archive_path, batch_id_of, ingest_landing, new_landing_files
from pipelines.engine.normalise import MAX_DEPTH, SourceMapping, inspect_file
from pipelines.facade import ingest_batches, run
from pipelines.observe.status import format_status, read_status
from pipelines.store.database import Home, Store
from pipelines.view import Column, SqlType, Table, View
from resources import HomeResource, SparkResource
from tests.harness import assert_conserved, assert_same_store, read_store, without
from tests.hostile_corpus import FIRST_RUN, Corpus, build
from tests.reference_model import Entry, run_model
from tests.reference_model import normalise as model_normalise
from tests.domains import BANK_VIEWS

T1 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
T2 = datetime(2026, 1, 5, 9, 5, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build()


def test_the_corpus_is_big_and_varied(corpus):
    bad = corpus.bad()
    assert len(bad) >= 1000
    assert sum(c.end == "rejected" for c in bad) >= 8 and sum(c.end == "normalised" for c in corpus.cases) >= 80
    assert len({c.what for c in bad}) >= 60
    assert build().files == corpus.files  # seeded: the same corpus every time


def _file_lines(corpus: Corpus, name: str) -> list[bytes]:
    data = corpus.files[name]
    lines = data.split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


def test_every_bad_jsonl_record_is_malformed_for_the_model_too(corpus):
    """The reference model (its own inspect step) agrees line by line on the JSON Lines files."""
    for name in corpus.files:
        if not name.endswith(".jsonl") or name in FIRST_RUN or name == "empty.jsonl":
            continue
        lines = _file_lines(corpus, name)
        lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
        for case in (c for c in corpus.cases if c.file == name):
            verdict = model_normalise(lines[case.line - 1])
            assert (verdict is not None) == (case.end == "normalised"), (case, lines[case.line - 1][:200])


def _outcomes(con: duckdb.DuckDBPyConnection, home: Home) -> dict[tuple[str, int | None], tuple[str, str]]:
    """(file name, line or None) → (end, reason) as the store has it."""
    out: dict[tuple[str, int | None], tuple[str, str]] = {}
    files = con.execute("SELECT file_name, batch_id, entry_idx, status, reason FROM inorder.ingest_log "
                        "WHERE kind = 'batch' ORDER BY entry_idx").fetchall()
    for name, batch_id, entry_idx, status, reason in files:
        if status == "rejected":
            out[(name, None)] = ("rejected", reason)
            continue
        for line, why in con.execute("SELECT line, reason FROM inorder.errors WHERE kind = 'malformed' "
                                     "AND batch_id = ?", [batch_id]).fetchall():
            assert (name, line) not in out
            out[(name, line)] = ("malformed", why)
        for line in pq.read_table(archive_path(home, entry_idx), columns=["line"])["line"].to_pylist():
            assert (name, line) not in out
            out[(name, line)] = ("normalised", "")
    return out


def _model_entries(corpus: Corpus, names: list[str], t: datetime) -> list[Entry]:
    """The archived files as the model sees them: JSON Lines as they are, other formats as their good
    records in JSON Lines with a stand-in malformed line for each bad record (same line numbers)."""
    entries = []
    for name in sorted(names):
        cases = {c.line: c for c in corpus.cases if c.file == name and c.line is not None}
        if not cases:
            continue  # a rejected file: never projected
        if name.endswith(".jsonl"):
            lines = _file_lines(corpus, name)
        else:
            good = iter(corpus.good_lines.get(name, []))
            lines = [next(good) if cases[i].end == "normalised" else "{malformed" for i in range(1, len(cases) + 1)]
        entries.append(Entry("batch", batch_id_of(Path(name)), t.timestamp(), lines=lines))
    return entries


def _snapshot(home: Home) -> dict[str, list[dict]]:
    """Every row of every table of the store."""
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        tables = [f"inorder.{t}" for t in ("ingest_log", "errors", "batches", "watermarks", "pending", "gaps")]
        tables += [f'"{t.name}"' for v in BANK_VIEWS for t in v.tables]
        out = {}
        for table in tables:
            cursor = con.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cursor.description]
            out[table] = [dict(zip(names, row)) for row in cursor.fetchall()]
        return out
    finally:
        con.close()


def _row(row: dict) -> tuple:
    def hashable(value):  # a MAP column (ingest_log.stream_types) reads as a dict
        return tuple(sorted(value.items())) if isinstance(value, dict) else value

    return tuple(sorted((k, hashable(v)) for k, v in row.items()))


def _rows(rows: list[dict]) -> set[tuple]:
    return {_row(row) for row in rows}


def _new(before: dict, after: dict, table: str) -> list[dict]:
    old = _rows(before[table])
    return [row for row in after[table] if _row(row) not in old]


def resources_for(home: Home) -> dict:
    return {"spark": SparkResource(), "home": HomeResource(root=str(home.root))}


LAYER = build_layer(BANK_VIEWS)
projections = LAYER.projections
landing_sensor = next(s for s in LAYER.sensors if s.name == "landing_sensor")


def test_hostile_corpus_through_the_engine(spark, tmp_path, corpus):
    home = Home(tmp_path / "home").ensure()
    outside = tmp_path / "outside"
    hostile = [n for n in corpus.files if n not in FIRST_RUN] + list(corpus.symlinks)
    # run 1: clean batches
    for name in FIRST_RUN:
        (home.landing / name).write_bytes(corpus.files[name])
    run(spark, home, BANK_VIEWS, now=T1)
    before = _snapshot(home)
    # run 2: every hostile file at once, and a file changed after it was ingested
    Corpus(files={n: corpus.files[n] for n in hostile if n in corpus.files}, symlinks=corpus.symlinks,
           outside=corpus.outside).write(home.landing, outside)
    for name, data in corpus.changed.items():
        (home.landing / name).write_bytes(data)
    report = run(spark, home, BANK_VIEWS, now=T2)
    assert not report.plan.tick and len(report.ingested) == len(hostile) + len(corpus.changed)

    # every case ended as it must
    con = duckdb.connect(str(home.database), read_only=True)
    try:
        got = _outcomes(con, home)
        status_text = format_status(read_status(con, BANK_VIEWS))
        rejected = con.execute("SELECT batch_id, file_name, reason FROM inorder.ingest_log "
                               "WHERE status = 'rejected'").fetchall()
    finally:
        con.close()
    wrong = []
    for case in corpus.cases:
        end, reason = got.pop((case.file, case.line), ("missing", ""))
        if end != case.end or case.reason not in reason:  # noqa: SIM114
            wrong.append((case, end, reason[:120]))
    assert not wrong, f"{len(wrong)} cases ended wrongly, e.g. {wrong[:5]}"
    assert not got, f"outcomes no case expects: {list(got)[:5]}"

    # the good records are processed exactly as the model processes them; the store is the model's
    entries = [e for n in FIRST_RUN for e in _model_entries(corpus, [n], T1)] + _model_entries(corpus, hostile, T2)
    jsonl = {batch_id_of(Path(n)) for n in [*FIRST_RUN, *hostile] if n.endswith(".jsonl")}
    # A CSV or Parquet file reaches the model as JSON Lines with a stand-in line per bad record, so a
    # malformed row's raw text is compared for JSON Lines files only (each case's end and reason is
    # checked above). Files that clash or change take entries the model is not given: entry indexes
    # are left out here (tests/fast/test_ingest.py holds them).
    engine = without(read_store(home, BANK_VIEWS), "entry_idx", "updated_entry", "prev_last_seq")
    model = without(run_model(entries, BANK_VIEWS), "entry_idx", "updated_entry", "prev_last_seq")
    for store in (engine, model):
        store["errors"] = [e if e["batch_id"] in jsonl or e["kind"] != "malformed" else {**e, "raw": None}
                           for e in store["errors"]]
    assert_same_store(engine, model)
    assert_conserved(home, BANK_VIEWS)

    # nothing else changed: old rows are all still there, new ones belong to the hostile entries only
    after = _snapshot(home)
    log = {row["batch_id"]: row for row in after["inorder.ingest_log"]}
    hostile_ids = set(log) - {row["batch_id"] for row in before["inorder.ingest_log"]}
    assert {log[b]["file_name"] for b in hostile_ids} == set(hostile) | set(corpus.changed)
    for table in ("inorder.ingest_log", "inorder.errors", "inorder.batches"):
        assert _rows(before[table]) <= _rows(after[table]), table
        assert {row["batch_id"] for row in _new(before, after, table)} <= hostile_ids, table
    new_errors = _new(before, after, "inorder.errors")
    assert {row["kind"] for row in new_errors} == {"malformed"}  # the good records are all valid for the views
    assert [row for row in new_errors if not row["reason"] or row["line"] is None] == []
    assert len(new_errors) == sum(c.end == "malformed" for c in corpus.cases)
    assert before["inorder.pending"] == after["inorder.pending"] == []
    assert before["inorder.gaps"] == after["inorder.gaps"] == []
    for row in after["inorder.ingest_log"]:
        assert archive_path(home, row["entry_idx"]).exists() == (row["status"] == "archived"), row["batch_id"]
    archived = [pq.read_table(p, columns=["stream_id"]) for p in home.archive.rglob("*.parquet")]
    assert all("never-read" not in t["stream_id"].to_pylist() for t in archived)  # the symlink's target

    # the changed file is set aside once, under its own id; nothing is new any more
    with Store.open(home, BANK_VIEWS) as store:
        assert new_landing_files(store, home, SourceMapping()) == []
    changed = [r for r in rejected if r[1] == "changed.jsonl"]
    assert len(changed) == 1 and changed[0][0].startswith("changed.jsonl@")

    # rejected batches are visible in `inorder status` and in the errors asset (Dagster UI metadata)
    assert len(rejected) == sum(c.end == "rejected" for c in corpus.cases)
    for batch_id, _, reason in rejected:
        assert f"rejected {batch_id}: {reason}" in status_text
    assert f"{len(rejected)} rejected files" in status_text
    result = dg.materialize([projections], selection=["errors"], resources=resources_for(home))
    (materialization,) = result.asset_materializations_for_node("projections")
    metadata = materialization.metadata
    assert metadata["rejected_batches"].value == len(rejected)
    assert metadata["kind/malformed"].value == len(new_errors)
    for batch_id, _, reason in rejected:
        assert f"- `{batch_id}`: {reason}" in metadata["rejected"].value


# --------------------------------------------------------------------------- a changed file, every path

GOOD = b'{"stream_id": "a", "seq": 1, "type": "AccountOpened", "payload": {"owner": "ada"}}\n'
OTHER = b'{"stream_id": "a", "seq": 1, "type": "AccountOpened", "payload": {"owner": "bob"}}\n'


def _log(home: Home) -> list[tuple]:
    with Store.open(home, BANK_VIEWS) as store:
        return store.con.execute("SELECT entry_idx, batch_id, file_name, status, bytes, reason "
                                 "FROM inorder.ingest_log ORDER BY entry_idx").fetchall()


def _sensor(home: Home, instance, cursor=None):
    return landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home), cursor=cursor))


def test_a_changed_file_is_set_aside_once_through_the_sensor_and_ingest_batch(tmp_path):
    home = Home(tmp_path / "home").ensure()
    path = home.landing / "b1.jsonl"
    path.write_bytes(GOOD)
    instance = dg.DagsterInstance.ephemeral()
    first = _sensor(home, instance)
    assert [r.run_key for r in first.run_requests] == ["b1"]
    assert ingest_batches(home, BANK_VIEWS, ["b1"])[0].status == "archived"
    assert _sensor(home, instance, first.cursor).run_requests == []

    path.write_bytes(OTHER)  # same size, new content
    os.utime(path, ns=(1, 1))
    changed = _sensor(home, instance, first.cursor)
    (request,) = changed.run_requests
    key = request.run_key
    assert key.startswith("b1.jsonl@") and request.tags == {RANGE_START_TAG: key, RANGE_END_TAG: key}
    assert changed.dynamic_partitions_requests[0].partition_keys == [key]
    result = ingest_batches(home, BANK_VIEWS, [key])[0]
    assert (result.status, result.batch_id, result.already_ingested) == ("rejected", key, False)
    assert "changed after it was ingested as batch 'b1'" in result.reason
    assert ingest_batches(home, BANK_VIEWS, [key])[0].already_ingested  # a repeated run changes nothing
    assert _sensor(home, instance, changed.cursor).run_requests == []
    assert [row[1:4] for row in _log(home)] == [("b1", "b1.jsonl", "archived"), (key, "b1.jsonl", "rejected")]

    os.utime(path, ns=(2, 2))  # touched, same content: the ingest log already knows it, so no run
    assert _sensor(home, instance, changed.cursor).run_requests == []
    path.write_bytes(GOOD)  # changed back to the ingested content: nothing to set aside
    with Store.open(home, BANK_VIEWS) as store:
        assert new_landing_files(store, home, SourceMapping()) == []
        assert ingest_landing(store, home, SourceMapping(), 2_000_000_000_000_000) == []
    assert len(_log(home)) == 2


def test_change_detection_on_a_store_made_before_mtimes_were_recorded(tmp_path):
    home = Home(tmp_path / "home").ensure()
    path = home.landing / "b1.jsonl"
    path.write_bytes(GOOD)
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), 1_000_000_000_000_000)
        store.con.execute("ALTER TABLE inorder.ingest_log DROP COLUMN mtime_ns")
    os.utime(path, ns=(5, 5))
    with Store.open(home, BANK_VIEWS) as store:  # opening adds the column back, empty
        assert store.con.execute("SELECT mtime_ns FROM inorder.ingest_log").fetchall() == [(None,)]
        assert new_landing_files(store, home, SourceMapping()) == []  # same size: not even hashed
    path.write_bytes(GOOD + OTHER)
    with Store.open(home, BANK_VIEWS) as store:
        (changed,) = new_landing_files(store, home, SourceMapping())
        assert changed.batch_id.startswith("b1.jsonl@") and "changed after" in changed.set_aside
        (result,) = ingest_landing(store, home, SourceMapping(), 1_000_000_000_000_001)
        assert result.status == "rejected" and new_landing_files(store, home, SourceMapping()) == []


def test_a_rejected_file_that_changes_is_set_aside_again_and_a_file_turned_symlink_is_never_read(tmp_path):
    home = Home(tmp_path / "home").ensure()
    (home.landing / "bad.parquet").write_bytes(b"not parquet")
    (home.landing / "b2.jsonl").write_bytes(GOOD)
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(OTHER * 3)
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), 1)
        (home.landing / "bad.parquet").write_bytes(b"still not parquet")
        (home.landing / "b2.jsonl").unlink()
        (home.landing / "b2.jsonl").symlink_to(secret)
        found = {f.path.name: f for f in new_landing_files(store, home, SourceMapping())}
        assert "set aside as rejected batch 'bad'" in found["bad.parquet"].set_aside
        assert found["b2.jsonl"].fingerprint.sha256 is None  # resolves outside: never read
        ingest_landing(store, home, SourceMapping(), 2)
        assert new_landing_files(store, home, SourceMapping()) == []


# --------------------------------------------------------------------------- limits and SQL identifiers

def test_nesting_limit_is_exact_in_engine_and_model(tmp_path):
    def line(levels: int) -> bytes:  # the record is level 1; the payload adds levels - 1
        return (b'{"stream_id": "a", "seq": 1, "type": "X", "payload": ' + b"[" * (levels - 1)
                + b"]" * (levels - 1) + b"}")

    for levels, ok in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False)):
        path = tmp_path / f"d{levels}.jsonl"
        path.write_bytes(line(levels) + b"\n")
        batch = inspect_file(path, path.stem, 1, SourceMapping())
        assert batch.messages.num_rows == ok and (model_normalise(line(levels)) is not None) == ok
        assert ok or "nested deeper than 128 levels" in batch.malformed[0][2]


def test_a_bom_starts_a_file_but_is_malformed_anywhere_else(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD + b"\xef\xbb\xbf" + GOOD.replace(b'"seq": 1', b'"seq": 2'))
    batch = inspect_file(path, "b", 1, SourceMapping())
    assert batch.messages["line"].to_pylist() == [1] and [m[0] for m in batch.malformed] == [2]


BAD_NAMES = ['accounts"; DROP TABLE x; --', "a b", "Accounts", "1abc", "名前", "a-b", "", "a" * 64, "x'y", "a;b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_view_declarations_reject_names_that_are_not_plain_identifiers(name):
    with pytest.raises(ValueError, match="not a valid name"):
        Table(name, {"k": Column(str)}, ("k",), stream_key="k")
    with pytest.raises(ValueError, match="not a valid name"):
        Table("t", {name: Column(str), "k": Column(str)}, ("k",), stream_key="k")
    table = Table("t", {"k": Column(str)}, ("k",), stream_key="k")
    with pytest.raises(ValueError, match="not a valid name"):
        View(name, (table,), ("account",))


@pytest.mark.parametrize("sql_type", ["VARCHAR); DROP TABLE x; --", "TEXT", "DECIMAL(18,2) NOT NULL", "varchar"])
def test_view_declarations_reject_column_types_outside_the_list(sql_type):
    with pytest.raises(TypeError, match="not SQL text"):
        Table("t", {"k": Column(str), "v": Column(sql_type)}, ("k",), stream_key="k")
    with pytest.raises(ValueError, match="unsupported type"):  # nor as inorder's own type, made by hand
        Table("t", {"k": Column(str), "v": Column(SqlType(sql_type))}, ("k",), stream_key="k")
