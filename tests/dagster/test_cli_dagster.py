"""`inorder retry`, `skip` and `publish` run through Dagster, as `run` and `rebuild` do: each is a run in
the home's instance, materialising the views it wrote, and their checks follow it; what the commands
print stays as it was."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import dagster as dg
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from assets.tags import CLI_HOME_TAG
from inorder.cli import main
from inorder.dagster_runs import KeptConnectionsEventLog, dagster_instance
from pipelines.store.database import Home
from pipelines.observe.checks import view_checks
from assets.schedules import TICK_INTERVAL
from tests.builders import dep, msg, opened
from tests.command import INORDER, clean_environment, clean_os_environ, inorder

VIEW_CHECKS = {c.name for c in view_checks(TICK_INTERVAL)}
# two accounts whose deposit hits the audit view's bug: both park (tests/counts_views.py)
BATCH = [opened("acct-1"), dep("acct-1", 2, 5000), opened("acct-2"), dep("acct-2", 2, 5000)]


def _cli_home(monkeypatch, home, views: str):
    """A new home made by `inorder init`, for commands run in this process with only its INORDER_HOME and
    INORDER_VIEWS set (no other INORDER_ or Dagster setting of the test run's)."""
    clean_os_environ(monkeypatch, as_a_user=True)
    monkeypatch.setenv("INORDER_HOME", str(home))
    monkeypatch.setenv("INORDER_VIEWS", views)
    monkeypatch.setenv("INORDER_SPARK_WARM", "0")  # this process may hold the classic `spark` session: no Connect one
    assert main(["init", str(home)]) == 0
    return home


def _run_of(instance: dg.DagsterInstance, job: str) -> dg.DagsterRun:
    (run,) = instance.get_runs(dg.RunsFilter(job_name=job))
    return run


def _checked(instance: dg.DagsterInstance, run_id: str) -> set[tuple[str, str]]:
    return {(e.dagster_event.event_specific_data.asset_key.to_user_string(),
             e.dagster_event.event_specific_data.check_name)
            for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)}


def _materialized(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict]:
    return {e.dagster_event.step_materialization_data.materialization.asset_key.to_user_string():
            {k: v.value for k, v in e.dagster_event.step_materialization_data.materialization.metadata.items()}
            for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)}


def test_retry_skip_and_publish_are_runs_of_the_homes_instance_followed_by_their_checks(
        spark, postgres, tmp_path, monkeypatch, capsys):
    home = _cli_home(monkeypatch, tmp_path / "home", "tests.counts_views")
    (home / "landing" / "b1.jsonl").write_text("".join(line + "\n" for line in BATCH))
    assert main(["run", "--now", "2026-11-02T00:00:00Z"]) == 0
    capsys.readouterr()

    assert main(["retry", "--view", "audit", "--all"]) == 0  # the bug is still there: both park again
    assert capsys.readouterr().out.splitlines() == [
        "retry of 2 parked streams of audit committed: 2 streams parked again: the retried message failed again "
        "(acct-1 seq 2, attempt 2, acct-2 seq 2, attempt 2; `inorder errors --view audit --kind handler_error` "
        "says why)"]
    assert main(["skip", "--view", "audit", "--stream", "acct-2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "skip of 1 parked stream of audit committed: 1 stream moved on (its parked message skipped (counted as "
        "handler_error), now at acct-2 seq 2)"]
    assert main(["retry", "--view", "audit", "--stream", "acct-2"]) == 1  # not parked any more: one line, exit 1
    assert capsys.readouterr().err.splitlines()[-1] == "inorder: error: stream 'acct-2' of view audit is not parked"
    monkeypatch.setenv("INORDER_SERVE_POSTGRES", postgres)
    monkeypatch.setenv("INORDER_SERVE_SCHEMA", "cli_dagster")
    assert main(["publish"]) == 0
    assert capsys.readouterr().out.startswith("published audit to entry ")

    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        checks = {("audit", name) for name in VIEW_CHECKS}
        for job, streams in (("retry_streams", ["acct-1", "acct-2"]), ("skip_streams", ["acct-2"])):
            run = _run_of(instance, job) if job == "skip_streams" else instance.get_runs(
                dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.SUCCESS]))[0]
            assert run.tags[CLI_HOME_TAG] == str(home)
            assert _materialized(instance, run.run_id)["audit"]["operator/streams"] == streams
            assert _checked(instance, run.run_id) == checks
        failed = instance.get_runs(dg.RunsFilter(job_name="retry_streams", statuses=[dg.DagsterRunStatus.FAILURE]))
        assert len(failed) == 1  # the refused retry is in the history too
        publish = _run_of(instance, "publish_views")
        assert _materialized(instance, publish.run_id)["audit"]["publish/mode"] == "full"
        assert _checked(instance, publish.run_id) == checks
        published = dg.AssetCheckKey(dg.AssetKey("audit"), "published")
        assert instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [published])[published].evaluation.passed


