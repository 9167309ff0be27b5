"""A landing file that changes after the ingest recorded it (pipelines/engine/ingest.py `_changed`,
`current_version`, `_fingerprint`), where `make mutation` found no test without a JVM (issue 36): it is set aside
once per new content as `<name>@<hash>`, and the recorded version stays the one that counts. DuckDB in process."""

from __future__ import annotations

import hashlib
import os
from pathlib import PurePosixPath

import pytest

from pipelines.engine.ingest import LogicalTimeError, ingest_landing
from pipelines.engine.normalise import SourceMapping
from pipelines.store.database import Home, Store
from tests.builders import dep, opened
from tests.domains import BANK_VIEWS

T = 1_700_000_000_000_000
KEPT = ("the recorded version stays the one that counts; give new content a new file name")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _log(store: Store, since: int) -> list[tuple]:
    return store.con.execute("SELECT entry_idx, batch_id, file_name, status, bytes, sha256, mtime_ns "
                             "FROM inorder.ingest_log WHERE entry_idx >= ? ORDER BY entry_idx", [since]).fetchall()


def test_a_landing_file_changed_after_it_was_recorded_is_set_aside_once_per_new_content(tmp_path):
    home = Home(tmp_path / "home").ensure()
    b1, b3 = home.landing / "b1.jsonl", home.landing / "b3.xml"
    b1.write_text(opened("a") + "\n")
    b3.write_text("<x/>")
    with Store.open(home, BANK_VIEWS) as store:
        assert [(r.batch_id, r.status) for r in ingest_landing(store, home, SourceMapping(), T)] == [
            ("b1", "archived"), ("b3.xml", "rejected")]
        later = opened("a") + "\n" + dep("a", 2, 5) + "\n"
        b1.write_text(later)
        b3.write_text("<y/>")  # the same size: the mtime tells it changed, the hash that it did
        os.utime(b3, ns=(b3.stat().st_atime_ns, b3.stat().st_mtime_ns + 10**9))
        changed = ingest_landing(store, home, SourceMapping(), T + 1)
        assert [(r.entry_idx, r.batch_id, r.status, r.bytes) for r in changed] == [
            (3, f"b1.jsonl@{_sha(later)[:16]}", "rejected", len(later)), (4, f"b3.xml@{_sha('<y/>')[:16]}", "rejected", 4)]
        assert changed[0].reason == ("the file changed after it was ingested as batch 'b1' (same name, new content); "
                                     + KEPT)
        assert changed[1].reason == ("the file changed after it was set aside as rejected batch 'b3.xml' (same name, "
                                     "new content); " + KEPT)
        assert _log(store, 3) == [
            (3, f"b1.jsonl@{_sha(later)[:16]}", "b1.jsonl", "rejected", len(later), _sha(later), b1.stat().st_mtime_ns),
            (4, f"b3.xml@{_sha('<y/>')[:16]}", "b3.xml", "rejected", 4, _sha("<y/>"), b3.stat().st_mtime_ns)]
        assert ingest_landing(store, home, SourceMapping(), T + 2) == []  # each new content is set aside once
        os.utime(b1, ns=(b1.stat().st_atime_ns, b1.stat().st_mtime_ns + 10**9))
        assert ingest_landing(store, home, SourceMapping(), T + 3) == []  # touched, the same content
        b1.write_text(opened("a") + "\n")  # back to the content ingested first
        assert ingest_landing(store, home, SourceMapping(), T + 4) == []
        # another size under the newest recorded time (a copy that kept its source's time): the size tells it changed
        (recorded_ns,) = store.con.execute("SELECT mtime_ns FROM inorder.ingest_log WHERE file_name = 'b1.jsonl' "
                                           "ORDER BY entry_idx DESC LIMIT 1").fetchone()
        b1.write_text(opened("a") + "\n" + dep("a", 2, 75) + "\n")
        os.utime(b1, ns=(recorded_ns, recorded_ns))
        (resized,) = ingest_landing(store, home, SourceMapping(), T + 5)
        assert (resized.status, resized.bytes) == ("rejected", b1.stat().st_size)


