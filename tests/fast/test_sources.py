"""Several sources in a home (issue 33, item 6), without Spark: which mapping of source.json reads which landing
file (by its name's glob or its sub-folder; none or two is a refusal), what source.json may hold, and the
ingest that reads each feed with its own mapping and sets a file no source takes aside, unread, with its
reason. tests/cli/test_two_feeds.py runs two feeds through the real CLI."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest

from pipelines.engine.ingest import ReingestRefused, ingest_landing, reingest
from pipelines.engine.normalise import RejectedFile, SourceMapping
from pipelines.engine.sources import SELECTORS, Feed, Sources, load_source
from pipelines.store.database import Home, Store
from tests.builders import dep, opened
from tests.domains import BANK_VIEWS

T = 1_700_000_000_000_000
PAYMENTS = {"match": "payments-*.jsonl", "name": "payment", "stream_id": "payment_id", "seq": "version"}
TRIPS = {"folder": "trips", "name": "trip", "stream_id": ["city", "trip"], "seq": "n", "event_type": "kind"}
TWO_FEEDS = {"sources": [PAYMENTS, TRIPS]}
NO_SOURCE = ("no source of source.json takes this file (they take 1: match 'payments-*.jsonl'; 2: folder 'trips'); "
             "add one whose `match` or `folder` takes it")


def mapping_of(source: dict) -> SourceMapping:
    return SourceMapping.from_dict({k: v for k, v in source.items() if k not in SELECTORS})


def loaded(tmp_path, data) -> object:
    path = tmp_path / "source.json"
    path.write_text(json.dumps(data))
    return load_source(path)


def test_each_file_is_read_by_the_source_its_name_or_folder_selects(tmp_path):
    sources = loaded(tmp_path, TWO_FEEDS)
    assert sources == Sources((Feed(mapping_of(PAYMENTS), match="payments-*.jsonl"),
                               Feed(mapping_of(TRIPS), folder="trips")))
    for name, source in [("payments-01.jsonl", PAYMENTS), ("eu/payments-01.jsonl", PAYMENTS),  # the glob: any folder
                         ("trips/t1.jsonl", TRIPS), ("trips/2026/01/t1.csv", TRIPS)]:  # the folder: at any depth
        assert sources.mapping_for(PurePosixPath(name)) == mapping_of(source), name
    for name in ("orders.jsonl", "Payments-01.jsonl", "payments-01.csv", "tripsx/t1.jsonl", "eu/trips/t1.jsonl"):
        with pytest.raises(RejectedFile) as refused:
            sources.mapping_for(PurePosixPath(name))
        assert str(refused.value) == NO_SOURCE, name
    with pytest.raises(RejectedFile) as refused:  # both: never read with a mapping not meant for it
        sources.mapping_for(PurePosixPath("trips/payments-02.jsonl"))
    assert str(refused.value) == ("2 sources of source.json take this file (1: match 'payments-*.jsonl'; 2: folder "
                                  "'trips'); change their `match` or `folder` so that one takes it")
    both_selectors = loaded(tmp_path, {"sources": [{"folder": "eu/", "match": "*.csv"}]})
    assert both_selectors.mapping_for(PurePosixPath("eu/a.csv")) == SourceMapping()
    with pytest.raises(RejectedFile, match="they take 1: folder 'eu' and match '\\*.csv'"):
        both_selectors.mapping_for(PurePosixPath("eu/a.jsonl"))


def test_one_mapping_reads_every_file_as_before(tmp_path):
    single = loaded(tmp_path, {"name": "order", "seq": "version"})
    assert single == SourceMapping(name="order", seq="version") and not single.reads_subfolders
    assert single.mapping_for(PurePosixPath("anything.csv")) is single


@pytest.mark.parametrize("data, refusal", [
    ({"sources": [{"name": "trip"}]}, "source 1 of source.json selects no file: give it `match`"),
    ({"sources": [PAYMENTS, {"match": "trips/*.jsonl"}]},
     "source 2 of source.json: `match` is a glob on the file name"),
    ({"sources": [{"folder": "../elsewhere"}]}, "`folder` '../elsewhere' is no sub-folder of landing/"),
    ({"sources": [{"folder": ".staging"}]}, "`folder` '.staging' is no sub-folder of landing/"),
    ({"sources": [{"folder": ""}]}, "`match` and `folder` are non-empty strings"),
    ({"sources": [PAYMENTS, {**TRIPS, "stream": "x"}]},
     r"source 2 of source.json: unknown source mapping keys: \['stream'\]"),
    ({"sources": [PAYMENTS, {**TRIPS, "first_seq": 0}]}, r"give first_seq \[0, 1\]: the walk starts every stream"),
    ({"sources": [PAYMENTS], "seq": "n"}, r"has `sources` and other keys \['seq'\]"),
    ({"sources": []}, "must be a list of one object per source"),
    ({"match": "payments-*.jsonl", "seq": "version"}, "list the sources under `sources`"),
])
def test_a_source_json_that_cannot_say_which_mapping_reads_a_file_is_refused(tmp_path, data, refusal):
    with pytest.raises(ValueError, match=refusal):
        loaded(tmp_path, data)


def payment(payment_id: str, version: int, event_type: str) -> str:
    return json.dumps({"payment_id": payment_id, "version": version, "type": event_type, "payload": {}})


def trip(trip_id: str, n: int, kind: str) -> str:
    return json.dumps({"city": "lyon", "trip": trip_id, "n": n, "kind": kind, "payload": {}})


def two_feeds_home(tmp_path) -> Home:
    home = Home(tmp_path / "home").ensure()
    (home.root / "source.json").write_text(json.dumps(TWO_FEEDS))
    (home.landing / "trips" / "2026").mkdir(parents=True)
    (home.landing / ".staging").mkdir()
    (home.landing / "payments-01.jsonl").write_text(payment("p-1", 1, "Authorised") + "\n"
                                                    + payment("p-1", 2, "Captured") + "\n")
    (home.landing / "trips" / "payments-01.jsonl").write_text(trip("t-9", 1, "Requested") + "\n")  # both take it
    (home.landing / "trips" / "2026" / "t1.jsonl").write_text(trip("t-1", 1, "Requested") + "\n{oops\n")
    (home.landing / "orders.jsonl").write_text(opened("acct-1") + "\n")  # no source takes it
    (home.landing / ".staging" / "payments-02.jsonl").write_text(payment("p-2", 1, "Authorised") + "\n")  # hidden
    return home


def test_two_feeds_are_read_each_with_its_mapping_and_a_file_no_source_takes_is_set_aside_unread(tmp_path):
    home = two_feeds_home(tmp_path)
    with Store.open(home, BANK_VIEWS) as store:
        results = ingest_landing(store, home, load_source(home.root / "source.json"), T)
        log = store.con.execute("SELECT batch_id, file_name, status, records, stream_types, sha256 IS NULL, reason "
                                "FROM inorder.ingest_log ORDER BY entry_idx").fetchall()
        errors = store.con.execute("SELECT batch_id, line FROM inorder.errors").fetchall()
    assert [(r.batch_id, r.status, r.records, r.malformed) for r in results] == [
        ("orders", "rejected", 0, 0), ("payments-01", "archived", 2, 0), ("trips/2026/t1", "archived", 2, 1),
        ("trips/payments-01", "rejected", 0, 0)]  # in the order of their names under landing/
    assert log[0] == ("orders", "orders.jsonl", "rejected", 0, None, True, NO_SOURCE)
    assert log[1][:5] == ("payments-01", "payments-01.jsonl", "archived", 2, {"payment": 2})
    assert log[2][:5] == ("trips/2026/t1", "trips/2026/t1.jsonl", "archived", 2, {"trip": 1})
    assert log[3][:3] == ("trips/payments-01", "trips/payments-01.jsonl", "rejected") and "2 sources" in log[3][6]
    assert errors == [("trips/2026/t1", 2)]  # nothing for the files set aside
    assert sorted(p.name for p in home.archive.iterdir()) == ["entry=000000002", "entry=000000003"]
    with Store.open(home, BANK_VIEWS) as store:  # set aside once: a name is never read twice
        assert ingest_landing(store, home, load_source(home.root / "source.json"), T + 1) == []


def test_landing_files_come_in_the_order_of_their_names_and_a_batch_id_finds_the_file_it_stands_for(tmp_path):
    """The one discovery: names under the landing folder in the order of their text (`trips-x.jsonl` before
    `trips/…`, as `-` sorts before `/`); a batch id (a partition key) stands for the file of that stem, of that whole
    name, or the file a changed version (`<name>@<hash>`) was set aside from, in the sub-folders too."""
    from pipelines.engine.ingest import files_for_batch, landing_files, landing_name

    home = two_feeds_home(tmp_path)
    (home.landing / "trips-x.jsonl").write_text(trip("t-2", 1, "Requested") + "\n")
    source = load_source(home.root / "source.json")
    assert [str(landing_name(home, p)) for p in landing_files(home, source)] == [
        "orders.jsonl", "payments-01.jsonl", "trips-x.jsonl", "trips/2026/t1.jsonl", "trips/payments-01.jsonl"]
    found = {batch_id: [str(landing_name(home, p)) for p in files_for_batch(home, source, batch_id)] for batch_id in (
        "trips/2026/t1", "trips/2026/t1.jsonl", "trips/2026/t1.jsonl@0123456789abcdef", "payments-01", "t1", "nope")}
    assert found == {"trips/2026/t1": ["trips/2026/t1.jsonl"], "trips/2026/t1.jsonl": ["trips/2026/t1.jsonl"],
                     "trips/2026/t1.jsonl@0123456789abcdef": ["trips/2026/t1.jsonl"],
                     "payments-01": ["payments-01.jsonl"], "t1": [], "nope": []}


def test_a_reingest_reads_its_file_with_the_source_that_takes_it_today(tmp_path):
    home = two_feeds_home(tmp_path)
    no_city = json.dumps({"trip": "t-1", "n": 2, "kind": "Ended", "payload": {}})
    (home.landing / "trips" / "2026" / "t1.jsonl").write_text(trip("t-1", 1, "Requested") + "\n" + no_city + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        ingest_landing(store, home, load_source(home.root / "source.json"), T)
        fixed = {"sources": [PAYMENTS, {**TRIPS, "stream_id": "trip"}]}  # the second line had no city
        (again,) = reingest(store, home, Sources.from_dict(fixed), {"trip"}, ["trips/2026/t1"], T + 1)
        assert (again.batch_id, again.records, again.malformed, again.stream_types) == (
            "trips/2026/t1@reingest-5", 1, 0, {"trip": 1})  # the trips source's mapping, not the payments one
        (home.landing / "trips" / "2026" / "t2.jsonl").write_text(no_city + "\n{oops\n")  # a line undelivered
        ingest_landing(store, home, Sources.from_dict(fixed), T + 2)
        with pytest.raises(ReingestRefused) as refused:  # today no source takes the file
            reingest(store, home, Sources.from_dict({"sources": [PAYMENTS]}), {"trip"}, ["trips/2026/t2"], T + 3)
        assert str(refused.value) == (
            "batch 'trips/2026/t2' cannot be read with the new mapping: no source of source.json takes this file "
            "(they take 1: match 'payments-*.jsonl'); add one whose `match` or `folder` takes it")


def test_with_one_mapping_the_landing_folders_sub_folders_are_not_read_as_before(home):
    (home.landing / "b1.jsonl").write_text(opened("a") + "\n")
    (home.landing / "archive-of-mine").mkdir()
    (home.landing / "archive-of-mine" / "b0.jsonl").write_text(dep("a", 2, 5) + "\n")
    with Store.open(home, BANK_VIEWS) as store:
        assert [r.batch_id for r in ingest_landing(store, home, load_source(home.root / "source.json"), T)] == ["b1"]
