"""The Dagster layer: the graph, materialisations end to end, the sensor, and checks that fail."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import dagster as dg
import duckdb
import pytest

from assets import build_layer
from assets.checks import store_checks
from assets.ingest import FILE_NOT_REJECTED
from assets.tags import NOW_TAG, RANGE_END_TAG, RANGE_START_TAG, TICK_TAG
from inorder.definitions import build_definitions
from pipelines.facade import ingest_batches
from pipelines.observe.expectations import SUITE_HEADER
from pipelines.observe.status import read_status
from pipelines.store.database import Home, Store
from resources import HomeResource, SparkResource
from tests.conservation import store_violations
from tests.harness import across_passes, assert_same_store, read_store
from tests.reference_model import Entry, run_model
from pipelines.registry import view_named
from pipelines.view import Alerts, Thresholds, View
from tests.domains import BANK_VIEWS
from demos.bank import GeneratorConfig, generate

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
LAYER = build_layer(BANK_VIEWS)  # the bank's assets, checks, sensors and schedule, on no home in particular
event_batches, projections, ALL_CHECKS = LAYER.event_batches, LAYER.projections, LAYER.checks
defs = build_definitions(BANK_VIEWS)


def sensor(name: str) -> dg.SensorDefinition:
    return next(s for s in LAYER.sensors if s.name == name)


landing_sensor = sensor("landing_sensor")


def resources_for(home: Home) -> dict:
    return {"spark": SparkResource(), "home": HomeResource(root=str(home.root))}


VIEW_CHECKS = ("expectations", "conservation", "watermarks_never_move_back", "keys_unique", "published",
               "reject_rate", "late_rate", "no_handler_bugs", "no_overdue_blocked_streams", "no_parked_streams")


def test_asset_graph_has_the_expected_keys_and_checks():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"event_batches", "accounts", "account_activity", "daily_totals", "errors", "gaps"}
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert checks == {(v.name, n) for v in BANK_VIEWS for n in VIEW_CHECKS} | {
        ("event_batches", "file_not_rejected"), ("event_batches", "no_new_rejected_files"),
        ("event_batches", "no_new_unrouted_records")}
    for view in BANK_VIEWS:
        assert graph.get(dg.AssetKey(view.name)).parent_keys == {dg.AssetKey("event_batches")}
    assert {"ingest_and_project", "ingest_batch", "project_views", "rebuild_view"} <= \
        {j.name for j in defs.resolve_all_job_defs()}
    assert defs.resolve_sensor_def("landing_sensor") and defs.resolve_schedule_def("tick_schedule")
    assert defs.resolve_sensor_def("project_after_ingest") and defs.resolve_sensor_def("project_after_rejection")
    assert {k.to_user_string() for k in defs.resolve_job_def("ingest_batch").asset_layer.selected_asset_keys} == \
        {"event_batches"}
    assert {k.to_user_string() for k in defs.resolve_job_def("ingest_and_project").asset_layer.selected_asset_keys} \
        == keys


def test_the_ui_groups_the_assets_and_draws_the_logs_downstream_of_what_writes_them():
    """Groups `ingest`, `views` and `logs`; lineage event_batches → each view → errors and gaps, and
    event_batches → errors (malformed records and rejected files are logged at ingest)."""
    graph = defs.resolve_asset_graph()
    views = {dg.AssetKey(v.name) for v in BANK_VIEWS}
    groups = {k.to_user_string(): graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert groups == {"event_batches": "ingest", **{v.name: "views" for v in BANK_VIEWS},
                      "errors": "logs", "gaps": "logs"}
    assert graph.get(dg.AssetKey("errors")).parent_keys == views | {dg.AssetKey("event_batches")}
    assert graph.get(dg.AssetKey("gaps")).parent_keys == views
    for view in views:
        assert graph.get(view).child_keys == {dg.AssetKey("errors"), dg.AssetKey("gaps")}


def _materialize_all(home: Home, instance: dg.DagsterInstance, keys: list[str], now: datetime, tick: bool = False):
    results = []
    for key in keys:
        results.append(dg.materialize([event_batches], partition_key=key, instance=instance,
                                      resources=resources_for(home), tags={NOW_TAG: now.isoformat()}))
    results.append(dg.materialize([event_batches, projections, *ALL_CHECKS],
                                  selection=[projections, *ALL_CHECKS], instance=instance,
                                  resources=resources_for(home),
                                  tags={NOW_TAG: now.isoformat(), TICK_TAG: "true" if tick else "false"}))
    return results


def _metadata(result: dg.ExecuteInProcessResult, key: str) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events()
                if e.step_materialization_data.materialization.asset_key == dg.AssetKey(key)]
    return {k: v.value for k, v in event.step_materialization_data.materialization.metadata.items()}


def test_materialize_end_to_end_then_again_changes_nothing(spark, tmp_path):
    home = Home(tmp_path / "home").ensure()
    paths = generate(home.landing, GeneratorConfig(events=600, streams=8, batches=3, seed=11))
    keys = [p.stem for p in paths]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", keys)
    results = _materialize_all(home, instance, keys, T0)
    assert all(r.success for r in results)
    first = _metadata(results[0], "event_batches")
    assert first["status"] == "archived" and first["records"] > 0 and "seq_range" in first
    accounts = _metadata(results[-1], "accounts")
    status = {s.view: s for s in read_status(duckdb.connect(str(home.database), read_only=True), BANK_VIEWS).views}
    for name in ("selected", "applied", "ignored", "handler_error", "duplicate", "late", "conflict", "gaps_skipped",
                 "streams_touched"):
        assert f"run/{name}" in accounts, name
    for name in ("applied", "ignored", "handler_error", "duplicate", "late", "conflict"):  # as `inorder status`
        assert accounts[f"total/{name}"] == status["accounts"].outcomes[name], name
    assert (accounts["total/selected"], accounts["total/pending"], accounts["total/streams"], accounts["rows/accounts"]) \
        == (status["accounts"].selected, status["accounts"].pending, status["accounts"].streams,
            status["accounts"].rows["accounts"])
    assert accounts["run/selected"] == accounts["total/selected"]  # the first run did all of it
    assert accounts["lag/entries"] == 0 and accounts["lag/ingestion_seconds"] >= 0
    assert "lag/event_time_seconds" in accounts and "newest_errors" in accounts
    assert accounts["conserved"] is True and accounts["dagster/row_count"] == 8
    assert store_violations(home.database, [v.name for v in BANK_VIEWS]) == []  # computed independently
    checks = results[-1].get_asset_check_evaluations()
    assert len(checks) == len(BANK_VIEWS) * len(VIEW_CHECKS) and all(c.passed for c in checks), \
        [(c.asset_key, c.check_name) for c in checks if not c.passed]
    entries = [Entry("batch", p.stem, T0.timestamp(), lines=p.read_bytes()) for p in paths]
    live = read_store(home, BANK_VIEWS)
    assert_same_store(across_passes(live), across_passes(run_model(entries, BANK_VIEWS)))

    again = _materialize_all(home, instance, keys, T0)  # a repeated backfill of the same partitions
    assert all(r.success for r in again)
    assert all(_metadata(r, "event_batches")["already_ingested"] for r in again[:-1])
    assert read_store(home, BANK_VIEWS) == live


def test_sensor_requests_one_run_for_the_new_files(tmp_path):
    home = Home(tmp_path / "home").ensure()
    instance = dg.DagsterInstance.ephemeral()
    (home.landing / "b1.jsonl").write_text('{"stream_id": "a", "seq": 1, "type": "AccountOpened"}\n')
    context = dg.build_sensor_context(instance=instance, resources=resources_for(home))
    result = landing_sensor(context)
    (request,) = result.run_requests
    assert request.run_key == "b1" and request.tags == {RANGE_START_TAG: "b1", RANGE_END_TAG: "b1"}
    assert result.dynamic_partitions_requests[0].partition_keys == ["b1"]
    instance.add_dynamic_partitions("event_batches", ["b1"])
    again = landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home),
                                                   cursor=result.cursor))
    assert again.run_requests == [] and again.dynamic_partitions_requests == []
    (home.landing / "b2.jsonl").write_text('{"stream_id": "a", "seq": 2, "type": "Deposited"}\n')
    (home.landing / "b1.parquet").write_text("claims batch id b1 too")
    third = landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home),
                                                   cursor=again.cursor))
    # the second claimant of b1 gets its own key, so its run sets it aside visibly; one run for both
    (request,) = third.run_requests
    assert request.run_key == "b1.parquet,b2" and third.dynamic_partitions_requests[0].partition_keys == ["b1.parquet", "b2"]
    assert request.tags == {RANGE_START_TAG: "b1.parquet", RANGE_END_TAG: "b2"}


def test_files_already_in_the_ingest_log_never_start_runs(tmp_path):
    """A home the CLI filled: the sensor's first evaluation (no cursor) requests only what is new."""
    home = Home(tmp_path / "home").ensure()
    for i in range(3):
        (home.landing / f"b{i}.jsonl").write_text(f'{{"stream_id": "a", "seq": {i + 1}, "type": "Deposited"}}\n')
    for i in range(2):
        ingest_batches(home, BANK_VIEWS, [f"b{i}"])
    instance = dg.DagsterInstance.ephemeral()
    first = landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home)))
    assert [r.run_key for r in first.run_requests] == ["b2"]
    ingest_batches(home, BANK_VIEWS, ["b2"])
    lost_cursor = landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home)))
    assert lost_cursor.run_requests == [] and json.loads(lost_cursor.cursor) == {}