FAILING_AUDIT = '''
import dataclasses

import tests.counts_views as counts

AUDIT = dataclasses.replace(counts.AUDIT, on_bug="fail")
'''


def test_a_run_failed_by_a_bug_under_on_bug_fail_names_its_cause_in_one_line(spark, tmp_path, monkeypatch, capsys):
    """Issue 33, finding 9: the view, the stream, the seq and the exception with its message; no Dagster
    internals on the terminal; nothing committed."""
    home, code = tmp_path / "home", tmp_path / "code"
    code.mkdir()
    (code / "failing_audit.py").write_text(FAILING_AUDIT)
    monkeypatch.syspath_prepend(str(code))
    _cli_home(monkeypatch, home, "failing_audit")
    (home / "landing" / "b1.jsonl").write_text("".join(line + "\n" for line in BATCH))
    capsys.readouterr()
    assert main(["run", "--now", "2026-11-02T00:00:00Z"]) == 1
    err = capsys.readouterr().err
    assert "dagster" not in err.lower() and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("inorder: error:")]
    assert line.startswith("inorder: error: view audit (on_bug='fail'): handler bug on stream 'acct-1' seq 2: "), line
    assert line.endswith("nothing was committed (1 more streams failed)"), line
    import duckdb

    with duckdb.connect(str(home / "store.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM inorder.watermarks").fetchone() == (0,)


AUDIT_WITH_A_COLUMN = '''
import dataclasses
import tests.counts_views as counts
from pipelines.view import Column
(ACCOUNTS, TYPES) = counts.AUDIT.tables
AUDIT = dataclasses.replace(counts.AUDIT, tables=(
    dataclasses.replace(ACCOUNTS, columns={**ACCOUNTS.columns, "branch": Column(str)}), TYPES))
'''


def _lines(home, name: str, *lines: str) -> None:
    (home / "landing" / f"{name}.jsonl").write_text("".join(line + "\n" for line in lines))


def test_a_refused_view_exits_4_with_or_without_a_new_batch_and_ctrl_c_says_what_the_next_run_does(
        spark, tmp_path, monkeypatch, capsys):
    """Issue 33, finding 6: a view whose table changed is refused with exit status 4 whether or not a batch
    is new, in one line printed once, with no Dagster internals; Ctrl-C ends a run with one line saying what
    is archived and that the next `inorder run` projects it, which it then does."""
    import signal

    import pipelines.facade

    home, code = tmp_path / "home", tmp_path / "code"
    code.mkdir()
    (code / "audit_as_it_was.py").write_text("from tests.counts_views import AUDIT\n")
    (code / "audit_with_a_column.py").write_text(AUDIT_WITH_A_COLUMN)
    monkeypatch.syspath_prepend(str(code))
    _cli_home(monkeypatch, home, "audit_as_it_was")
    _lines(home, "b1", opened("acct-1"), dep("acct-1", 2, 10))
    assert main(["run", "--now", "2026-11-02T00:00:00Z"]) == 0
    capsys.readouterr()

    monkeypatch.setenv("INORDER_VIEWS", "audit_with_a_column")
    for minute, batch in ((1, None), (2, "b2")):  # nothing new, then a new batch: the same refusal
        if batch:
            _lines(home, batch, dep("acct-1", 3, 10))
        assert main(["run", "--now", f"2026-11-02T00:0{minute}:00Z"]) == 4, batch
        err = capsys.readouterr().err
        assert "dagster" not in err.lower() and "Traceback" not in err, err
        refusals = [line for line in err.splitlines() if "column branch VARCHAR added" in line]
        assert len(refusals) == 1 and refusals[0].startswith("inorder: view audit: table audit_accounts: "), err
        assert "`inorder rebuild audit`" in refusals[0]

    monkeypatch.setenv("INORDER_VIEWS", "audit_as_it_was")
    _lines(home, "b3", dep("acct-1", 4, 10))

    def ctrl_c_once_planned(name: str) -> None:  # what a terminal's Ctrl-C does to this process
        if name == "project.planned":
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(pipelines.facade, "crash_point", ctrl_c_once_planned)
    assert main(["run", "--now", "2026-11-02T00:03:00Z"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "dagster" not in err.lower(), err
    assert err.splitlines()[-1] == ("inorder: interrupted: 2 batches archived but not yet projected (b2 to b3, for "
                                    "audit); the next `inorder run` projects them"), err
    monkeypatch.setattr(pipelines.facade, "crash_point", lambda name: None)
    assert main(["run", "--now", "2026-11-02T00:04:00Z"]) == 0
    import duckdb

    with duckdb.connect(str(home / "store.duckdb"), read_only=True) as con:
        assert con.execute("SELECT account_id, deposits FROM audit_accounts").fetchall() == [("acct-1", 3)]


def _processes_marked(mark: str) -> list[int]:
    """The processes whose environment holds `mark` (a command's children inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
    return found


def test_ctrl_c_as_spark_starts_leaves_no_jvm_and_prints_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group; pyspark starts its JVM ignoring SIGINT, so a
    JVM still starting would outlive `inorder run`. Nothing but the one line reaches the terminal."""
    home, mark = tmp_path / "home", f"inorder-ctrl-c-{uuid.uuid4().hex}"
    env = clean_environment(home, "views", as_a_user=True, INORDER_TEST_MARK=mark,
                            INORDER_SPARK_WARM="0")  # a JVM of the run's own (a warm server is not the run's to end)
    inorder(env, "init", str(home))
    _lines(home, "b1", opened("acct-1"), dep("acct-1", 2, 10))
    run = subprocess.Popen([INORDER, "run", "--now", "2026-11-02T00:00:00Z"], env=env, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    hung = threading.Timer(240, os.killpg, (run.pid, signal.SIGKILL))  # a run that hangs fails the test, not CI
    hung.start()
    said = []
    for line in run.stderr:  # Ctrl-C as the JVM starts
        said.append(line)
        if "starting Spark" in line:
            time.sleep(0.3)  # the JVM is on its way
            os.killpg(run.pid, signal.SIGINT)
            break
    said.extend(run.stderr)
    hung.cancel()
    assert run.wait(timeout=120) == 130, "".join(said)
    assert said[-1] == ("inorder: interrupted: 1 batch archived but not yet projected (b1, for account_activity, "
                        "accounts, daily_totals); the next `inorder run` projects it\n"), "".join(said)
    assert not any("Traceback" in line for line in said), "".join(said)
    time.sleep(2)  # a JVM has had time to notice its parent gone
    assert _processes_marked(mark) == []


def test_reingest_and_remove_view_are_runs_of_the_homes_instance(spark, tmp_path, monkeypatch, capsys):
    """Issue 34: `reingest` materialises every view after its new entries, so their checks follow, and
    `remove-view --yes` is a run of its own (its dry run writes nothing, and is none); what they print stays."""
    home = _cli_home(monkeypatch, tmp_path / "home", "tests.counts_views")
    (home / "landing" / "b1.jsonl").write_text("".join(line + "\n" for line in [*BATCH, "not json"]))
    assert main(["run", "--now", "2026-11-02T00:00:00Z"]) == 0
    capsys.readouterr()
    assert main(["reingest", "b1", "--now", "2026-11-02T00:01:00Z"]) == 0  # the malformed line is still malformed
    assert capsys.readouterr().out.splitlines()[-1] == "0 of 1 batches re-ingested; 0 messages applied across views"
    assert main(["remove-view", "audit"]) == 1
    assert capsys.readouterr().out.startswith("would remove view audit: its tables ")
    assert main(["remove-view", "audit", "--yes"]) == 0
    assert capsys.readouterr().out.startswith("removed view audit: its tables ")
    assert main(["remove-view", "audit", "--yes"]) == 5  # a refusal of the views stays one through Dagster
    assert capsys.readouterr().err.splitlines()[-1] == \
        "inorder: refused: the store holds no view 'audit' (it holds none)"

    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        reingest = _run_of(instance, "reingest_batches")
        assert reingest.tags[CLI_HOME_TAG] == str(home)
        assert set(_materialized(instance, reingest.run_id)) == {"audit"}
        assert _checked(instance, reingest.run_id) == {("audit", name) for name in VIEW_CHECKS}
        removals = instance.get_runs(dg.RunsFilter(job_name="remove_view"))
        assert sorted(r.status.value for r in removals) == ["FAILURE", "SUCCESS"]
    import duckdb

    with duckdb.connect(str(home / "store.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM inorder.view_versions").fetchone() == (0,)


def test_inorder_run_and_the_engines_run_are_one_path(spark, tmp_path, monkeypatch, capsys):
    """Issue 34: the same landing files and logical times through `inorder run` (its Dagster runs: a rejected
    file's second run, a tick that skips a gap, a late message) and through `pipelines.facade.run`, which the
    property tests and the benchmarks drive, leave the same store, row for row."""
    from pipelines.config import Settings
    from pipelines.facade import run
    from pipelines.store.database import Home
    from tests.domains import BANK_VIEWS
    from tests.harness import read_store

    through_cli = _cli_home(monkeypatch, tmp_path / "cli", "views")
    engine = Home.of(Settings(), tmp_path / "engine").ensure()
    steps = [("2026-11-02T00:00:00Z", {"b1.jsonl": [opened("a"), dep("a", 3, 5), opened("b"), dep("b", 2, 7)],
                                       "bad.parquet": ["not parquet"]}),
             ("2026-11-03T00:00:00Z", {}),  # a tick: a's gap timed out
             ("2026-11-03T00:00:01Z", {"b2.jsonl": [dep("a", 2, 1), dep("a", 4, 2), dep("b", 3, 1)]}),
             ("2026-11-03T00:00:01Z", {})]  # nothing new, and time did not move
    for now, files in steps:
        for home in (through_cli, engine.root):
            for name, lines in files.items():
                (home / "landing" / name).write_text("".join(line + "\n" for line in lines))
        assert main(["run", "--now", now]) == 0
        run(spark, engine, BANK_VIEWS, now=datetime.fromisoformat(now.replace("Z", "+00:00")))
        cli_store, engine_store = read_store(Home(through_cli), BANK_VIEWS), read_store(engine, BANK_VIEWS)
        assert cli_store == engine_store, now
        assert _ingest_log(through_cli) == _ingest_log(engine.root), now
    assert cli_store["gaps"] and cli_store["errors"]  # the scenario skipped a gap and logged the late message


def _ingest_log(home: Path) -> list[tuple]:
    """The ingest log's rows, the home's folder left out of a rejected file's reason."""
    import duckdb

    with duckdb.connect(str(home / "store.duckdb"), read_only=True) as con:
        return con.execute("SELECT entry_idx, batch_id, kind, status, records, malformed, received_at, stream_types, "
                           "replace(reason, ?, 'HOME') FROM inorder.ingest_log ORDER BY entry_idx",
                           [str(home)]).fetchall()


def _shop(stream: str, seq: int, event_type: str, **payload) -> str:
    return msg(stream, seq, event_type, stream_type="customer" if stream.startswith("cus") else "order", **payload)


def test_a_tick_that_moves_some_views_checks_each_view_it_moved(spark, tmp_path, monkeypatch, capsys):
    """A tick whose gap timer fires for one customer's stream moves `customers` and `shop_daily` and no order view:
    the views it moved are materialised and their checks evaluated in that run (a verdict left from the run before
    would describe rows that are no longer there); the views it left alone are neither."""
    home = _cli_home(monkeypatch, tmp_path / "home", "shop.views")
    (home / "landing" / "b1.jsonl").write_text("".join(line + "\n" for line in [
        _shop("cus-1", 1, "CustomerRegistered", name="Ada", email="ada@example.com", tier="gold"),
        _shop("cus-1", 3, "TierChanged", tier="silver"),  # seq 2 never comes: a gap, skipped at the tick
        _shop("ord-1", 1, "OrderPlaced", customer_id="cus-1", gift=False)]))
    assert main(["run", "--now", "2026-11-02T00:00:00Z"]) == 0
    capsys.readouterr()
    assert main(["run", "--now", "2026-11-02T01:00:00Z"]) == 0
    said = capsys.readouterr()
    assert "ran a tick" in said.out and "Skipping step" not in said.err, said
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        tick = instance.get_runs(limit=1)[0]
        moved = {"customers", "shop_daily"}
        assert moved <= set(_materialized(instance, tick.run_id)) and not {"orders", "order_items"} & set(
            _materialized(instance, tick.run_id))
        checked = _checked(instance, tick.run_id)
        assert {(view, check) for view in moved for check in VIEW_CHECKS} <= checked, checked
        assert not {view for view, _ in checked} & {"orders", "order_items"}, checked
    assert "checks: " in said.out, said.out


@dg.asset
def _one_row() -> int:
    return 1


def test_the_clis_event_log_keeps_its_connections_in_the_files_the_ui_reads(tmp_path, monkeypatch):
    """The CLI's instance stores events through kept connections, in the files a standard instance (the UI's)
    reads and writes meanwhile; a dagster.yaml that names storage of its own is used as it is written."""
    clean_os_environ(monkeypatch)
    home = Home(tmp_path / "home")
    with dagster_instance(home) as cli, dg.DagsterInstance.from_config(str(home.root / "dagster")) as ui:
        assert isinstance(cli.event_log_storage, KeptConnectionsEventLog)
        for writer, reader in ((cli, ui), (ui, cli), (cli, ui)):
            run_id = dg.materialize([_one_row], instance=writer).run_id
            assert reader.get_run_by_id(run_id).is_success
            assert [e.dagster_event_type for e in reader.all_logs(run_id)] == \
                   [e.dagster_event_type for e in writer.all_logs(run_id)]
        assert len(ui.fetch_materializations(_one_row.key, limit=5).records) == 3
    config = home.root / "dagster" / "dagster.yaml"
    config.write_text(config.read_text() + f"storage:\n  sqlite:\n    base_dir: {home.root / 'dagster'}\n")
    with dagster_instance(home) as standard:
        assert type(standard.event_log_storage) is SqliteEventLogStorage
