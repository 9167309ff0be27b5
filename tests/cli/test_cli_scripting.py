"""The CLI for scripts and people, through the real `inorder` console script on one real home of the
shop's views (INORDER_VIEWS=shop.views: a user's domain, not the default bank). One `inorder run`
serves every test of the module; each JSON answer is compared with what the store holds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import duckdb
import pytest

from pipelines.registry import load_views
from pipelines.spark.session import stage_progress
from pipelines.observe.status import blocked_streams, blocked_streams_markdown
from pipelines.engine.outcomes import OUTCOME_COLUMNS
from tests.command import INORDER, clean_environment, inorder

NOW = "2026-11-02T00:00:00Z"
SHOP_VIEWS = ("customers", "order_items", "orders", "shop_daily")
UNKNOWN_VIEW = f"inorder: error: no view named 'nope' (known: {', '.join(SHOP_VIEWS)})"
PROGRESS_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S")


def as_json(env: dict[str, str], *args: str) -> dict:
    return json.loads(inorder(env, *args, "--json").stdout)


def store_rows(home: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    """A home made by `inorder init`, three shop batches generated into it, and one `inorder run --json`."""
    home = tmp_path_factory.mktemp("cli") / "home"
    # a user's shell: none of the run's INORDER_* settings but INORDER_SPARK_CONF, which sets JVM options: the warm
    # server takes them at its start, and the runs' Connect sessions must not warn that they cannot
    env = clean_environment(home, "shop.views", as_a_user=True)
    created = inorder(env, "init", str(home))
    assert created.stdout.startswith(f"created the inorder home {home}")
    assert (home / "landing").is_dir() and (home / "store.duckdb").exists()
    assert inorder(env, "init").stdout.startswith(f"{home} is an inorder home already")
    inorder(env, "generate", "--domain", "shop", "--out", str(home / "landing"), "--events", "1200", "--streams", "30",
            "--batches", "3", "--gaps", "0.05", "--poison", "0.02", "--disorder", "0.2", "--seed", "4")
    return home, env, inorder(env, "run", "--now", NOW, "--json")


def test_generate_numbers_new_batches_on_from_the_highest_in_the_folder(tmp_path):
    env = clean_environment(tmp_path / "unused", "shop.views", as_a_user=True)
    landing = tmp_path / "landing"
    shape = ("--domain", "shop", "--out", str(landing), "--events", "50", "--streams", "5")
    assert "(batch-00001.jsonl to batch-00002.jsonl)" in inorder(env, "generate", *shape, "--batches", "2").stdout
    assert "(batch-00003.jsonl)" in inorder(env, "generate", *shape, "--batches", "1").stdout
    inorder(env, "generate", *shape, "--batches", "1", "--prefix", "extra-")
    assert sorted(p.name for p in landing.iterdir()) == [
        "batch-00001.jsonl", "batch-00002.jsonl", "batch-00003.jsonl", "extra-00001.jsonl"]
    refused = inorder(env, "generate", *shape, "--prefix", "a/b-", code=1)
    assert refused.stderr.splitlines() == ["inorder: error: batch file prefix 'a/b-' must not contain a path separator"]


def test_run_json_says_what_the_store_holds_and_the_terminal_has_only_progress_lines(shop):
    home, env, run = shop
    document = json.loads(run.stdout)
    assert set(document) == {"ran", "caught_up", "batches", "records", "unrouted", "applied", "views", "seconds",
                             "dagster_run_ids", "publish_error", "refused", "checks"}
    # every check of every view ran after the projection, each with its verdict
    assert {name.split(".")[1] for name in document["checks"]} >= {"conservation", "expectations", "no_parked_streams"}
    assert set(document["checks"].values()) <= {"passed", "warned", "failed"}
    assert document["checks"]["orders.no_parked_streams"] == "warned"  # orders parks: a warning, not a failure
    assert document["ran"] == "batches" and document["publish_error"] is None and document["refused"] == {}
    assert document["caught_up"] == []
    ingested = store_rows(home, "SELECT batch_id, entry_idx, status, records, malformed, reason "
                                "FROM inorder.ingest_log WHERE kind = 'batch' ORDER BY entry_idx")
    assert [tuple(b.values())[:6] for b in document["batches"]] == ingested
    shop_types = {"order", "customer"}  # what the shop's views subscribe to
    for batch, (types,) in zip(document["batches"], store_rows(
            home, "SELECT stream_types FROM inorder.ingest_log WHERE kind = 'batch' ORDER BY entry_idx")):
        assert batch["unrouted"] == {t: n for t, n in sorted(types.items()) if t not in shop_types}
    assert document["unrouted"] == {t: sum(b["unrouted"].get(t, 0) for b in document["batches"])
                                    for t in sorted({t for b in document["batches"] for t in b["unrouted"]})}
    assert [b["batch_id"] for b in document["batches"]] == ["batch-00001", "batch-00002", "batch-00003"]
    assert document["records"] == sum(row[3] for row in ingested)
    ledger = {view: dict(zip(("selected", *OUTCOME_COLUMNS, "gaps_skipped"), counts)) for view, *counts in store_rows(
        home, f"SELECT view, sum(selected), {', '.join(f'sum({c})' for c in OUTCOME_COLUMNS)}, sum(gaps_skipped) "
              "FROM inorder.batches GROUP BY view")}
    assert set(document["views"]) == set(SHOP_VIEWS)
    for view, counts in document["views"].items():
        touched = counts.pop("streams_touched")
        assert counts == ledger[view], view
        assert touched == store_rows(home, "SELECT count(*) FROM inorder.watermarks WHERE view = ?", [view])[0][0]
    assert document["applied"] == sum(c["applied"] for c in ledger.values()) > 0
    assert len(document["dagster_run_ids"]) == 1  # one run ingests the three batches and projects them

    lines = run.stderr.splitlines()
    assert lines and all(PROGRESS_LINE.match(line) for line in lines), run.stderr  # no JVM, log4j or Dagster lines
    assert any(line.endswith("] pass 1/1: committing") for line in lines)
    assert any("ingest 3/3 batch-00003.jsonl: archived" in line for line in lines)


@pytest.mark.parametrize("rows, read", [(100_000, 1), (1, 0)], ids=["rows past the pipe's buffer", "one row"])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(shop, rows, read):
    """`inorder query … | head -1`, or a reader gone before the first row: the output meets a closed pipe, as
    `print` writes it or as the command's last output is flushed (stdout buffered, as in a user's shell). The
    command stops there, with no error line and without Python's own complaint at exit."""
    _, env, _ = shop
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    command = subprocess.Popen([INORDER, "query", "--format", "csv",
                                f"SELECT range AS n, repeat('x', 80) AS pad FROM range({rows})"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(command.stdout.read(read)) == read  # the first rows came, or none; then the reader goes away
    command.stdout.close()
    assert command.wait(timeout=60) == 1
    assert command.stderr.read() == b""


def test_read_commands_load_no_dagster_spark_great_expectations_or_psycopg(shop):
    """`status`, `errors`, `pending`, `query` and `--help` answer in about a second: none of them imports Dagster,
    Spark, Great Expectations, or (on a store that does not publish to PostgreSQL) psycopg."""
    home, env, _ = shop
    for command in (["status"], ["errors"], ["pending"], ["query", "SELECT 1"], ["--help"]):
        imported = subprocess.run(
            [sys.executable, "-c", "import json, sys\nfrom inorder.cli import main\ntry: main(json.loads(sys.argv[1]))\n"
             "finally: print(sorted(m for m in ('dagster', 'pyspark', 'great_expectations', 'psycopg') "
             "if m in sys.modules))", json.dumps(command)], env=env, capture_output=True, text=True, check=False)
        assert imported.stdout.splitlines()[-1] == "[]", (command, imported.stdout[-2000:] + imported.stderr[-2000:])


def test_status_json_has_what_status_prints_and_pipes_into_json_tool(shop):
    home, env, _ = shop
    status = inorder(env, "status", "--json")
    assert subprocess.run([sys.executable, "-m", "json.tool"], input=status.stdout, capture_output=True,
                          text=True).returncode == 0
    document = json.loads(status.stdout)
    assert set(document) == {"logical_time", "batches", "records", "normalised", "malformed", "rejected", "views",
                             "postgres", "unrouted", "subscribed_stream_types", "reingested", "views_not_loaded"}
    assert document["postgres"] is None  # INORDER_SERVE_POSTGRES is not set
    assert document["subscribed_stream_types"] == ["customer", "order"] and document["reingested"] == []
    assert document["views_not_loaded"] == []
    types: dict[str, int] = {}
    for (counts,) in store_rows(home, "SELECT stream_types FROM inorder.ingest_log WHERE kind = 'batch'"):
        for stream_type, n in counts.items():
            types[stream_type] = types.get(stream_type, 0) + n
    assert document["unrouted"] == {t: n for t, n in sorted(types.items()) if t not in ("customer", "order")}
    assert document["logical_time"] == "2026-11-02T00:00:00+00:00" and document["rejected"] == []
    (records, malformed, normalised, batches), = store_rows(
        home, "SELECT sum(records), sum(malformed), sum(normalised), count(*) FROM inorder.ingest_log "
              "WHERE kind = 'batch'")
    assert (document["records"], document["malformed"], document["normalised"], document["batches"]) == (
        records, malformed, normalised, batches)
    text = inorder(env, "status").stdout.splitlines()
    assert [v["view"] for v in document["views"]] == list(SHOP_VIEWS)
    for v in document["views"]:
        assert set(v) == {"view", "streams", "selected", "outcomes", "pending", "blocked_streams",
                          "oldest_wait_seconds", "parked_streams", "rejects", "bugs", "gaps_skipped", "rows", "conserved",
                          "errors_by_kind", "last_batch", "code", "rebuild_shadow"}
        (fingerprint,), = store_rows(home, "SELECT fingerprint FROM inorder.view_versions WHERE view = ?", [v["view"]])
        assert v["code"]["matches"] and v["code"]["stored_fingerprint"] == fingerprint == v["code"]["fingerprint"]
        assert v["rebuild_shadow"] is None  # no rebuild under way or interrupted
        assert f"{v['view']}: code {fingerprint}, store {fingerprint}: matches the store" in text
        (selected, *outcomes), = store_rows(
            home, f"SELECT sum(selected), {', '.join(f'sum({c})' for c in OUTCOME_COLUMNS)} FROM inorder.batches "
                  "WHERE view = ?", [v["view"]])
        assert (v["selected"], v["outcomes"]) == (selected, dict(zip(OUTCOME_COLUMNS, outcomes)))
        (pending,), = store_rows(home, "SELECT count(*) FROM inorder.pending WHERE view = ?", [v["view"]])
        assert v["pending"] == pending
        assert v["conserved"] is True and v["last_batch"] == "batch-00003"
        assert v["errors_by_kind"] == dict(store_rows(
            home, "SELECT kind, count(*) FROM inorder.errors WHERE view = ? GROUP BY kind ORDER BY kind", [v["view"]]))
        assert v["rows"] == {table: n for table, (n,) in (
            (table, *store_rows(home, f'SELECT count(*) FROM "{table}"')) for table in v["rows"])}
        (row,) = [line for line in text if re.match(rf"^{v['view']}\s+\d", line)]  # the text table's row
        cells = [c.replace(",", "") for c in row.split()]
        assert [int(c) for c in cells[1:4]] == [v["streams"], v["selected"], v["outcomes"]["applied"]]
        assert cells[-1] == "yes" and int(cells[-2]) == v["parked_streams"] and int(cells[-3]) == v["blocked_streams"]
    assert sum(v["parked_streams"] for v in document["views"]) > 0  # orders parks; pending below shows them


def test_status_json_says_where_postgresql_stands(shop, postgres):
    """With INORDER_SERVE_POSTGRES, `postgres` holds what pipelines.serve.publish.read_positions returns."""
    home, env, _ = shop
    down = as_json({**env, "INORDER_SERVE_POSTGRES": "host=127.0.0.1 port=1 connect_timeout=1"}, "status")["postgres"]
    assert down["views"] == [] and down["error"].startswith("cannot connect to PostgreSQL")
    served = {**env, "INORDER_SERVE_POSTGRES": postgres, "INORDER_SERVE_SCHEMA": "cli_scripting"}
    (last_entry,), = store_rows(home, "SELECT max(entry_idx) FROM inorder.batches")
    assert as_json(served, "status")["postgres"] == {"error": None, "views": [
        {"view": v, "committed_entry": last_entry, "published_entry": None, "behind_entries": 3, "current": False}
        for v in SHOP_VIEWS]}
    inorder(served, "publish")
    assert as_json(served, "status")["postgres"] == {"error": None, "views": [
        {"view": v, "committed_entry": last_entry, "published_entry": last_entry, "behind_entries": 0, "current": True}
        for v in SHOP_VIEWS]}


def test_errors_newest_first_with_filters_a_header_and_a_total(shop):
    home, env, _ = shop
    every = as_json(env, "errors", "--limit", "100000")
    assert set(every) == {"total", "superseded", "errors"} and every["superseded"] == 0  # no re-ingest here
    stored = store_rows(home, "SELECT error_id, kind, view, batch_id FROM inorder.errors ORDER BY error_id DESC")
    assert every["total"] == len(stored) > 0
    assert [(e["error_id"], e["kind"], e["view"], e["batch_id"]) for e in every["errors"]] == stored
    assert set(every["errors"][0]) == {"error_id", "kind", "error_class", "view", "stream_id", "seq", "event_type",
                                       "batch_id", "line", "logged_at", "reason", "superseded_by"}

    of_batch = as_json(env, "errors", "--batch", "batch-00002", "--kind", "handler_error", "--view", "orders")
    assert of_batch["total"] == sum(1 for _, kind, view, batch in stored
                                    if (kind, view, batch) == ("handler_error", "orders", "batch-00002")) > 0
    assert {(e["kind"], e["view"], e["batch_id"]) for e in of_batch["errors"]} == {
        ("handler_error", "orders", "batch-00002")}
    assert as_json(env, "errors", "--since", NOW)["total"] == len(stored)  # every error was logged at NOW
    assert as_json(env, "errors", "--since", "2026-11-02T00:00:01Z") == {"total": 0, "superseded": 0, "errors": []}

    text = inorder(env, "errors", "--limit", "3").stdout.splitlines()
    assert text[0].split() == ["id", "kind", "view", "stream", "seq", "batch:line", "logged", "at", "reason"]
    assert [int(line.split()[0]) for line in text[2:5]] == [row[0] for row in stored[:3]]
    assert text[5:] == [f"{len(stored):,} error log rows (a parked message logs one per failed attempt), 3 shown "
                        "(--limit 3); newest first"]


def test_pending_lists_blocked_and_parked_streams_oldest_first(shop):
    home, env, _ = shop
    views = {v.name: v for v in load_views("shop.views")}
    document = as_json(env, "pending", "--limit", "100000")
    stored = store_rows(home, "SELECT view, stream_id, last_seq + 1, pending_count, blocked_since, parked "
                              "FROM inorder.watermarks WHERE blocked_at IS NOT NULL OR parked")
    assert document["total"] == len(stored) == len(document["streams"])
    assert {s["parked"] for s in document["streams"]} == {True, False}  # both kinds are there to check
    by_key = {(view, stream): row for view, stream, *row in stored}
    for s in document["streams"]:
        assert set(s) == {"view", "stream_id", "waiting_for_seq", "pending", "blocked_since", "times_out_at", "parked"}
        waiting_for, pending, since, parked = by_key[(s["view"], s["stream_id"])]
        assert (s["waiting_for_seq"], s["pending"], s["parked"]) == (waiting_for, pending, parked)
        if parked:  # no timer: it waits for an operator, since its message first failed
            assert s["times_out_at"] is None and s["blocked_since"] == "2026-11-02T00:00:00+00:00"
        else:
            assert datetime.fromisoformat(s["blocked_since"]) == since
            assert datetime.fromisoformat(s["times_out_at"]) == since + timedelta(seconds=views[s["view"]].gap_timeout)
    keys = [(s["blocked_since"], s["view"], s["stream_id"]) for s in document["streams"]]
    assert keys == sorted(keys)

    orders = as_json(env, "pending", "--view", "orders", "--limit", "2")
    assert orders["total"] == sum(1 for view, *_ in stored if view == "orders")
    assert [s["view"] for s in orders["streams"]] == ["orders", "orders"]
    text = inorder(env, "pending", "--view", "orders", "--limit", "2").stdout.splitlines()
    assert text[0].split() == ["view", "stream", "waiting", "for", "seq", "pending", "blocked", "since", "times", "out",
                               "at"]
    assert [line.split()[1] for line in text[2:4]] == [s["stream_id"] for s in orders["streams"]]
    assert all(line.split()[-1] == "parked" for line in text[2:4] if line.split()[1] in {
        s["stream_id"] for s in orders["streams"] if s["parked"]})
    assert text[4:] == [f"{orders['total']} streams cannot move on: {orders['blocked']} blocked by a gap, "
                        f"{orders['parked']} parked, 2 shown (--limit 2); oldest blocked first; "
                        "times are logical (the batches' received_at)"]


def test_blocked_streams_markdown_for_the_views_metadata(shop):
    home, _, _ = shop
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        blocked = blocked_streams(con, load_views("shop.views"), "orders", limit=3)
    finally:
        con.close()
    assert blocked.total > 3
    lines = blocked_streams_markdown(blocked).splitlines()
    assert lines[0] == blocked.describe() and lines[1] == ""
    assert lines[2] == "| view | stream | waiting for seq | pending | blocked since | times out at |"
    assert [line.split(" | ")[1] for line in lines[4:7]] == [s.stream_id for s in blocked.oldest]
    assert lines[-1] == f"… and {blocked.total - 3} more (`inorder pending`)"


def test_an_unknown_view_or_kind_is_refused_listing_the_known_ones(shop):
    _, env, _ = shop
    for command in (["errors", "--view", "nope"], ["pending", "--view", "nope"], ["retry", "--view", "nope", "--all"],
                    ["skip", "--view", "nope", "--stream", "x"], ["rebuild", "nope"], ["publish", "--full", "nope"]):
        assert inorder(env, *command, code=1).stderr.splitlines() == [UNKNOWN_VIEW], command
    (kind,) = inorder(env, "errors", "--kind", "nope", code=2).stderr.splitlines()  # one line, no usage
    assert kind == ("inorder errors: error: argument --kind: invalid choice: 'nope' (choose from 'malformed', "
                    "'handler_error', 'late', 'conflict') (`inorder errors --help` lists the options)")


def test_a_folder_that_is_not_a_home_is_refused_in_one_line_and_left_alone(tmp_path):
    typo = tmp_path / "hoem"
    env = clean_environment(typo, "shop.views", as_a_user=True)
    refusal = (f"inorder: error: no inorder home at {typo} (neither {typo / 'landing'} nor {typo / 'store.duckdb'} "
               f"exists): check INORDER_HOME, or create one with `inorder init {typo}`")
    for command in (["run"], ["status"], ["errors"], ["pending"], ["query", "SELECT 1"], ["retry", "--view", "orders",
                    "--all"], ["skip", "--view", "orders", "--all"], ["rebuild", "orders"], ["publish"]):
        assert inorder(env, *command, code=1).stderr.splitlines() == [refusal], command
    assert not typo.exists()


def test_version_is_the_package_version():
    assert inorder(clean_environment(), "--version").stdout == f"inorder {version('inorder')}\n"


def test_stage_progress_says_where_the_spark_job_is(spark):
    said: list[str] = []
    with stage_progress("pass 1/1", said.append, every_seconds=0.5):
        spark.sparkContext.parallelize(range(8), 8).map(lambda x: time.sleep(0.6) or x).collect()
    # 8/8: every task done, the job not yet ended (a poll on a loaded machine catches that moment too)
    assert said and all(re.fullmatch(r"pass 1/1: stage 1/1 \([0-8]/8 tasks\)", line) for line in said), said
