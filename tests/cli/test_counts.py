"""One count, one name: `inorder status`, `pending` and `errors` (text and --json) and the views' Dagster
materialisation metadata give the same numbers for the same things, on one real store built by
`inorder run` (Spark, through Dagster): the bank's views and tests/counts_views.py's `audit` over a
few accounts with a business refusal, a bug (retried once, so it logs two rows), a gap that blocks
the stream in every view, a landing file that cannot be read, and records malformed until `source.json` is
fixed, then re-ingested."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.builders import dep, msg, opened, wd
from tests.cli.test_cli_scripting import as_json, store_rows
from tests.command import REPO, clean_environment, inorder

VIEWS = ("accounts", "account_activity", "daily_totals", "audit")
FIRST = [opened("acct-1"), dep("acct-1", 2, 50), wd("acct-1", 3, 500),  # insufficient funds: a reject
         opened("acct-2"), dep("acct-2", 3, 10),  # seq 2 never comes: blocked in every view
         opened("acct-3"), dep("acct-3", 2, 5000), dep("acct-3", 3, 5),  # a bug in audit: parked there
         opened("acct-4"), dep("acct-4", 2, "abc")]  # not an amount: a reject in every view
SECOND = [opened("acct-5"), msg("acct-5", 2, "Deposited", amount=7)]
# acct-1's next deposits in a second feed's shape (`account`, `n`): malformed until source.json maps that shape,
# then re-ingested; and a line no mapping reads, malformed again by the re-ingest
FIXED_MAPPING = {"stream_id": "account", "seq": "n"}


def second_shape(line: str) -> str:
    record = json.loads(line)
    return json.dumps({"account": record.pop("stream_id"), "n": record.pop("seq"), **record})


OTHER_SHAPE = [second_shape(dep("acct-1", seq, 1)) for seq in (4, 5, 6)] + ["{not json"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    home = tmp_path_factory.mktemp("counts") / "home"
    # the subprocesses import tests.counts_views from this repository, wherever they start
    env = clean_environment(home, "views,tests.counts_views", path=(REPO,), as_a_user=True)
    inorder(env, "init", str(home))
    (home / "landing" / "b1.jsonl").write_text("".join(line + "\n" for line in FIRST + OTHER_SHAPE))
    (home / "landing" / "broken.parquet").write_bytes(b"not parquet at all")
    inorder(env, "run", "--now", "2026-11-02T00:00:00Z")
    retried = inorder(env, "retry", "--view", "audit", "--all").stdout  # the bug is still there: a second error row
    assert retried.splitlines() == [
        "retry of 1 parked stream of audit committed: 1 stream parked again: the retried message failed again "
        "(acct-3 seq 2, attempt 2; `inorder errors --view audit --kind handler_error` says why)"]
    (home / "source.json").write_text(json.dumps(FIXED_MAPPING))
    reingested = inorder(env, "reingest", "b1", "--now", "2026-11-02T00:00:30Z").stdout
    assert reingested.startswith("re-ingested b1@reingest-4 (entry 4, superseding entry 1): 4 records, 1 malformed")
    (home / "landing" / "b2.jsonl").write_text("".join(second_shape(line) + "\n" for line in SECOND))
    inorder(env, "run", "--now", "2026-11-02T00:01:00Z")  # its metadata holds the totals after the retry
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    metadata = {}
    for key in (*VIEWS, "errors"):
        event = instance.get_latest_materialization_event(dg.AssetKey(key))
        metadata[key] = {name: value.value for name, value in event.asset_materialization.metadata.items()}
    return env, as_json(env, "status"), metadata


def test_the_scenario_has_every_kind_of_count(scenario):
    _, status, _ = scenario
    views = status["views"]
    assert sorted(v["view"] for v in views) == sorted(VIEWS) and [r["batch_id"] for r in status["rejected"]] == ["broken"]
    counts = {v["view"]: (v["rejects"], v["bugs"], v["blocked_streams"], v["parked_streams"]) for v in views}
    assert counts == {"accounts": (2, 0, 1, 0), "account_activity": (1, 0, 1, 0), "daily_totals": (1, 0, 1, 0),
                      "audit": (1, 1, 1, 1)}
    (audit,) = [v for v in views if v["view"] == "audit"]
    # the outcome counts a message the watermark moved past; the log, every failed attempt
    assert audit["outcomes"]["handler_error"] == 1 and audit["errors_by_kind"] == {"handler_error": 3}
    assert audit["rows"] == {"audit_accounts": 5, "audit_types": 2}


def test_status_pending_errors_and_the_dagster_metadata_agree(scenario):
    env, status, metadata = scenario
    every = as_json(env, "pending", "--limit", "100000")
    assert every["total"] == every["blocked"] + every["parked"] == len(every["streams"])
    assert every["blocked"] == sum(v["blocked_streams"] for v in status["views"])
    assert every["parked"] == sum(v["parked_streams"] for v in status["views"])
    assert every["distinct_streams"] == len({s["stream_id"] for s in every["streams"]})
    for v in status["views"]:
        name, meta = v["view"], metadata[v["view"]]
        pending = as_json(env, "pending", "--view", name, "--limit", "100000")
        assert (pending["blocked"], pending["parked"]) == (v["blocked_streams"], v["parked_streams"]) == (
            meta["total/blocked_streams"], meta["total/parked_streams"]), name
        assert sum(not s["parked"] for s in pending["streams"]) == pending["blocked"]
        refused = as_json(env, "errors", "--view", name, "--kind", "handler_error", "--limit", "100000")
        assert refused["total"] == v["errors_by_kind"].get("handler_error", 0) == len(refused["errors"])
        newest_class = {}
        for e in reversed(refused["errors"]):  # oldest first: a message's class is its newest attempt's
            newest_class[(e["stream_id"], e["seq"])] = e["error_class"]
        classes = list(newest_class.values())
        assert (classes.count("reject"), classes.count("bug")) == (v["rejects"], v["bugs"]) == (
            meta["total/rejects"], meta["total/bugs"]), name
        assert v["outcomes"]["handler_error"] == meta["total/handler_error"]
        assert v["rows"] == {key.removeprefix("rows/"): n for key, n in meta.items() if key.startswith("rows/")}
        assert meta.get("dagster/row_count") == (next(iter(v["rows"].values())) if len(v["rows"]) == 1 else None)
    logged = as_json(env, "errors", "--limit", "0")
    assert logged["total"] == metadata["errors"]["total"] == sum(
        n for v in status["views"] for n in v["errors_by_kind"].values()) + metadata["errors"].get("kind/malformed", 0)
    assert metadata["errors"]["rejected_batches"] == len(status["rejected"])


def test_after_a_reingest_status_errors_the_ledger_and_the_errors_asset_count_the_same_malformed(scenario):
    """Issue 33 finding 5, issue 36 item 3: the re-ingest supersedes b1's 4 malformed rows (its 3 lines now
    delivered, and `{not json`, logged again under the re-ingest), and logs none of the 10 lines b1 delivered,
    which the new mapping cannot read."""
    env, status, metadata = scenario
    home = Path(env["INORDER_HOME"])
    ((_, again, carried),) = [tuple(r.values()) for r in status["reingested"]]
    counted = as_json(env, "errors", "--kind", "malformed", "--limit", "100000")
    assert status["malformed"] == counted["total"] == len(counted["errors"]) == 1
    assert metadata["errors"]["kind/malformed"] == counted["total"]
    assert counted["superseded"] == metadata["errors"]["superseded_malformed"] == 4
    assert [(e["batch_id"], e["line"], e["superseded_by"]) for e in counted["errors"]] == [(again, 14, None)]
    every = as_json(env, "errors", "--kind", "malformed", "--superseded", "--limit", "100000")
    assert (every["total"], every["superseded"]) == (5, 4)
    assert sorted((e["batch_id"], e["line"], e["superseded_by"]) for e in every["errors"]) == [
        ("b1", line, again) for line in (11, 12, 13, 14)] + [(again, 14, None)]
    said = inorder(env, "errors", "--kind", "malformed").stdout.splitlines()[-1]
    assert said.startswith("1 error log row (a parked message logs one per failed attempt); 4 malformed rows a "
                           "re-ingest superseded left out (--superseded lists them)"), said
    # the ledger: each batch's newest entry counts, and each view's ledger rows agree with the ingest log
    newest = store_rows(home, "SELECT batch_id, records, malformed FROM inorder.ingest_log WHERE kind = 'batch' "
                              "AND status = 'archived' AND entry_idx NOT IN (SELECT reingest_of FROM "
                              "inorder.ingest_log WHERE reingest_of IS NOT NULL) ORDER BY entry_idx")
    assert newest == [(again, carried, 1), ("b2", 2, 0)]
    assert sum(malformed for _, _, malformed in newest) == status["malformed"]
    ledger = "SELECT DISTINCT batch_id, malformed FROM inorder.batches WHERE kind = 'batch' ORDER BY ALL"
    assert store_rows(home, ledger) == [
        ("b1", 4), (again, 1), ("b2", 0)]
    assert status["records"] == len(FIRST + OTHER_SHAPE) + len(SECOND) and carried == len(OTHER_SHAPE)


def test_a_run_whose_checks_failed_is_tagged_so_it_does_not_look_plain_green(scenario):
    from assets.sensors import CHECKS_TAG, FAILED_CHECKS_TAG, tag_runs_whose_checks_failed

    env, _, _ = scenario
    instance = dg.DagsterInstance.from_config(str(Path(env["INORDER_HOME"]) / "dagster"))
    (run,) = instance.get_runs(limit=1)  # the second `inorder run`'s: a success, its checks not all passed
    assert run.status == dg.DagsterRunStatus.SUCCESS
    verdicts = [e.dagster_event.event_specific_data for e in
                instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
    failed = sorted(f"{v.asset_key.to_user_string()}.{v.check_name}" for v in verdicts
                    if not v.passed and v.severity == dg.AssetCheckSeverity.ERROR)
    warned = sum(not v.passed and v.severity == dg.AssetCheckSeverity.WARN for v in verdicts)
    assert warned >= 1  # audit's parked stream
    expected = {CHECKS_TAG: f"{len(failed)} failed, {warned} warned"}
    assert run.tags[CHECKS_TAG] == expected[CHECKS_TAG] and failed  # by the CLI; and which failed, in at most 200
    listed = run.tags[FAILED_CHECKS_TAG]
    assert len(listed) <= 200 and ", ".join(failed).startswith(listed.removesuffix("…")) and failed[0] in listed
    success = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS).records[0]
    said = tag_runs_whose_checks_failed(dg.build_run_status_sensor_context(  # and by the sensor, for the daemon's
        sensor_name="tag_runs_whose_checks_failed", dagster_event=success.event_log_entry.dagster_event,
        dagster_instance=instance, dagster_run=run))
    assert said.skip_message == f"tagged {expected[CHECKS_TAG]}"


def test_newest_errors_in_the_metadata_show_the_reason_before_the_columns_a_panel_can_cut(scenario):
    _, _, metadata = scenario
    own = metadata["audit"]["newest_errors"].splitlines()
    assert own[0] == "| id | kind | stream | seq | reason | batch:line | logged at |"
    assert any("| KeyError: " in line for line in own[2:])  # the bug's reason, in its column
    assert metadata["errors"]["newest_errors"].splitlines()[0] == \
        "| id | kind | view | stream | seq | reason | batch:line | logged at |"


def test_the_text_says_what_each_number_counts_and_fits_100_columns(scenario):
    env, status, _ = scenario
    text = inorder(env, "status").stdout.splitlines()
    top = next(i for i, line in enumerate(text) if line.startswith("view "))
    assert max(len(line) for line in text[top:top + len(status["views"]) + 1]) <= 100  # the table
    header = text[top].split()
    assert header == ["view", "streams", "selected", "applied", "rejects", "bugs", "pending", "blocked", "parked",
                      "conserved"]
    for v in status["views"]:
        (row,) = [line.split() for line in text if re.match(rf"^{v['view']}\s+\d", line)]
        cells = dict(zip(header, row))
        assert [int(cells[c].replace(",", "")) for c in ("rejects", "bugs", "blocked", "parked")] == [
            v["rejects"], v["bugs"], v["blocked_streams"], v["parked_streams"]]
        rows = ", ".join(f"{t} {n:,}" for t, n in v["rows"].items())
        assert any(line.startswith(f"{v['view']}: rows {rows}; error log rows ") for line in text)
    wide = next(line for line in inorder(env, "status", "--wide").stdout.splitlines() if line.startswith("view "))
    wide = wide.split()
    assert {"ignored", "handler_error", "dupes", "late", "conflicts", "gaps"} <= set(wide)
    every = as_json(env, "pending", "--limit", "0")
    summary = inorder(env, "pending", "--limit", "0").stdout.splitlines()[-1]
    assert summary.startswith(f"{every['total']:,} (view, stream) pairs ({every['distinct_streams']:,} distinct "
                              f"streams) cannot move on: {every['blocked']:,} blocked by a gap, "
                              f"{every['parked']:,} parked")


def test_checks_says_each_checks_latest_verdict_and_the_message_behind_a_failing_row(scenario):
    """Issue 33 item 5: `inorder checks` reads the verdicts the last run recorded, from the home's instance. audit's
    expectation fails on acct-1 (4 deposits), whose newest applied deposit is the re-ingest's line 13."""
    from assets.sensors import check_verdicts

    env, status, _ = scenario
    ((_, again, _),) = [tuple(r.values()) for r in status["reingested"]]
    document = json.loads(inorder(env, "checks", "--json", code=6).stdout)  # 6: a check failed
    instance = dg.DagsterInstance.from_config(str(Path(env["INORDER_HOME"]) / "dagster"))
    (run,) = instance.get_runs(limit=1)  # the second `inorder run`, which evaluated every check
    recorded = {f"{asset}.{check}": verdict for (asset, check), verdict in check_verdicts(instance, run.run_id).items()}
    listed = {f"{c['asset']}.{c['check']}": c["verdict"] for c in document["checks"]}
    assert listed == recorded and "event_batches.file_not_rejected" in listed  # what the run counted, `checks` lists
    assert {k: document[k] for k in ("evaluated", "passed", "warned", "failed")} == {
        "evaluated": True, **{v: list(listed.values()).count(v) for v in ("passed", "warned", "failed")}}
    (expectations,) = [c for c in document["checks"] if (c["asset"], c["check"]) == ("audit", "expectations")]
    assert (expectations["verdict"], expectations["severity"], expectations["run_id"]) == ("failed", "ERROR", run.run_id)
    assert expectations["metadata"]["failing_row_writers"] == [
        {"table": "audit_accounts", "expectation": "expect_column_values_to_be_between",
         "row": "4 (account_id='acct-1')", "stream_id": "acct-1",
         "applied": {"seq": 6, "event_type": "Deposited", "batch_id": again, "line": 13}}]
    assert expectations["next_command"] == "(fix the handler that wrote them, or the expectation, then: inorder " \
                                           "rebuild audit)"

    text = inorder(env, "checks", "--view", "audit", code=6).stdout.splitlines()
    assert text[0].startswith("audit: latest verdicts, evaluated at ") and text[0].endswith(f"(run {run.run_id})")
    assert "  expectations: FAILED: 1 of 1 expectations of suite audit failed" in text
    assert any(line.startswith("      | ✗ | expect_column_values_to_be_between | audit_accounts.deposits |")
               for line in text)  # the GX results table
    assert f"| acct-1 | seq 6 Deposited (batch {again}, line 13) |" in next(line for line in text if "acct-1" in line)
    assert "    next: (fix the handler that wrote them, or the expectation, then: inorder rebuild audit)" in text
    assert "  conservation: passed" in text and not any(line.startswith("event_batches") for line in text)
    assert text[-1].startswith("checks: ") and "(failed: audit.expectations" in text[-1]
    # a read command: Dagster's instance, and neither Spark nor Great Expectations
    imported = subprocess.run([sys.executable, "-c", "import sys\nfrom inorder.cli import main\ntry: main(['checks'])\n"
                               "finally: print(sorted(m for m in ('dagster', 'pyspark', 'great_expectations') "
                               "if m in sys.modules))"], env=env, capture_output=True, text=True, check=False)
    assert imported.stdout.splitlines()[-1] == "['dagster']", imported.stdout + imported.stderr


