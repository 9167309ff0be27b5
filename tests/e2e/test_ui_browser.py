"""A real browser against a real `dagster dev` on a store seeded with trouble: a reject rate far over
what the demo designs, gaps that leave streams blocked, and a landing file no reader accepts. The
landing sensor ingests the files in one run, which the bad file fails (a second run projects the good
ones); a materialisation of all assets is launched from the UI; the page must show the red reject-rate
check beside green ones, with its reasons and the command to run next, the expectations suite as a
table, the failed partition of the rejected batch with its reason (its `file_not_rejected` verdict, in the check's
partitions), and the blocked-streams table.
Screenshots go to $INORDER_SCREENSHOTS (default .inorder/screenshots)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from assets.ingest import FILE_NOT_REJECTED
from inorder.dagster_runs import dagster_home
from demos.bank import GeneratorConfig, generate

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]

if not os.path.exists(CHROMIUM):
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the browser test (.ci/run installs it)")
    pytest.skip("no chromium here (apt-get install chromium)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


SCREENSHOTS = Path(os.environ.get("INORDER_SCREENSHOTS") or REPO / ".inorder" / "screenshots")
BROKEN = "broken"  # the landing file `broken.parquet`, which is not Parquet


@pytest.fixture
def dagster_dev(tmp_path, home):
    # poison 15 %, 30 times the demo's: account_activity's reject rate (bad amounts) is over its 5 % failure
    # threshold, while accounts' stays within the thresholds it declares for its own refusals
    generate(home.landing, GeneratorConfig(events=400, streams=8, batches=2, gaps=0.05, poison=0.15, seed=3))
    (home.landing / f"{BROKEN}.parquet").write_bytes(b"not parquet at all")
    env = {**os.environ, "INORDER_HOME": str(home.root), "DAGSTER_HOME": str(dagster_home(home)),
           "PYSPARK_PYTHON": sys.executable}
    port = free_port()
    log = (tmp_path / "dagster-dev.log").open("w")
    # its own process group, so the webserver, daemon and run processes stop together
    process = subprocess.Popen([str(Path(sys.executable).with_name("dagster")), "dev", "-h", "127.0.0.1",
                                "-p", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        wait_for(lambda: _up(f"http://127.0.0.1:{port}/server_info"), 180, "dagster dev to serve")
        yield f"http://127.0.0.1:{port}", Path(env["DAGSTER_HOME"]), home
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


def dismiss_welcome_dialog(page) -> None:
    """The UI greets a new instance with a newsletter dialog a moment after load; skip it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_role("button", name="Skip").click(timeout=15_000)
    except PlaywrightTimeout:
        return
    page.locator(".bp5-overlay-backdrop").first.wait_for(state="detached", timeout=15_000)


def _settled(instance: dg.DagsterInstance) -> bool:
    """Every run finished, the UI's backfill among them, and the views materialised."""
    runs = instance.get_runs()
    backfills = instance.get_backfills()
    return (bool(runs) and all(r.is_finished for r in runs) and bool(backfills)
            and all(b.status.value.startswith("COMPLETED") for b in backfills)
            and instance.get_latest_materialization_event(dg.AssetKey("accounts")) is not None)


def _sensor_runs_done(instance: dg.DagsterInstance) -> bool:
    runs = instance.get_runs()
    return (any(r.job_name == "ingest_and_project" and r.is_finished for r in runs)
            and any(r.job_name == "project_views" and r.status == dg.DagsterRunStatus.SUCCESS for r in runs))


def _step_failures(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str]]:
    """(step, why) of each step that failed in the run."""
    failures = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = entry.dagster_event.step_failure_data
        failures.append((entry.dagster_event.step_key,
                         data.user_failure_data.description if data.user_failure_data else data.error.message))
    return failures


def metadata_row(page, key: str):
    """The row of the asset page's metadata table that shows `key`."""
    return page.locator("tr", has=page.get_by_text(key, exact=True)).first


def show_markdown(page, key: str):
    """Open the dialog the UI shows a Markdown metadata value in (its row holds only a "[Show Markdown]" link)."""
    metadata_row(page, key).get_by_text("[Show Markdown]").click()
    return page.get_by_role("dialog")


def close_dialog(page) -> None:
    page.keyboard.press("Escape")
    page.get_by_role("dialog").wait_for(state="detached", timeout=15_000)


