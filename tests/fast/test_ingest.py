"""Ingest: archive + register each landing file once; rejected files are set aside with a reason."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pyarrow.parquet as pq
import pytest

from pipelines.engine import ingest
from pipelines.engine.ingest import LogicalTimeError, archive_path, ingest_landing, record_entry
from pipelines.engine.normalise import SourceMapping
from pipelines.store.database import Home, Store, utc_from_us
from tests.builders import dep, opened
from tests.domains import BANK_VIEWS

T = 1_700_000_000_000_000


def landing_home(tmp_path) -> Home:
    home = Home(tmp_path / "home").ensure()
    (home.landing / "b1.jsonl").write_text(opened("a") + "\n{oops\n" + dep("a", 2, 5) + "\n")
    (home.landing / "b2.jsonl").write_text(dep("a", 3, 1) + "\n")
    (home.landing / "b3.xml").write_text("<x/>")
    outside = tmp_path / "secret.jsonl"
    outside.write_text(opened("z") + "\n")
    (home.landing / "b4.jsonl").symlink_to(outside)
    (home.landing / ".hidden.jsonl").write_text("ignored: hidden files are not batches\n")
    (home.landing / "b1.parquet").write_text("not read: b1.jsonl comes first and has batch id b1")
    return home


def ingest_rows(home: Home):
    with Store.open(home, BANK_VIEWS) as store:
        log = store.con.execute("SELECT entry_idx, batch_id, status, records, malformed, normalised, sha256 "
                                "FROM inorder.ingest_log ORDER BY entry_idx").fetchall()
        errors = store.con.execute("SELECT batch_id, line, kind FROM inorder.errors ORDER BY error_id").fetchall()
    return log, errors


@pytest.mark.parametrize("parallel", [False, True])
def test_ingest_archives_registers_and_rejects(tmp_path, monkeypatch, parallel):
    if parallel:
        monkeypatch.setattr(ingest, "_PARALLEL_BYTES", 0)
    home = landing_home(tmp_path)
    with Store.open(home, BANK_VIEWS) as store:
        results = ingest_landing(store, home, SourceMapping(), T)
        assert ingest_landing(store, home, SourceMapping(), T + 1) == []  # known files are never ingested again
        with pytest.raises(LogicalTimeError):
            (home.landing / "b5.jsonl").write_text(opened("b") + "\n")
            ingest_landing(store, home, SourceMapping(), T - 1)
    assert [(r.batch_id, r.status) for r in results] == [
        ("b1", "archived"), ("b1.parquet", "rejected"), ("b2", "archived"), ("b3.xml", "rejected"), ("b4", "rejected")]
    assert "already taken" in results[1].reason
    assert "unsupported" in results[3].reason and "outside the landing folder" in results[4].reason
    log, errors = ingest_rows(home)
    assert [row[:6] for row in log] == [(1, "b1", "archived", 3, 1, 2), (2, "b1.parquet", "rejected", 0, 0, 0),
                                        (3, "b2", "archived", 1, 0, 1), (4, "b3.xml", "rejected", 0, 0, 0),
                                        (5, "b4", "rejected", 0, 0, 0)]
    assert errors == [("b1", 2, "malformed")]
    archived = pq.read_table(archive_path(home, 1)).to_pylist()
    assert [(m["entry_idx"], m["batch_id"], m["line"], m["seq"]) for m in archived] == [(1, "b1", 1, 1), (1, "b1", 3, 2)]
    assert not archive_path(home, 2).exists() and not archive_path(home, 4).exists()


def test_ingest_batch_sets_a_later_claimant_of_the_same_id_aside(tmp_path):
    from pipelines.facade import ingest_batches

    home = Home(tmp_path / "home").ensure()
    (home.landing / "b1.jsonl").write_text(opened("a") + "\n")
    first = ingest_batches(home, BANK_VIEWS, ["b1"])[0]
    assert (first.status, first.already_ingested) == ("archived", False)
    (home.landing / "b1.jsonl").unlink()
    (home.landing / "b1.csv").write_text("stream_id,seq,type\na,2,Deposited\n")
    again = ingest_batches(home, BANK_VIEWS, ["b1"])[0]  # e.g. the sensor lost its cursor
    assert (again.status, again.already_ingested, again.entry_idx) == ("archived", True, 1)
    clash = ingest_batches(home, BANK_VIEWS, ["b1.csv"])[0]
    assert (clash.status, clash.already_ingested) == ("rejected", True) and "already taken" in clash.reason
    log, _ = ingest_rows(home)
    assert [row[:3] for row in log] == [(1, "b1", "archived"), (2, "b1.csv", "rejected")]


def test_a_file_named_like_a_tick_entry_is_set_aside_and_ticks_go_on(tmp_path):
    home = Home(tmp_path / "home").ensure()
    (home.landing / "tick-2.jsonl").write_text(opened("a") + "\n")
    (home.landing / "tick-3").write_text(opened("b") + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        results = ingest_landing(store, home, SourceMapping(), T)
        tick = record_entry(store, "tick", T + 1)
    assert [(r.batch_id, r.status) for r in results] == [("tick-2.jsonl", "rejected"), (results[1].batch_id, "rejected")]
    assert results[1].batch_id.startswith("tick-3@")
    assert all("form of a tick" in r.reason for r in results)
    assert tick == 3 and ingest_rows(home)[0][-1][:3] == (3, "tick-3", "archived")


def test_ingest_batch_of_a_key_that_is_also_a_tick_id_finds_the_file(tmp_path):
    from pipelines.facade import ingest_batches

    home = Home(tmp_path / "home").ensure()
    with Store.open(home, BANK_VIEWS) as store:
        record_entry(store, "tick", T)
    (home.landing / "tick-1.jsonl").write_text(opened("a") + "\n")
    result = ingest_batches(home, BANK_VIEWS, ["tick-1"])[0]  # the sensor's partition key is the file's stem
    assert (result.entry_idx, result.batch_id, result.status) == (2, "tick-1.jsonl", "rejected")
    assert "already taken" in result.reason


def test_file_names_no_batch_id_may_hold_are_set_aside_under_usable_ids(tmp_path):
    from dagster._core.definitions.partitions.utils.base import raise_error_on_invalid_partition_key_substring

    from pipelines.engine.ingest import batch_id_of
    from pipelines.facade import ingest_batches

    home = Home(tmp_path / "home").ensure()
    odd = [home.landing / "line\nbreak.jsonl", home.landing / "v1...2.jsonl", home.landing / "tab\there.csv"]
    for path in odd:
        path.write_text(opened("a") + "\n")
    keys = [batch_id_of(PurePosixPath(p.name)) for p in odd]  # what the sensor uses as partition keys
    raise_error_on_invalid_partition_key_substring(keys)
    with Store.open(home, BANK_VIEWS) as store:
        results = ingest_landing(store, home, SourceMapping(), T, only=odd[:2])
    assert [(r.batch_id, r.status) for r in results] == [(keys[0], "rejected"), (keys[1], "rejected")]
    assert [r.reason for r in results] == [f"the file name {p.name!r} has a control character or '...', which no batch id "
                                           "may hold; rename the file" for p in odd[:2]]
    through_dagster_path = ingest_batches(home, BANK_VIEWS, [keys[2]])[0]
    assert (through_dagster_path.batch_id, through_dagster_path.status) == (keys[2], "rejected")


def test_a_reingest_supersedes_the_malformed_rows_of_its_lines_and_never_logs_delivered_ones(tmp_path):
    """Issue 33 finding 5, issue 36 item 3: after a re-ingest, `status`, `inorder errors` and the `errors` asset
    count the same malformed records. The lines the new mapping reads again are the undelivered ones only: the
    delivered `a` lines, malformed under the new mapping, are not logged again."""
    from assets.logs import errors_metadata
    from pipelines.engine.ingest import reingest
    from pipelines.observe.status import read_errors, read_status

    home = Home(tmp_path / "home").ensure()
    other_shape = [json.dumps({"account": "b", "n": n, "type": "Deposited", "payload": {"amount": 1}})
                   for n in (1, 2, 3)]
    (home.landing / "b1.jsonl").write_text("\n".join([opened("a"), dep("a", 2, 5), *other_shape, "{oops"]) + "\n")
    (home.landing / "b2.jsonl").write_text("{never fixed\n")
    fixed = SourceMapping(stream_id="account", seq="n")
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), T)
        assert read_errors(store.con, kind="malformed").total == 5
        (again,) = reingest(store, home, fixed, {"account"}, ["b1"], T + 1)
        assert (again.batch_id, again.records, again.malformed, again.reingest_of) == ("b1@reingest-3", 4, 1, 1)
        # the lines it carried are marked as it registers, on its own connection; each malformed row at its entry's T
        assert store.con.execute("SELECT batch_id, line, logged_at FROM inorder.errors WHERE kind = 'malformed' "
                                 "AND superseded_by IS NULL ORDER BY error_id").fetchall() == [
            ("b2", 1, utc_from_us(T)), ("b1@reingest-3", 6, utc_from_us(T + 1))]  # {oops is still bad

    def counts() -> tuple[int, int, int, int]:
        with Store.open(home, BANK_VIEWS) as store:
            log = read_errors(store.con, kind="malformed")
            asset = errors_metadata(store)["kind/malformed"].value
            return read_status(store.con, BANK_VIEWS).malformed, log.total, asset, log.superseded

    assert counts() == (2, 2, 2, 4)  # b1's {oops as logged by the re-ingest, and b2's line
    with Store.open(home, BANK_VIEWS) as store:
        marked = store.con.execute("SELECT batch_id, line, superseded_by FROM inorder.errors "
                                   "WHERE kind = 'malformed' ORDER BY error_id").fetchall()
        listed = read_errors(store.con, kind="malformed", superseded=True)
    assert marked == [("b1", 3, "b1@reingest-3"), ("b1", 4, "b1@reingest-3"), ("b1", 5, "b1@reingest-3"),
                      ("b1", 6, "b1@reingest-3"), ("b2", 1, None), ("b1@reingest-3", 6, None)]
    assert (listed.total, listed.superseded, len(listed.newest)) == (6, 4, 6)
    # a store whose re-ingest predates the marks gets them at a writer's open
    with Store.open(home, BANK_VIEWS) as store:
        store.con.execute("UPDATE inorder.errors SET superseded_by = NULL")
    assert counts() == (2, 2, 2, 4)
