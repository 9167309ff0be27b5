"""A real browser against a real `dagster dev`: launch a materialisation of all assets from the UI,
wait for it to succeed, and see the views' metadata and checks."""

from __future__ import annotations

import os
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

from inorder.dagster_runs import dagster_home
from pipelines.store import Home
from views.bank_generator import GeneratorConfig, generate

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]
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


@pytest.fixture
def dagster_dev(tmp_path):
    home = Home(tmp_path / "home").ensure()
    generate(home.landing, GeneratorConfig(events=400, streams=8, batches=2, seed=3))
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


def _views_materialized(instance: dg.DagsterInstance) -> bool:
    runs = instance.get_runs()
    busy = [r for r in runs if not r.is_finished]
    if busy or not runs:
        return False
    failed = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, f"runs failed: {[(r.job_name, r.status) for r in failed]}"
    event = instance.get_latest_materialization_event(dg.AssetKey("accounts"))
    backfills = instance.get_backfills()
    return event is not None and backfills and all(b.status.value == "COMPLETED_SUCCESS" for b in backfills)


def test_materialize_all_from_the_ui(dagster_dev, tmp_path):
    from playwright.sync_api import sync_playwright

    url, home_dir, home = dagster_dev
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/asset-groups", wait_until="networkidle")
            dismiss_welcome_dialog(page)
            for group in ("ingest", "views", "logs"):
                assert page.get_by_text(group, exact=True).first.is_visible()
            page.get_by_role("button", name="Materialize all…").click()
            page.get_by_role("button", name="All", exact=True).click()
            page.get_by_role("button", name="Launch backfill").click()
            page.screenshot(path=str(tmp_path / "launched.png"))

            instance = dg.DagsterInstance.from_config(str(home_dir))
            wait_for(lambda: _views_materialized(instance), 420, "the backfill to succeed", every=3)

            page.goto(f"{url}/assets/accounts", wait_until="networkidle")
            for text in ("conserved", "run/applied", "total/pending", "total/blocked_streams", "newest_errors"):
                page.get_by_text(text, exact=True).first.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "accounts.png"), full_page=True)
            page.goto(f"{url}/assets/accounts?view=checks", wait_until="networkidle")
            for check in ("conservation", "expectations", "watermarks_never_move_back"):
                page.get_by_text(check, exact=True).first.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "accounts-checks.png"), full_page=True)
        finally:
            browser.close()
    evaluations = [instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey("accounts"), name)]) for name in ("conservation", "expectations")]
    assert all(evaluations)