def test_a_file_of_several_hash_chunks_is_recorded_whole_and_an_archive_folder_is_made_as_needed(tmp_path):
    """A file is hashed 1 MiB at a time: its recorded size is the whole file's, so listing it again finds it unchanged;
    the archive folder, gone, is made again, and an entry's folder a crashed ingest left behind is written into."""
    import shutil

    home = Home(tmp_path / "home").ensure()
    big = home.landing / "b1.jsonl"
    big.write_text("".join(dep("a", seq, 5) + "\n" for seq in range(2, 30_000)))  # about 3 MiB
    shutil.rmtree(home.archive)
    with Store.open(home, BANK_VIEWS) as store:
        (first,) = ingest_landing(store, home, SourceMapping(), T)
        assert first.bytes == big.stat().st_size > 2 << 20 and _log(store, 1)[0][4] == first.bytes
        assert ingest_landing(store, home, SourceMapping(), T + 1) == []
        os.utime(big, ns=(big.stat().st_atime_ns, big.stat().st_mtime_ns + 10**9))  # touched: hashed again, the same
        assert ingest_landing(store, home, SourceMapping(), T + 1) == []
        with big.open("a") as more:
            more.write(dep("a", 30_000, 5) + "\n")
        (changed,) = ingest_landing(store, home, SourceMapping(), T + 1)  # set aside, at its whole new size
        assert (changed.entry_idx, changed.status, changed.bytes) == (2, "rejected", big.stat().st_size)
        home.archived(3).parent.mkdir()
        (home.landing / "b2.jsonl").write_text(opened("b") + "\n")
        (second,) = ingest_landing(store, home, SourceMapping(), T + 2)
        assert (second.entry_idx, second.status) == (3, "archived") and home.archived(3).is_file()


def test_a_recorded_file_replaced_by_a_link_out_of_the_landing_folder_is_set_aside_unread(tmp_path):
    home = Home(tmp_path / "home").ensure()
    b1 = home.landing / "b1.jsonl"
    b1.write_text(opened("a") + "\n")
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(opened("a") + "\n" + dep("a", 2, 5) + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), T)
        b1.unlink()
        b1.symlink_to(outside)
        (changed,) = ingest_landing(store, home, SourceMapping(), T + 1)
        where = hashlib.sha256(os.fsencode(outside.resolve())).hexdigest()
        assert (changed.batch_id, changed.status, changed.bytes) == (f"b1.jsonl@{where[:16]}", "rejected",
                                                                     outside.stat().st_size)
        assert _log(store, 2) == [(2, f"b1.jsonl@{where[:16]}", "b1.jsonl", "rejected", outside.stat().st_size, None,
                                   outside.stat().st_mtime_ns)]
        (home.landing / "b9.jsonl").symlink_to(outside)  # a new file that is a link out: rejected unread
        (linked,) = ingest_landing(store, home, SourceMapping(), T + 2)
        assert (linked.batch_id, linked.status, linked.reason) == (
            "b9", "rejected", "the file resolves outside the landing folder (symlink?)")


def test_a_tick_is_due_only_when_logical_time_moved_past_the_last_entry(tmp_path):
    from pipelines.engine.ingest import record_entry, tick_due

    home = Home(tmp_path / "home").ensure()
    with Store.open(home, BANK_VIEWS) as store:
        assert tick_due(store, T)  # nothing recorded yet
        record_entry(store, "tick", T)
        assert not tick_due(store, T) and not tick_due(store, T - 1)
        assert tick_due(store, T + 1)


class _Crashed(Exception):
    pass


def _reached(point: str, monkeypatch, tmp_path) -> bool:
    """Does an ingest of an archived and a rejected file, then a tick, pass `point`? (the crash sweep's kill,
    made an exception)"""
    from pipelines import faults
    from pipelines.engine.ingest import record_entry

    for name, value in (("ARMED", point), ("_point", point), ("_nth", 1), ("_hits", 0), ("_delay_us", 0)):
        monkeypatch.setattr(faults, name, value)

    def crash() -> None:
        raise _Crashed(point)

    monkeypatch.setattr(faults, "_kill", crash)
    home = Home(tmp_path / point).ensure()
    (home.landing / "b1.jsonl").write_text(opened("a") + "\n")
    (home.landing / "b3.xml").write_text("<x/>")
    with Store.open(home, BANK_VIEWS) as store:
        try:
            ingest_landing(store, home, SourceMapping(), T)
            record_entry(store, "tick", T + 1)
        except _Crashed:
            return True
    return False


