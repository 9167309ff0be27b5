"""Two feeds in one home (issue 33, item 6), through the real `inorder run`: the branches' batches, in the
default record shape, taken by their file names; a partner's, in its own field names, taken by the sub-folder
of landing/ it lands in. The bank's views get both. A file that no source of source.json takes is refused
with its reason and the way forward, and nothing of it is written. tests/fast/test_sources.py holds the choice of
a mapping fast."""

from __future__ import annotations

import json

from tests.builders import dep, opened, wd
from tests.cli.test_cli_scripting import as_json, store_rows
from tests.command import clean_environment, inorder

SOURCES = {"sources": [
    {"match": "branch-*.jsonl"},  # the default record shape
    {"folder": "partner", "stream_id": "account", "seq": "n", "event_type": "kind", "payload": "data",
     "occurred_at": "at"},
]}


def partner_shape(line: str) -> str:
    record = json.loads(line)
    return json.dumps({"account": record["stream_id"], "n": record["seq"], "kind": record["type"],
                       "data": record["payload"], "at": record["occurred_at"]})


def test_two_feeds_of_different_shapes_reach_the_views_and_a_file_no_source_takes_is_refused(tmp_path):
    home = tmp_path / "home"
    env = clean_environment(home, "views", as_a_user=True)
    inorder(env, "init", str(home))
    (home / "source.json").write_text(json.dumps(SOURCES))
    (home / "landing" / "branch-01.jsonl").write_text("".join(
        line + "\n" for line in (opened("acct-1"), dep("acct-1", 2, 50), wd("acct-1", 3, 20))))
    (home / "landing" / "partner").mkdir()
    (home / "landing" / "partner" / "p-01.jsonl").write_text("".join(
        partner_shape(line) + "\n" for line in (opened("acct-2"), dep("acct-2", 2, 10), dep("acct-2", 3, 5))))
    (home / "landing" / "refunds").mkdir()  # a third feed no source was written for yet
    (home / "landing" / "refunds" / "r-01.jsonl").write_text(dep("acct-1", 4, 99) + "\n")

    ran = inorder(env, "run", "--now", "2026-11-02T00:00:00Z")
    refusal = ("rejected batch refunds/r-01 (entry 3): no source of source.json takes this file (they take 1: "
               "match 'branch-*.jsonl'; 2: folder 'partner'); add one whose `match` or `folder` takes it")
    assert refusal in ran.stdout.splitlines(), ran.stdout
    assert "Next: fix what the reason says (the file, or source.json) and drop the file into the landing folder " \
           "again under a new name" in ran.stdout

    status = as_json(env, "status")
    assert (status["batches"], status["records"], status["malformed"]) == (2, 6, 0)
    assert status["rejected"] == [{"batch_id": "refunds/r-01", "reason": refusal.split(": ", 1)[1]}]
    assert {v["view"]: (v["selected"], v["conserved"]) for v in status["views"]} == {
        "accounts": (6, True), "account_activity": (6, True), "daily_totals": (6, True)}
    assert store_rows(home, "SELECT account_id, balance::VARCHAR, version FROM accounts ORDER BY ALL") == [
        ("acct-1", "30.00", 3), ("acct-2", "15.00", 3)]
    # nothing of the refused file: unread, no archive, no error row, no ledger row; its landing file is as it was
    assert store_rows(home, "SELECT batch_id, file_name, status, sha256 IS NULL FROM inorder.ingest_log "
                            "ORDER BY entry_idx") == [("branch-01", "branch-01.jsonl", "archived", False),
                                                      ("partner/p-01", "partner/p-01.jsonl", "archived", False),
                                                      ("refunds/r-01", "refunds/r-01.jsonl", "rejected", True)]
    assert store_rows(home, "SELECT count(*) FROM inorder.errors") == [(0,)]
    assert store_rows(home, "SELECT DISTINCT batch_id FROM inorder.batches ORDER BY 1") == [
        ("branch-01",), ("partner/p-01",)]
    assert sorted(p.name for p in (home / "archive").iterdir()) == ["entry=000000001", "entry=000000002"]
    assert (home / "landing" / "refunds" / "r-01.jsonl").read_text() == dep("acct-1", 4, 99) + "\n"