def test_checks_on_a_home_no_run_has_checked_says_so(tmp_path):
    env = clean_environment(tmp_path / "home", "shop.views", as_a_user=True)
    inorder(env, "init", str(tmp_path / "home"))
    assert inorder(env, "checks").stdout == (f"no check has been evaluated on {tmp_path / 'home'} yet: `inorder run` "
                                             "evaluates every check after it projects\n")
    document = as_json(env, "checks")
    assert (document["evaluated"], document["failed"]) == (False, 0)
    assert {c["verdict"] for c in document["checks"]} == {None} and not (tmp_path / "home" / "dagster").exists()


def test_errors_of_one_stream_and_one_row_whole(scenario):
    """Issue 33 item 7: `--stream` filters; `--id` shows a row with its payload, traceback and reason."""
    env, _, _ = scenario
    every = as_json(env, "errors", "--limit", "100000")["errors"]
    acct3 = as_json(env, "errors", "--stream", "acct-3", "--limit", "100000")
    assert acct3["errors"] == [e for e in every if e["stream_id"] == "acct-3"] and acct3["total"] == 2  # the bug, twice
    bug = acct3["errors"][0]
    whole = as_json(env, "errors", "--id", str(bug["error_id"]))
    assert {k: whole[k] for k in bug if k != "logged_at"} == {k: v for k, v in bug.items() if k != "logged_at"}
    assert json.loads(whole["payload"]) == {"amount": 5000} and whole["exception_type"] == "KeyError"
    assert whole["traceback"].rstrip().endswith("KeyError: 'currency'")
    text = inorder(env, "errors", "--id", str(bug["error_id"])).stdout.splitlines()
    assert f"error_id: {bug['error_id']}" in text and f"reason: {bug['reason']}" in text
    assert f"payload: {whole['payload']}" in text and "traceback:" in text
    assert "    KeyError: 'currency'" in text[text.index("traceback:"):]  # its lines, indented under its name
    missing = inorder(env, "errors", "--id", "987654", code=1).stderr.splitlines()[-1]  # after the views' notes
    assert missing == "inorder: error: no error log row with id 987654 (`inorder errors` lists them, the id first)"