@pytest.fixture
def projected_home(spark, tmp_path) -> Home:
    home = Home(tmp_path / "home").ensure()
    paths = generate(home.landing, GeneratorConfig(events=300, streams=5, batches=2, seed=5))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", [p.stem for p in paths])
    assert all(r.success for r in _materialize_all(home, instance, [p.stem for p in paths], T0))
    return home


def _run_check(home: Home, view: str | View, name: str) -> dg.AssetCheckResult:
    view = view if isinstance(view, View) else view_named(BANK_VIEWS, view)
    checks = store_checks([view])
    result = dg.materialize([projections, *checks], selection=dg.AssetSelection.checks(dg.AssetCheckKey(
                                dg.AssetKey(view.name), name)),
                            resources=resources_for(home), raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def test_expectations_check_fails_on_a_broken_view_table(projected_home):
    passed = _run_check(projected_home, "accounts", "expectations")
    assert passed.passed and passed.metadata["suite"].value == "accounts"
    accounts = view_named(BANK_VIEWS, "accounts")
    # the suite as a GX user reads it: a row per expectation, every one ✓
    table = passed.metadata["results"].value.splitlines()
    assert table[0] == "| " + " | ".join(SUITE_HEADER) + " |" and len(table) == 2 + len(accounts.rules)
    assert all(row.startswith("| ✓ | expect_") for row in table[2:])
    assert "| ✓ | expect_column_values_to_be_between | accounts.balance | min_value=0.0 | 0 | 0.00 % | - |" in table
    con = duckdb.connect(str(projected_home.database))
    con.execute("UPDATE accounts SET balance = -5 WHERE account_id = (SELECT min(account_id) FROM accounts)")
    con.close()
    failed = _run_check(projected_home, "accounts", "expectations")
    assert not failed.passed
    failures = failed.metadata["failures"].value
    assert [f["expectation"] for f in failures] == ["expect_column_values_to_be_between"]
    assert failures[0]["unexpected_count"] == 1 and failures[0]["sample"] == ["-5.0"]  # the JSON, for scripts
    # the table: ✗, how many of how many, and the failing value typed (-5.00, not "-5.0") with its row's key
    con = duckdb.connect(str(projected_home.database), read_only=True)
    (account, total), = con.execute("SELECT min(account_id), count(*) FROM accounts").fetchall()
    con.close()
    assert (f"| ✗ | expect_column_values_to_be_between | accounts.balance | min_value=0.0 | 1 | {100 / total:.2f} % "
            f"| -5.00 (account_id='{account}') |") in failed.metadata["results"].value.splitlines()
    assert failed.description == f"1 of {len(accounts.rules)} expectations of suite accounts failed"


def test_keys_unique_check_fails_when_a_key_occurs_twice(projected_home):
    """Watermarks, pending and keyed and append tables carry no PRIMARY KEY (the commit keeps them unique,
    docs/STORE.md): this check says when something else wrote a key twice."""
    assert _run_check(projected_home, "accounts", "keys_unique").passed
    con = duckdb.connect(str(projected_home.database))
    con.execute("INSERT INTO inorder.watermarks SELECT * FROM inorder.watermarks WHERE view = 'accounts' "
                "ORDER BY stream_id LIMIT 1")
    con.execute("INSERT INTO accounts SELECT * FROM accounts ORDER BY account_id LIMIT 1")
    con.close()
    failed = _run_check(projected_home, "accounts", "keys_unique")
    assert not failed.passed
    assert (failed.metadata["duplicated_watermarks"].value, failed.metadata["duplicated_accounts"].value,
            failed.metadata["duplicated_pending"].value) == (1, 1, 0)


def _log_handler_errors(home: Home, view: str, error_class: str, exception: str, message: str, count: int) -> int:
    """Log `count` handler errors of one class on distinct messages of the view's last run, as the apply
    step does; returns how many outcomes that run then has (its ledger's, but for handler errors, which are
    its error log's distinct messages): what a rate check's `last_run` window is a share of."""
    con = duckdb.connect(str(home.database))
    last_run = "FROM inorder.batches WHERE view = $view AND committed_at = (SELECT max(committed_at) " \
               "FROM inorder.batches WHERE view = $view)"
    entry, stream = con.execute(f"SELECT min(entry_idx), (SELECT min(stream_id) FROM inorder.watermarks WHERE "
                                f"view = $view) {last_run}", {"view": view}).fetchone()
    for seq in range(count):
        con.execute("INSERT INTO inorder.errors (view, stream_id, seq, kind, exception_type, message, error_class, "
                    "entry_idx, attempt) VALUES (?, ?, ?, 'handler_error', ?, ?, ?, ?, 1)",
                    [view, stream, 10_000 + seq, exception, message, error_class, entry])
    settled, failed = con.execute(
        f"SELECT sum(applied + ignored + duplicate + late + conflict), (SELECT count(DISTINCT (stream_id, seq)) "
        f"FROM inorder.errors WHERE view = $view AND kind = 'handler_error' AND entry_idx IN (SELECT entry_idx "
        f"{last_run})) {last_run}", {"view": view}).fetchone()
    con.close()
    return settled + failed


def test_a_reject_rate_over_its_threshold_says_why_and_what_to_run_next(projected_home):
    activity = view_named(BANK_VIEWS, "account_activity")
    outcomes = _log_handler_errors(projected_home, "account_activity", "reject", "Reject", "insufficient funds",
                                   count=30)
    assert outcomes >= activity.alerts.min_selected and 30 / outcomes > activity.alerts.reject_rate.error
    failed = _run_check(projected_home, activity, "reject_rate")
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR
    assert failed.metadata["next_command"].value == "inorder errors --view account_activity --kind handler_error"
    reasons = failed.metadata["top_reasons"].value.splitlines()
    assert reasons[0] == "| reason | messages | streams | e.g. |"
    assert reasons[2].startswith("| insufficient funds | 30 | 1 | ")  # the commonest first
    # refusals are not bugs: the bug check stays green
    assert _run_check(projected_home, activity, "no_handler_bugs").passed


def test_a_rate_check_plots_only_what_changes_and_shows_rates_as_percentages(projected_home):
    """Dagster plots every numeric entry: the thresholds are configuration, so they are text; a rate is a
    percentage (6.22, not 0.062222)."""
    activity = view_named(BANK_VIEWS, "account_activity")
    outcomes = _log_handler_errors(projected_home, "account_activity", "reject", "Reject", "insufficient funds",
                                   count=30)
    metadata = _run_check(projected_home, activity, "reject_rate").metadata
    for key in ("warn_above", "fail_above", "min_selected"):
        assert isinstance(metadata[key], dg.TextMetadataValue)
    assert metadata["fail_above"].value == f"{activity.alerts.reject_rate.error:.2%}"
    rejects = metadata["last_run/reject"].value
    assert rejects >= 30 and metadata["last_run/outcomes"].value == outcomes > 0
    assert metadata["last_run/rate_pct"].value == round(100 * rejects / metadata["last_run/outcomes"].value, 2) > 1
    assert "last_run/rate" not in metadata


def test_a_reject_rate_is_not_judged_below_its_minimum_sample(projected_home):
    outcomes = _log_handler_errors(projected_home, "accounts", "reject", "Reject", "insufficient funds",
                                   count=30)
    few = replace(view_named(BANK_VIEWS, "accounts"), alerts=Alerts(min_selected=outcomes * 10))
    not_judged = _run_check(projected_home, few, "reject_rate")
    assert not_judged.passed and "top_reasons" not in not_judged.metadata
    assert f"fewer than the {outcomes * 10} (`alerts.min_selected`)" in not_judged.description
    # the same rate on a sample that is large enough fails
    assert not _run_check(projected_home, replace(few, alerts=Alerts(min_selected=outcomes)), "reject_rate").passed


def test_one_bug_fails_whatever_the_reject_thresholds(projected_home):
    lenient = replace(view_named(BANK_VIEWS, "accounts"),
                      alerts=Alerts(reject_rate=Thresholds(0.9, 1.0), min_selected=1_000_000))
    assert _run_check(projected_home, lenient, "no_handler_bugs").passed
    _log_handler_errors(projected_home, "accounts", "bug", "ZeroDivisionError", "division by zero", count=1)
    failed = _run_check(projected_home, lenient, "no_handler_bugs")
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR
    assert failed.metadata["last_run/bug"].value == 1
    assert "| ZeroDivisionError: division by zero | 1 | 1 | " in failed.metadata["top_reasons"].value
    assert failed.metadata["next_command"].value == ("inorder errors --view accounts --kind handler_error "
                                                     "(fix the view, then: inorder retry --view accounts --all)")
    assert _run_check(projected_home, lenient, "reject_rate").passed  # a bug is no refusal


def test_a_parked_stream_warns_with_the_exceptions_that_parked_it_and_what_to_run(projected_home):
    assert _run_check(projected_home, "accounts", "no_parked_streams").passed
    con = duckdb.connect(str(projected_home.database))
    stream, seq, entry = con.execute(
        "UPDATE inorder.watermarks SET parked = true WHERE view = 'accounts' AND stream_id = (SELECT min(stream_id) "
        "FROM inorder.watermarks WHERE view = 'accounts') RETURNING stream_id, last_seq + 1, updated_entry").fetchone()
    for attempt in (1, 2):  # a retried message is one message
        con.execute("INSERT INTO inorder.errors (view, stream_id, seq, kind, exception_type, message, error_class, "
                    "entry_idx, attempt) VALUES ('accounts', ?, ?, 'handler_error', 'KeyError', 'owner', 'bug', ?, ?)",
                    [stream, seq, entry, attempt])
    con.close()
    warned = _run_check(projected_home, "accounts", "no_parked_streams")
    assert not warned.passed and warned.severity == dg.AssetCheckSeverity.WARN
    assert f"| KeyError: owner | 1 | 1 | {stream} seq {seq} |" in warned.metadata["top_reasons"].value
    assert warned.metadata["next_command"].value == ("inorder pending --view accounts "
                                                     "(fix the view, then: inorder retry --view accounts --all)")


def test_an_overdue_blocked_stream_names_the_command_that_lists_it(projected_home):
    # a tick an hour on in logical time, which the view has not projected: a gap's timer, at T0, was due there
    con = duckdb.connect(str(projected_home.database))
    con.execute("INSERT INTO inorder.ingest_log (entry_idx, batch_id, kind, received_at, status) "
                "SELECT max(entry_idx) + 1, 'tick-' || (max(entry_idx) + 1), 'tick', ?, 'archived' "
                "FROM inorder.ingest_log", [T0 + timedelta(hours=1)])
    con.close()
    overdue = _run_check(projected_home, "accounts", "no_overdue_blocked_streams")
    assert overdue.metadata["overdue_streams"].value > 0 and overdue.metadata["clock"].value == "logical"
    assert not overdue.passed and overdue.metadata["next_command"].value == "inorder pending --view accounts"
    assert "`inorder pending --view accounts` lists them" in overdue.description


def test_a_run_given_a_past_logical_time_judges_its_gap_timers_by_logical_time(spark, tmp_path):
    """A backfill at T0, weeks before the wall clock: streams are blocked, and their timers, due 10 minutes
    after T0 in logical time, have not been reached by any entry. The run's checks are green."""
    home = Home(tmp_path / "home").ensure()
    paths = generate(home.landing, GeneratorConfig(events=300, streams=5, batches=2, seed=5))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", [p.stem for p in paths])
    results = _materialize_all(home, instance, [p.stem for p in paths], T0)
    assert all(r.success for r in results)
    with Store.open_read_only(home) as store:
        blocked = dict(store.con.execute("SELECT view, count(*) FROM inorder.watermarks WHERE blocked_at IS NOT NULL "
                                         "GROUP BY view").fetchall())
    overdue = {c.asset_key.to_user_string(): c for c in results[-1].get_asset_check_evaluations()
               if c.check_name == "no_overdue_blocked_streams"}
    assert set(overdue) == {v.name for v in BANK_VIEWS} and all(blocked.get(v, 0) > 0 for v in overdue)
    for check in overdue.values():
        assert check.passed and check.metadata["clock"].value == "logical", check.description
        assert check.description.startswith(f"No stream is blocked past its gap timer at {T0.isoformat()} by "
                                             "logical time (the newest entry's, a time its run was given")


def test_a_late_rate_over_its_threshold_names_the_skipped_gaps_and_what_to_run(projected_home):
    con = duckdb.connect(str(projected_home.database))
    (entry, stream), = con.execute(
        "SELECT max(entry_idx), (SELECT min(stream_id) FROM inorder.watermarks WHERE view = 'accounts') "
        "FROM inorder.batches WHERE view = 'accounts'").fetchall()
    con.execute("UPDATE inorder.batches SET late = 60 WHERE view = 'accounts' AND entry_idx = ?", [entry])
    con.execute("INSERT INTO inorder.gaps (view, stream_id, first_missing, last_missing, waited_seconds, reason, "
                "entry_idx) VALUES ('accounts', ?, 1000, 1100, 600, 'capacity', ?)", [stream, entry])
    for seq in range(1000, 1060):
        con.execute("INSERT INTO inorder.errors (view, stream_id, seq, kind, reason, entry_idx) "
                    "VALUES ('accounts', ?, ?, 'late', 'seq arrived after its gap was skipped', ?)", [stream, seq, entry])
    con.close()
    failed = _run_check(projected_home, "accounts", "late_rate")
    assert not failed.passed and failed.metadata["next_command"].value == "inorder errors --view accounts --kind late"
    assert f"| its gap was skipped (capacity) | 60 | 1 | {stream} seq 1000 |" in failed.metadata["top_reasons"].value


def test_conservation_and_watermark_checks_fail_when_state_is_tampered(projected_home):
    con = duckdb.connect(str(projected_home.database))
    deleted = con.execute("DELETE FROM inorder.pending WHERE rowid = "
                          "(SELECT min(rowid) FROM inorder.pending WHERE view = 'accounts')").fetchone()[0]
    assert deleted == 1  # a message lost from a buffer
    con.execute("UPDATE inorder.watermarks SET prev_last_seq = last_seq + 3 WHERE view = 'accounts' "
                "AND stream_id = (SELECT min(stream_id) FROM inorder.watermarks)")
    con.close()
    conservation = _run_check(projected_home, "accounts", "conservation")
    assert not conservation.passed and conservation.metadata["difference"].value == 1
    moved = _run_check(projected_home, "accounts", "watermarks_never_move_back")
    assert not moved.passed and moved.metadata["moved_back"].value == 1


def _rebuild_in_dagster(home: Home, view: str) -> dg.ExecuteInProcessResult:
    """What the `rebuild_view` job runs for one view (its config; the view's asset and its checks)."""
    from assets.views import REBUILD_CONFIG

    assert LAYER.jobs.rebuild.config == REBUILD_CONFIG  # the job runs the same config
    checks = store_checks([view_named(BANK_VIEWS, view)])
    return dg.materialize([projections, *checks],
                          selection=dg.AssetSelection.assets(view) | dg.AssetSelection.checks_for_assets(view),
                          run_config=REBUILD_CONFIG, resources=resources_for(home), raise_on_error=False)


def test_rebuild_view_job_is_a_materialisation_whose_checks_run(projected_home):
    before = read_store(projected_home, BANK_VIEWS)
    result = _rebuild_in_dagster(projected_home, "account_activity")
    assert result.success
    (materialization,) = [e.step_materialization_data.materialization for e in result.get_asset_materialization_events()]
    assert materialization.asset_key == dg.AssetKey("account_activity")
    assert materialization.metadata["rebuilt"].value is True
    assert materialization.metadata["rebuild/entries_replayed"].value > 0
    assert materialization.metadata["code/matches"].value is True
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert {"conservation", "expectations", "watermarks_never_move_back"} <= set(checks)
    assert checks["conservation"] and checks["expectations"]
    before, after = across_passes(before), across_passes(read_store(projected_home, BANK_VIEWS))
    for name in after:
        assert sorted(after[name], key=repr) == sorted(before[name], key=repr), name


def test_a_rebuild_that_breaks_conservation_is_blocked_by_its_check(projected_home, monkeypatch):
    import pipelines.facade

    real_swap = pipelines.facade.swap

    def swap_then_lose_a_count(store, view, shadow):
        real_swap(store, view, shadow)
        store.con.execute("UPDATE inorder.batches SET applied = applied + 1 WHERE view = ? "
                          "AND entry_idx = (SELECT min(entry_idx) FROM inorder.batches)", [view.name])

    monkeypatch.setattr(pipelines.facade, "swap", swap_then_lose_a_count)
    result = _rebuild_in_dagster(projected_home, "account_activity")
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["conservation"] is False
    assert not result.success  # blocking: the run fails on it


def test_a_second_writer_fails_with_one_clear_message(tmp_path):
    from pipelines.store.database import Store, StoreBusy

    home = Home(tmp_path / "home")
    with Store.open(home, BANK_VIEWS):
        with pytest.raises(StoreBusy, match="another inorder run is writing"):
            Store.open(home, BANK_VIEWS)
    Store.open(home, BANK_VIEWS).close()  # free again once the first writer is done


def test_the_tick_runs_only_when_a_timer_is_due_and_a_tick_that_walks_nothing_materialises_nothing(
        spark, tmp_path):
    """The schedule asks the store: a gap timer due → a tick that materialises just the views it walks (their
    checks run after it); nothing due but no entry for a tick interval → a tick that walks nothing, commits
    every view's ledger row without Spark work and materialises nothing; otherwise no run."""
    from assets.schedules import TICK_INTERVAL
    from pipelines.facade import run

    home = Home(tmp_path / "home").ensure()
    tick_schedule = LAYER.schedule
    # one account with seq 2 missing: every bank view subscribed to accounts waits for it
    (home.landing / "b1.jsonl").write_text(
        '{"stream_id": "a", "seq": 1, "type": "AccountOpened", "payload": {"owner": "ada"}}\n'
        '{"stream_id": "a", "seq": 3, "type": "Deposited", "payload": {"amount": 5}}\n')
    run(spark, home, BANK_VIEWS, now=T0)
    instance = dg.DagsterInstance.ephemeral()

    def evaluate(at: datetime):
        return tick_schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=at,
                                                       resources=resources_for(home)))

    assert isinstance(evaluate(T0 + timedelta(minutes=4)), dg.SkipReason)
    assert isinstance(evaluate(T0 + timedelta(seconds=599)), dg.RunRequest)  # no entry for > the tick interval
    due = evaluate(T0 + timedelta(seconds=600))
    waiting = {v.name for v in BANK_VIEWS if "account" in v.subscribes}
    assert {k.to_user_string() for k in due.asset_selection} == waiting | {"errors", "gaps"}
    tags = {**due.tags, NOW_TAG: (T0 + timedelta(seconds=600)).isoformat(), "dagster/schedule_name": "tick_schedule"}
    job = build_definitions(BANK_VIEWS, home).resolve_job_def("project_views")
    result = job.execute_in_process(instance=instance, tags=tags, asset_selection=due.asset_selection)
    assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == \
        waiting | {"errors", "gaps"}
    assert {c.asset_key.to_user_string() for c in result.get_asset_check_evaluations()} == waiting
    assert read_store(home, BANK_VIEWS)["gaps"]  # the gap was skipped

    quiet = T0 + timedelta(seconds=600) + TICK_INTERVAL + timedelta(seconds=1)
    heartbeat = evaluate(quiet)
    assert isinstance(heartbeat, dg.RunRequest)
    # a tick projects every view, so that each records it; only the views it walks are materialised
    assert {k.to_user_string() for k in heartbeat.asset_selection} == {v.name for v in BANK_VIEWS} | {"errors", "gaps"}
    result = job.execute_in_process(instance=instance, tags={**heartbeat.tags, NOW_TAG: quiet.isoformat(),
                                                             "dagster/schedule_name": "tick_schedule"},
                                    asset_selection=heartbeat.asset_selection)
    assert result.success
    assert result.get_asset_materialization_events() == [] and result.get_asset_check_evaluations() == []
    with duckdb.connect(str(home.database), read_only=True) as con:
        assert con.execute("SELECT kind FROM inorder.ingest_log ORDER BY entry_idx").fetchall() == \
            [("batch",), ("tick",), ("tick",)]
        assert con.execute("SELECT count(*) FROM inorder.batches WHERE entry_idx = 3").fetchone() == (len(BANK_VIEWS),)
    assert isinstance(evaluate(quiet + timedelta(minutes=1)), dg.SkipReason)