def test_every_crash_point_of_the_ingest_is_armed_by_the_sweep_and_reached(monkeypatch, tmp_path):
    """The crash sweep (tests/crash_sweep.py) kills runs at these points: a point renamed or no longer passed
    would make its cases kill nothing."""
    import re
    from pathlib import Path

    from pipelines.engine import ingest
    from tests.crash_sweep import NAMED

    in_the_ingest = set(re.findall(r'crash_point\("([a-z_.]+)"\)', Path(ingest.__file__).read_text()))
    armed = {p for p, *_ in NAMED if p.startswith("ingest.")}
    assert in_the_ingest == armed == {"ingest.listed", "ingest.inspected", "ingest.archive_written",
                                      "ingest.archive_in_place", "ingest.registering", "ingest.registered",
                                      "ingest.rejected_registered"}
    for point in sorted(armed | {"tick.recorded"}):
        assert _reached(point, monkeypatch, tmp_path), point
    assert not _reached("ingest.nowhere", monkeypatch, tmp_path)


def test_the_ingest_says_each_file_it_registers_and_returns_its_entry_and_size(tmp_path):
    home = Home(tmp_path / "home").ensure()
    text = opened("a") + "\n{oops\n"
    (home.landing / "b1.jsonl").write_text(text)
    (home.landing / "b1.parquet").write_text("not read: its batch id is taken")
    (home.landing / "b3.xml").write_text("<x/>")  # read, and rejected
    said: list[str] = []
    with Store.open(home, BANK_VIEWS) as store:
        results = ingest_landing(store, home, SourceMapping(), T, progress=said.append)
        assert _log(store, 1)[0] == (1, "b1", "b1.jsonl", "archived", len(text), _sha(text),
                                     (home.landing / "b1.jsonl").stat().st_mtime_ns)  # what was read was hashed
        (home.landing / "b2.jsonl").write_text(opened("b") + "\n")
        assert [r.batch_id for r in ingest_landing(store, home, SourceMapping(), T)] == ["b2"]  # the same time: fine
        with pytest.raises(LogicalTimeError, match=r"^logical time 2023-11-14T22:13:19\.999999\+00:00 is before the "
                                                   r"last recorded 2023-11-14T22:13:20\+00:00; logical time never runs "
                                                   r"backwards$"):
            (home.landing / "b4.jsonl").write_text(opened("c") + "\n")
            ingest_landing(store, home, SourceMapping(), T - 1)
    assert [(r.entry_idx, r.batch_id, r.status, r.records, r.malformed, r.bytes) for r in results] == [
        (1, "b1", "archived", 2, 1, len(text)), (2, "b1.parquet", "rejected", 0, 0, 0),
        (3, "b3.xml", "rejected", 0, 0, 4)]
    assert said == ["ingest 1/3 b1.jsonl: archived, 2 records, 1 malformed",
                    f"ingest 2/3 b1.parquet: rejected, 0 records, 0 malformed ({results[1].reason})",
                    f"ingest 3/3 b3.xml: rejected, 0 records, 0 malformed ({results[2].reason})"]