def test_a_rebuild_warns_of_parked_streams_without_calling_it_a_failure_and_keeps_each_errors_key(scenario):
    """Runs last: it rebuilds `audit`. A rebuild logs the view's error rows anew, so an error_id may not
    survive it (docs/CLI.md); the key that does is (view, stream_id, seq, kind, attempt)."""
    env, _, _ = scenario

    def keyed() -> dict[tuple, int]:
        rows = as_json(env, "errors", "--view", "audit", "--limit", "100000")["errors"]
        attempts: dict[tuple, int] = {}
        found = {}
        for e in reversed(rows):  # oldest first: the n-th row of a message is its n-th attempt
            key = (e["view"], e["stream_id"], e["seq"], e["kind"])
            attempts[key] = attempts.get(key, 0) + 1
            found[(*key, attempts[key])] = e["error_id"]
        return found

    before = keyed()
    summary = inorder(env, "rebuild", "audit").stdout.splitlines()[-1]
    checks = re.search(r"checks: (\d+) of (\d+) passed(?: \(failed: ([^)]*)\))? \(warning, not a failure: ([^)]*)\)$",
                       summary)
    assert checks, summary
    passed, ran, failed = int(checks[1]), int(checks[2]), (checks[3] or "").split(", ")
    assert checks[4] == "no_parked_streams" and "no_parked_streams" not in failed  # audit parks acct-3
    assert passed == ran - 1 - len([name for name in failed if name]), summary
    assert set(keyed()) == set(before)  # the same rows, by their stable key (their error_id may differ)