def test_the_ui_shows_column_descriptions_owners_tags_and_freshness():
    """Every column of every view table has its schema and a description in the asset's metadata (the
    error and gap logs': below); a view's owners, tags and freshness reach its asset."""
    graph = defs.resolve_asset_graph()
    for view in BANK_VIEWS:
        node = graph.get(dg.AssetKey(view.name))
        columns = node.metadata["dagster/column_schema"].columns
        assert len(columns) == sum(len(t.columns) for t in view.tables) and all(c.description for c in columns)
    accounts = graph.get(dg.AssetKey("accounts"))
    assert accounts.owners == ["team:payments"] and accounts.tags["domain"] == "bank"
    assert accounts.freshness_policy.warn_window.to_timedelta() == timedelta(minutes=30)


def test_the_logs_column_schemas_are_the_stores_columns(tmp_path):
    """`errors` and `gaps` show, in order and with their types, the columns a fresh store's tables have
    (both are made from pipelines/store/layout.py's LOG_COLUMNS), each with a description."""
    graph = defs.resolve_asset_graph()
    with Store.open(Home(tmp_path / "home").ensure(), BANK_VIEWS) as store:
        for log in ("errors", "gaps"):
            stored = [(name, sql_type) for name, sql_type, *_ in store.con.execute(f"DESCRIBE inorder.{log}").fetchall()]
            schema = graph.get(dg.AssetKey(log)).metadata["dagster/column_schema"].columns
            shown = [(c.name, store.con.execute(f"SELECT typeof(NULL::{c.type})").fetchone()[0]) for c in schema]
            assert shown == stored and all(c.description for c in schema)