def partition_list_row(page, key: str):
    """A partition's entry in the list of a check's Partitions tab. The name is also in the partition selector
    above it (a tag, or its menu's item), which comes first on the page."""
    return page.get_by_title(key, exact=True).last


def check_row(page, check: str):
    """The entry of the asset's checks list for `check`: the element whose whole text is the check's name
    (twice: its label and its key) and its status (Succeeded, Failed, Warning…)."""
    name = re.escape(check)
    return page.locator("div", has_text=re.compile(rf"^\s*{name}\s*{name}\s*[A-Z][a-z]+\s*$")).last


def shown_value(value) -> str:
    """A metadata value as the UI writes it (booleans in lower case, numbers with thousands separators)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def shown_markdown(cell: str) -> str:
    """A Markdown table cell's text as the UI shows it: code without its backticks, `\\|` as `|`."""
    return cell.replace("`", "").replace("\\|", "|")


def _check(instance: dg.DagsterInstance, view: str, name: str):
    key = dg.AssetCheckKey(dg.AssetKey(view), name)
    return instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]


def _verdict(instance: dg.DagsterInstance, partition: str):
    """The newest file_not_rejected evaluation of one event_batches partition."""
    return next(r.evaluation for r in instance.event_log_storage.get_asset_check_execution_history(
        FILE_NOT_REJECTED, limit=50) if r.partition == partition and r.evaluation)