def test_each_file_of_one_ingest_is_archived_under_its_own_entry(tmp_path):
    import pyarrow.parquet as pq

    from pipelines.engine.ingest import archive_path

    home = Home(tmp_path / "home").ensure()
    for name, stream in (("b1", "a"), ("b2", "b"), ("b3", "c")):
        (home.landing / f"{name}.jsonl").write_text(opened(stream) + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        assert [r.entry_idx for r in ingest_landing(store, home, SourceMapping(), T)] == [1, 2, 3]
    for entry_idx, stream in ((1, "a"), (2, "b"), (3, "c")):
        archived = pq.read_table(archive_path(home, entry_idx)).to_pylist()
        assert [(m["entry_idx"], m["stream_id"]) for m in archived] == [(entry_idx, stream)]


def test_a_reingest_carries_only_the_undelivered_lines_says_what_it_did_and_refuses_in_one_line(tmp_path):
    """A re-ingest with a fixed source mapping, batch by batch: one whose records all reached a view is left, one whose
    undelivered records still reach none is left and said, and the others go on after them; the new entry's archive
    holds only the carried lines, under its own batch id and entry; a re-ingest asked by a re-ingested batch's id
    starts from its newest entry; an unknown batch, a landing file gone (or now a link out of the landing folder) and
    a file changed since its ingest are refused, each in one line."""
    import json

    import pyarrow.parquet as pq

    from pipelines.engine.ingest import ReingestRefused, reingest

    home = Home(tmp_path / "home").ensure()
    fixed = SourceMapping(stream_id="account", seq="n")  # the lines of another shape, readable once fixed
    other = json.dumps({"account": "b", "n": 1, "type": "AccountOpened", "payload": {"owner": "bo"}})
    loan = json.dumps({"account": "l", "n": 1, "stream_type": "loan", "type": "LoanOpened", "payload": {}})
    (home.landing / "b1.jsonl").write_text("\n".join([opened("a"), other, "{oops"]) + "\n")
    (home.landing / "b2.jsonl").write_text(opened("c") + "\n")
    (home.landing / "b3.jsonl").write_text(loan + "\n")
    said: list[str] = []
    with Store.open(home, BANK_VIEWS) as store:
        assert [r.entry_idx for r in ingest_landing(store, home, SourceMapping(), T)] == [1, 2, 3]
        (again,) = reingest(store, home, fixed, {"account"}, ["b2", "b1"], T + 1, said.append)
        assert (again.batch_id, again.entry_idx, again.records, again.malformed) == ("b1@reingest-4", 4, 2, 1)
        assert pq.read_table(home.archived(4), columns=["batch_id", "entry_idx", "line", "stream_id"]).to_pylist() == [
            {"batch_id": "b1@reingest-4", "entry_idx": 4, "line": 2, "stream_id": "b"}]
        assert reingest(store, home, fixed, {"account"}, ["b3", "b1@reingest-4"], T + 2, said.append) == []
        refusals = []
        for asked, change in ((["nope"], None), (["b2"], "link"), (["b3"], "edit")):
            if change == "link":
                outside = tmp_path / "outside.jsonl"  # the same bytes, out of the landing folder
                outside.write_bytes((home.landing / "b2.jsonl").read_bytes())
                (home.landing / "b2.jsonl").unlink()
                (home.landing / "b2.jsonl").symlink_to(outside)
            elif change == "edit":
                (home.landing / "b3.jsonl").write_text("changed\n")
            with pytest.raises(ReingestRefused) as refused:
                reingest(store, home, fixed, {"account"}, asked, T + 3)
            refusals.append(str(refused.value).replace(str(home.landing), "LANDING"))
    assert said == [
        "reingest b2: every record of entry 2 reached a view or was already delivered; nothing to re-ingest",
        "reingest b1: entry 1's 2 undelivered records as b1@reingest-4: 1 normalised, 1 malformed",
        "reingest b3: with today's source mapping, entry 3's 1 undelivered records still reach no view (0 malformed, "
        "stream types {'loan': 1}); nothing re-ingested",
        "reingest b1: with today's source mapping, entry 4's 1 undelivered records still reach no view (1 malformed, "
        "stream types {}); nothing re-ingested"]
    assert refusals == [
        "no archived batch 'nope' to re-ingest (`inorder status` lists the batches)",
        "batch 'b2': its landing file LANDING/b2.jsonl is gone; re-ingesting reads it again",
        "batch 'b3': LANDING/b3.jsonl changed since it was ingested; re-ingesting reads the file as it was ingested "
        "(give new content a new file name)"]


def test_a_file_whose_batch_id_is_taken_or_reserved_is_set_aside_under_a_free_id_saying_why(tmp_path):
    """Its whole name when that is free, else its name and a hash of it; a batch id of a tick's or an operator
    action's form is reserved."""
    from pipelines.engine.ingest import _name_hash

    home = Home(tmp_path / "home").ensure()
    (home.landing / "b1.jsonl").write_text(opened("a") + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, SourceMapping(), T)
        for name in ("b1.csv", "b1", "tick-3.jsonl", "tick-4"):
            (home.landing / name).write_text(opened("b") + "\n")
        set_aside = ingest_landing(store, home, SourceMapping(), T + 1)
    taken, reserved = "is already taken by another file or entry", "has the form of a tick's or an operator action's id"
    assert [(r.batch_id, r.status, r.reason) for r in set_aside] == [
        (f"b1@{_name_hash(PurePosixPath('b1'))}", "rejected", f"batch id 'b1' {taken}; rename this one"),
        ("b1.csv", "rejected", f"batch id 'b1' {taken}; rename this one"),
        ("tick-3.jsonl", "rejected", f"batch id 'tick-3' {reserved}; rename this one"),
        (f"tick-4@{_name_hash(PurePosixPath('tick-4'))}", "rejected", f"batch id 'tick-4' {reserved}; rename this one")]
    assert _name_hash(PurePosixPath("b1")) == hashlib.sha256(b"b1").hexdigest()[:16]