def checks_named(run: dg.ExecuteInProcessResult, name: str) -> list:
    return [c for c in run.get_asset_check_evaluations() if c.check_name == name]


def verdicts_judge_the_newest_materialisations(instance: dg.DagsterInstance) -> bool:
    """Each partition's newest file_not_rejected targets its partition's newest materialisation (none for a
    rejected file): what the UI needs to count it passed or failed rather than missing."""
    infos = instance.event_log_storage.get_asset_check_partition_info([FILE_NOT_REJECTED])
    return bool(infos) and all(info.is_current for info in infos)


def test_a_rejected_batch_fails_its_partition_with_its_reason_and_the_check_turns_red(tmp_path):
    no_new_rejected_files = dg.AssetCheckKey(dg.AssetKey("event_batches"), "no_new_rejected_files")

    home = Home(tmp_path / "home").ensure()
    (home.landing / "good.jsonl").write_text('{"stream_id": "a", "seq": 1, "type": "AccountOpened"}\n')
    (home.landing / "bad.parquet").write_bytes(b"not parquet at all")
    (home.landing / "later.jsonl").write_text('{"stream_id": "a", "seq": 2, "type": "Deposited"}\n')
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", ["good", "bad", "later"])

    def ingest(key: str) -> dg.ExecuteInProcessResult:
        return dg.materialize([event_batches, projections, *ALL_CHECKS], partition_key=key, instance=instance,
                              selection=dg.AssetSelection.assets(event_batches) | dg.AssetSelection.checks(
                                  no_new_rejected_files), resources=resources_for(home), raise_on_error=False)

    assert ingest("good").success
    bad = ingest("bad")
    assert not bad.success and bad.get_asset_materialization_events() == []
    (failure,) = [e for e in bad.all_events if e.is_step_failure]
    data = failure.step_failure_data.user_failure_data
    assert data.description.startswith("batch bad was rejected: ") and "parquet" in data.description.lower()
    assert data.description.endswith(". Next: fix what the reason says (the file, or source.json) and drop the file "
                                     "into the landing folder again under a new name (its name is in the ingest log "
                                     "now, and a name is never read twice).")
    assert data.metadata["status"].value == "rejected" and data.metadata["rejected_reason"].value
    error = failure.step_failure_data.error  # the Failure itself: no exception of inorder's behind it
    assert error.cls_name == "Failure" and error.cause is None and error.context is None
    # the reason is on the failed partition: its file_not_rejected verdict (the UI's check partitions) and an
    # observation (the asset's events)
    (record,) = instance.fetch_observations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("event_batches"), asset_partitions=["bad"]), limit=10).records
    assert record.asset_observation.metadata["rejected_reason"].value in data.description
    verdicts = {r.partition: r for r in instance.event_log_storage.get_asset_check_execution_history(
        FILE_NOT_REJECTED, limit=10)}
    assert set(verdicts) == {"good", "bad"} and verdicts["good"].status.value == "SUCCEEDED"
    assert verdicts["bad"].status.value == "FAILED" and verdicts["bad"].run_id == bad.run_id
    verdict = verdicts["bad"].evaluation
    assert verdict.description == data.description
    assert verdict.metadata["rejected_reason"].value == data.metadata["rejected_reason"].value
    assert verdict.metadata["next_step"].value.startswith("Next: fix what the reason says (the file, or source.json)")
    assert verdicts["good"].evaluation.target_materialization_data.run_id == verdicts["good"].run_id
    assert verdicts_judge_the_newest_materialisations(instance)
    # the next batch's check reports the rejection since it last ran, once
    later = ingest("later")
    (check,) = checks_named(later, "no_new_rejected_files")
    assert not check.passed and check.metadata["new_rejected_files"].value == 1 and "`bad`" in \
        check.metadata["rejected"].value
    assert instance.get_materialized_partitions(dg.AssetKey("event_batches")) == {"good", "later"}
    (again,) = checks_named(ingest("later"), "no_new_rejected_files")
    assert again.passed


