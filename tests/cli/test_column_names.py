"""DESIGN §5: column names are the user's. A view whose columns are named like the engine's own
(tests/clashing_views.py) runs through the real `inorder` command, across two runs, and its store
equals the in-memory kit's replay and a plain-Python computation of the same tables."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb

from pipelines.testing import replay
from tests.clashing_views import CLASHING
from tests.command import REPO, clean_environment, inorder


def records() -> list[dict]:
    """Three streams of notes in two categories, each stream's events in order of seq."""
    out = []
    for s, stream in enumerate(("s-1", "s-2", "s-3")):
        for seq in range(1, 6):
            out.append({"stream_id": stream, "stream_type": "thing", "seq": seq,
                        "type": "Noted" if seq % 2 else "Amended",
                        "payload": {"category": "ab"[(s + seq) % 2], "amount": f"{seq}.{s}5", "text": f"{stream}:{seq}"}})
    return out


def expected(all_records: list[dict], batch_of: dict[tuple[str, int], str]) -> dict[str, list[dict]]:
    """The three tables as plain Python computes them from the records in stream order."""
    notes: dict[tuple[str, str], dict] = {}
    log: list[dict] = []
    totals: dict[tuple[str, str], dict] = {}
    lines: dict[str, int] = {}
    for r in sorted(all_records, key=lambda r: (r["stream_id"], r["seq"])):
        stream, kind, p = r["stream_id"], r["type"], r["payload"]
        before = notes.get((stream, kind), {"state": Decimal(0), "n": 0})
        notes[(stream, kind)] = {"view": stream, "kind": kind, "stream_id": p["category"], "seq": r["seq"],
                                 "data": p["text"], "state": before["state"] + Decimal(p["amount"]),
                                 "n": before["n"] + 1}
        lines[stream] = lines.get(stream, 0) + 1
        log.append({"name": stream, "stream_id": f"{r['seq']:05d}", "entry_idx": r["seq"], "line": lines[stream],
                    "payload": p["text"], "event_type": kind, "batch_id": batch_of[(stream, r["seq"])],
                    "view": p["category"]})
        total = totals.setdefault((p["category"], kind), {"stream_id": p["category"], "kind": kind, "n": 0, "seq": 0})
        total["n"] += 1
        total["seq"] += r["seq"]
    return {"notes": sorted(notes.values(), key=lambda row: (row["view"], row["kind"])),
            "log": sorted(log, key=lambda row: (row["name"], row["stream_id"])),
            "totals": sorted(totals.values(), key=lambda row: (row["stream_id"], row["kind"]))}


def store_tables(home: Path) -> dict[str, list[dict]]:
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        out = {}
        for table in CLASHING.tables:
            keys = ", ".join(f'"{c}"' for c in table.primary_key)
            cursor = con.execute(f'SELECT * FROM "{table.name}" ORDER BY {keys}')
            names = [d[0] for d in cursor.description]
            out[table.name] = [dict(zip(names, row)) for row in cursor.fetchall()]
        return out
    finally:
        con.close()


def test_a_view_with_the_engines_column_names_runs_through_the_cli_as_replay_and_plain_python_say(tmp_path):
    everything = records()
    # batch 1: each stream's seq 1-3 (out of order); batch 2: seq 4-5, so the second run starts from
    # keyed rows, an append table's newest row and aggregate sums the first one stored
    first = [r for r in everything if r["seq"] <= 3][::-1]
    second = [r for r in everything if r["seq"] > 3]
    batch_of = {(r["stream_id"], r["seq"]): "b1" if r["seq"] <= 3 else "b2" for r in everything}
    home = tmp_path / "home"
    env = clean_environment(home, "tests.clashing_views", path=(REPO,), as_a_user=True)
    inorder(env, "init", str(home), cwd=REPO)
    (home / "landing" / "b1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    inorder(env, "run", "--now", "2026-05-01T00:00:00Z", cwd=REPO)
    (home / "landing" / "b2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in second))
    inorder(env, "run", "--now", "2026-05-01T01:00:00Z", cwd=REPO)

    stored = store_tables(home)
    plain = expected(everything, batch_of)
    assert stored == plain
    assert [row["line"] for row in stored["log"] if row["name"] == "s-2"] == [1, 2, 3, 4, 5]
    replayed = replay(CLASHING, everything).tables
    assert replayed["notes"] == plain["notes"] and replayed["totals"] == plain["totals"]
    # replay runs one batch: its log rows all say "replay"
    assert replayed["log"] == [{**row, "batch_id": "replay"} for row in plain["log"]]