def test_the_ui_shows_what_is_wrong_and_where(dagster_dev):
    from playwright.sync_api import expect, sync_playwright

    url, home_dir, home = dagster_dev
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    instance = dg.DagsterInstance.from_config(str(home_dir))
    # the landing sensor ingests the three files in one run, which the rejected file fails before it
    # projects; project_after_rejection then projects the two batches it archived
    wait_for(lambda: _sensor_runs_done(instance), 420, "the sensor's run and the projection after it", every=3)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/asset-groups", wait_until="networkidle")
            dismiss_welcome_dialog(page)
            for group in ("ingest", "views", "logs"):
                expect(page.get_by_text(group, exact=True).first).to_be_visible()
            page.get_by_role("button", name="Materialize all…").click()
            page.get_by_role("button", name="All", exact=True).click()
            page.get_by_role("button", name="Launch backfill").click()
            page.screenshot(path=str(SCREENSHOTS / "launched.png"))
            wait_for(lambda: _settled(instance), 420, "the backfill to finish", every=3)

            # what failed is the rejected file's partition, and only that, with its reason: every failed run
            # (the sensor's, the backfill's) failed in its ingest step, on that file alone
            failed = [r for r in instance.get_runs() if r.status != dg.DagsterRunStatus.SUCCESS]
            reasons = {r.run_id: _step_failures(instance, r.run_id) for r in failed}
            assert failed and all(steps and all(step == "event_batches" and f"batch {BROKEN} was rejected" in why
                                                and "batch b" not in why.replace(f"batch {BROKEN}", "")
                                                for step, why in steps) for steps in reasons.values()), reasons
            page.goto(f"{url}/assets/event_batches?view=partitions", wait_until="networkidle")
            expect(page.get_by_text(BROKEN, exact=True).first).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Failed (1)", exact=True)).to_be_visible()
            expect(page.get_by_text("Materialized (2)", exact=True)).to_be_visible()
            page.screenshot(path=str(SCREENSHOTS / "event_batches-partitions.png"), full_page=True)
            # the reason is on that partition: its file_not_rejected verdict, red, with the reason and what to do;
            # the archived files' verdicts pass (each judges its partition's newest materialisation)
            page.goto(f"{url}/assets/event_batches?view=checks&checkDetail=file_not_rejected", wait_until="networkidle")
            page.locator("button[role=tab]", has_text="Partitions").click(timeout=30_000)  # the check's tab
            expect(page.get_by_text(re.compile(r"^Failed\s*\(1\)$")).first).to_be_visible(timeout=30_000)
            expect(page.get_by_text(re.compile(r"^Passed\s*\(2\)$")).first).to_be_visible(timeout=30_000)
            page.keyboard.press("Escape")  # the partition selector's menu, if open, would take the click
            partition_list_row(page, BROKEN).click(timeout=30_000)
            verdict = _verdict(instance, BROKEN)
            assert not verdict.passed and verdict.description.startswith(f"batch {BROKEN} was rejected: "), verdict
            assert verdict.description.endswith(verdict.metadata["next_step"].value), verdict
            expect(page.get_by_text(verdict.description, exact=True).first).to_be_visible(timeout=30_000)
            for key in ("rejected_reason", "next_step"):
                expect(metadata_row(page, key)).to_contain_text(verdict.metadata[key].value)
            page.screenshot(path=str(SCREENSHOTS / "event_batches-rejected-partition.png"), full_page=True)
            page.goto(f"{url}/runs/{failed[0].run_id}", wait_until="networkidle")
            expect(page.get_by_text(f"batch {BROKEN} was rejected").first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "rejected-run.png"), full_page=True)

            # the view's metadata, value for value as the instance holds it: this run's counts apart from the
            # totals, the blocked streams, and which code built the view
            metadata = instance.get_latest_materialization_event(
                dg.AssetKey("accounts")).asset_materialization.metadata
            page.goto(f"{url}/assets/accounts", wait_until="networkidle")
            for key in ("conserved", "run/applied", "total/applied", "total/selected", "total/blocked_streams",
                        "lag/entries", "code/fingerprint", "code/matches"):
                expect(metadata_row(page, key)).to_contain_text(shown_value(metadata[key].value), timeout=30_000)
            expect(metadata_row(page, "code/state")).to_contain_text("matches the store")
            expect(page.get_by_text("waiting for seq").first).to_be_visible()  # the blocked-streams table
            page.screenshot(path=str(SCREENSHOTS / "accounts.png"), full_page=True)

            # the checks: red where something is wrong, green where nothing is; each waited for on the page
            page.goto(f"{url}/assets/accounts?view=checks", wait_until="networkidle")
            outcomes = {"reject_rate": "Succeeded", "conservation": "Succeeded", "expectations": "Succeeded",
                        "late_rate": "Succeeded", "no_handler_bugs": "Succeeded", "no_parked_streams": "Succeeded",
                        "watermarks_never_move_back": "Succeeded"}
            for check, outcome in outcomes.items():
                expect(check_row(page, check)).to_contain_text(outcome, timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "accounts-checks.png"), full_page=True)

            # the suite as a GX user reads it: its name and a row per expectation, ✓ each
            page.goto(f"{url}/assets/accounts?view=checks&checkDetail=expectations", wait_until="networkidle")
            expect(metadata_row(page, "suite")).to_contain_text("accounts", timeout=30_000)
            results = show_markdown(page, "results")
            for text in ("expect_column_values_to_be_between", "accounts.balance", "min_value=0.0", "✓"):
                expect(results.get_by_text(text, exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "accounts-expectations.png"), full_page=True)
            close_dialog(page)

            # a red rate says why (its reasons, counted) and what to run next
            page.goto(f"{url}/assets/account_activity?view=checks", wait_until="networkidle")
            expect(check_row(page, "reject_rate")).to_contain_text("Failed", timeout=30_000)
            page.goto(f"{url}/assets/account_activity?view=checks&checkDetail=reject_rate", wait_until="networkidle")
            reasons = _check(instance, "account_activity", "reject_rate").evaluation.metadata["top_reasons"].value
            commonest = shown_markdown(reasons.splitlines()[2].split(" | ")[0].removeprefix("| "))
            expect(metadata_row(page, "next_command")).to_contain_text(
                "inorder errors --view account_activity --kind handler_error", timeout=30_000)
            top_reasons = show_markdown(page, "top_reasons")
            for text in ("reason", "messages", commonest):
                expect(top_reasons.get_by_text(text, exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "account_activity-reject_rate.png"), full_page=True)
            close_dialog(page)
        finally:
            browser.close()
    red = _check(instance, "account_activity", "reject_rate")
    assert red.evaluation.passed is False and red.evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert red.evaluation.metadata["last_24_h/rate_pct"].value > 5.0
    assert red.evaluation.metadata["top_reasons"].value.startswith("| reason | messages | streams | e.g. |")
    for name in ("reject_rate", "no_handler_bugs", "conservation", "watermarks_never_move_back", "no_parked_streams",
                 "no_overdue_blocked_streams"):
        assert _check(instance, "accounts", name).evaluation.passed, name
    accounts = instance.get_latest_materialization_event(dg.AssetKey("accounts")).asset_materialization.metadata
    assert accounts["total/blocked_streams"].value > 0 and "| waiting for seq |" in accounts["blocked_streams"].value
    assert accounts["conserved"].value is True