def test_each_successful_ingest_run_is_followed_by_a_projection_run(spark, tmp_path):
    from assets.tags import CLI_HOME_TAG

    project_after_ingest = sensor("project_after_ingest")
    home = Home(tmp_path / "home").ensure()
    defs = build_definitions(BANK_VIEWS, home)
    (home.landing / "b1.jsonl").write_text('{"stream_id": "a", "seq": 1, "type": "AccountOpened"}\n')
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", ["b1"])
    ingest = defs.resolve_job_def("ingest_batch").execute_in_process(
        instance=instance, partition_key="b1", tags={NOW_TAG: T0.isoformat(), "dagster/sensor_name": "landing_sensor"})

    def evaluate(run) -> dg.RunRequest | dg.SkipReason:
        success = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS).records[0]
        return project_after_ingest(dg.build_run_status_sensor_context(
            sensor_name="project_after_ingest", dagster_event=success.event_log_entry.dagster_event,
            dagster_instance=instance, dagster_run=run))

    request = evaluate(ingest.dagster_run)
    assert request.run_key == f"project-after-{ingest.run_id}" and request.tags == {NOW_TAG: T0.isoformat()}
    project = defs.resolve_job_def("project_views").execute_in_process(
        instance=instance, tags={**request.tags, "dagster/sensor_name": "project_after_ingest"})
    assert {e.asset_key.to_user_string() for e in project.get_asset_materialization_events()} >= {"accounts"}
    cli = defs.resolve_job_def("ingest_batch").execute_in_process(
        instance=instance, partition_key="b1", tags={NOW_TAG: T0.isoformat(), CLI_HOME_TAG: str(home.root)})
    assert isinstance(evaluate(cli.dagster_run), dg.SkipReason)  # `inorder run` projects in its own run


def test_one_run_ingests_a_range_and_a_rejected_file_fails_only_its_partition(tmp_path):
    """The landing sensor's run (`ingest_and_project`) over three new files, one unreadable: the two good
    batches are materialised with their own metadata, the bad one's partition fails with its reason, the
    run stops before projecting, and `project_after_rejection` asks for the projection of what it archived."""
    project_after_rejection = sensor("project_after_rejection")
    home = Home(tmp_path / "home").ensure()
    defs = build_definitions(BANK_VIEWS, home)
    (home.landing / "b1.jsonl").write_text('{"stream_id": "a", "seq": 1, "type": "AccountOpened"}\n')
    (home.landing / "b2.parquet").write_text("not a parquet file")
    (home.landing / "b3.jsonl").write_text('{"stream_id": "a", "seq": 2, "type": "Deposited"}\n'
                                           '{"stream_id": "b", "seq": 1, "type": "AccountOpened"}\n')
    instance = dg.DagsterInstance.ephemeral()
    (request,) = landing_sensor(dg.build_sensor_context(instance=instance, resources=resources_for(home))).run_requests
    assert request.run_key == "b1,b2,b3" and request.tags == {RANGE_START_TAG: "b1", RANGE_END_TAG: "b3"}
    instance.add_dynamic_partitions("event_batches", ["b1", "b2", "b3"])
    run = defs.resolve_job_def("ingest_and_project").execute_in_process(
        instance=instance, tags={**request.tags, NOW_TAG: T0.isoformat()}, raise_on_error=False)
    assert not run.success
    materialized = {e.dagster_event.step_materialization_data.materialization.partition:
                    e.dagster_event.step_materialization_data.materialization.metadata
                    for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)}
    assert set(materialized) == {"b1", "b3"}  # nothing of the views: the projection step did not run
    assert (materialized["b1"]["records"].value, materialized["b3"]["records"].value) == (1, 2)
    assert materialized["b3"]["seq_range"].value == "1..2"
    assert instance.get_materialized_partitions(dg.AssetKey("event_batches")) == {"b1", "b3"}
    failure = next(e for e in run.all_events if e.is_step_failure)
    assert failure.step_key == "event_batches" and "batch b2 was rejected" in \
        failure.step_failure_data.user_failure_data.description
    assert failure.step_failure_data.user_failure_data.description.endswith(
        "; the batches this run archived (b1, b3) are not lost: the `project_after_rejection` sensor projects them.")
    verdicts = {r.partition: r.evaluation for r in instance.event_log_storage.get_asset_check_execution_history(
        FILE_NOT_REJECTED, limit=10) if r.run_id == run.run_id}
    assert {key: v.passed for key, v in verdicts.items()} == {"b1": True, "b2": False, "b3": True}
    assert verdicts["b2"].description == failure.step_failure_data.user_failure_data.description
    assert verdicts["b2"].target_materialization_data is None and verdicts_judge_the_newest_materialisations(instance)
    with Store.open(home, BANK_VIEWS) as store:
        assert store.con.execute("SELECT batch_id, status FROM inorder.ingest_log ORDER BY entry_idx").fetchall() == [
            ("b1", "archived"), ("b2", "rejected"), ("b3", "archived")]
    record = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records[0]
    follow_up = project_after_rejection(dg.build_run_status_sensor_context(
        sensor_name="project_after_rejection", dagster_event=record.event_log_entry.dagster_event,
        dagster_instance=instance, dagster_run=run.dagster_run).for_run_failure())
    assert isinstance(follow_up, dg.RunRequest) and follow_up.run_key == f"project-after-{run.run_id}"
