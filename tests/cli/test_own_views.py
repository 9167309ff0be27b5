"""A user's own view module, outside the repository, through the real `inorder` command; and the
README's tutorial, run as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb

from pipelines.spark.class_archive import cache_dir
from tests.command import INORDER, REPO, clean_environment, inorder
from tests.helpdesk_views import HELPDESK

START = datetime(2026, 3, 1, 21, 0, tzinfo=timezone.utc)


def ticket_records() -> list[dict]:
    """Three tickets whose events cross midnight and time zones, with sub-cent costs and quarter hours."""
    plans = {
        "T-1": [("TicketOpened", {"title": "printer", "priority": 2, "urgent": True, "cost": 12.345}),
                ("Replied", {}), ("EffortLogged", {"hours": 1.25, "rate": 40}), ("Closed", {}), ("Reopened", {}),
                ("EffortLogged", {"hours": 0.5, "rate": 60}), ("Closed", {})],
        "T-2": [("TicketOpened", {"title": "vpn", "priority": 5, "urgent": False, "cost": 0}),
                ("EffortLogged", {"hours": 2.75, "rate": 35}), ("Replied", {}), ("Replied", {})],
        "T-3": [("TicketOpened", {"title": "bad", "priority": 9, "urgent": False, "cost": 1}),  # refused
                ("Replied", {})],
    }
    records = []
    for n, (stream_id, events) in enumerate(plans.items()):
        moment = START + timedelta(hours=n)
        for seq, (kind, payload) in enumerate(events, start=1):
            moment += timedelta(hours=5 * seq)
            stamp = moment.astimezone(timezone(timedelta(hours=-5 if seq % 2 else 9))).isoformat()
            records.append({"stream_id": stream_id, "stream_type": "ticket", "seq": seq, "type": kind,
                            "payload": payload, "occurred_at": stamp})
    return records


def helpdesk_outside(root: Path) -> Path:
    """A folder outside the repository holding the help-desk views as the module `helpdesk_views`."""
    outside = root / "elsewhere"
    outside.mkdir()
    shutil.copy(REPO / "tests" / "helpdesk_views.py", outside / "helpdesk_views.py")
    return outside


def tables(home: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        return {t.name: con.execute(f'SELECT * FROM "{t.name}" ORDER BY ALL').fetchall() for t in HELPDESK.tables}
    finally:
        con.close()


def test_a_module_outside_the_repository_runs_through_the_cli_the_same_in_one_run_or_many(tmp_path):
    outside = helpdesk_outside(tmp_path)
    lines = [json.dumps(r) for r in ticket_records()]

    one = tmp_path / "one"
    (one / "landing").mkdir(parents=True)
    (one / "landing" / "all.jsonl").write_text("\n".join(lines) + "\n")
    ran = inorder(clean_environment(one, "helpdesk_views", path=(outside,), INORDER_SPARK_WARM="1"), "run", "--now",
                  "2026-03-05T00:00:00Z", cwd=outside)
    assert "ran 1 batch," in ran.stdout

    many = tmp_path / "many"
    env = clean_environment(many, "helpdesk_views", path=(outside,), INORDER_SPARK_WARM="1")
    (many / "landing").mkdir(parents=True)
    for i, part in enumerate((lines[10:], lines[4:10], lines[:4]), start=1):  # later seqs first
        (many / "landing" / f"part-{i}.jsonl").write_text("\n".join(part) + "\n")
        inorder(env, "run", "--now", f"2026-03-05T00:0{i}:00Z", cwd=outside)
        (many / "landing" / f"part-{i}.jsonl").rename(many / f"part-{i}.done")  # the next run brings the next file

    assert tables(many) == tables(one)
    status = inorder(env, "status", cwd=outside).stdout
    assert re.search(r"^helpdesk\s+\d", status, re.M)
    con = duckdb.connect(str(many / "store.duckdb"), read_only=True)
    try:
        tickets = con.execute("SELECT ticket_id, opened_on, opened_at, urgent, effort_hours, cost, days_open, "
                              "hours_to_reply, status FROM tickets ORDER BY ticket_id").fetchall()
        refusals = con.execute("SELECT stream_id, error_class FROM inorder.errors WHERE kind = 'handler_error'").fetchall()
        parked = con.execute("SELECT stream_id FROM inorder.watermarks WHERE parked").fetchall()
    finally:
        con.close()
    t1, t2 = tickets
    assert str(t1[1]) == "2026-03-02" and t1[2].astimezone(timezone.utc).hour == 2  # 21:00 + 5 h, in UTC
    assert (t1[3], t1[4], str(t1[5]), t1[8]) == (False, 1.75, "92.35", "closed")  # 12.345 → 12.35, + 50 + 30
    assert (t2[6], t2[7], str(t2[5])) == (2, 25.0, "96.25")  # opened Mar 2 03:00 UTC, replies 25 h and 2 days on
    assert refusals == [("T-3", "reject")] and parked == [("T-3",)]  # on_error="park"

    # the runs went through the Dagster code location: the user's view is an asset, and its checks ran
    import dagster as dg
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    instance = dg.DagsterInstance.from_config(str(many / "dagster"))
    assert instance.get_latest_materialization_event(dg.AssetKey("helpdesk")) is not None
    for check in ("conservation", "expectations", "watermarks_never_move_back"):
        key = dg.AssetCheckKey(dg.AssetKey("helpdesk"), check)
        execution = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
        assert execution.status == AssetCheckExecutionRecordStatus.SUCCEEDED, check
        assert execution.evaluation.passed, check


def test_the_readme_tutorial_runs_as_written(tmp_path):
    """The README's "Write your own view": its module and its replay test, copied out and run."""
    readme = (REPO / "README.md").read_text()
    tutorial = readme[readme.index("## Write your own view"):]
    blocks = dict(re.findall(r"```python\n# ~/carrier/(\S+)\n(.*?)```", tutorial, re.S))
    assert set(blocks) == {"carrier_views.py", "test_carrier.py"}
    for name, text in blocks.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_carrier.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout

    # step 3, the shell block as written, with ~ a fresh home holding ~/carrier and an export in ~/exports
    (step3,) = re.findall(r"\*\*3\. Run it\.\*\*.*?```bash\n(.*?)```", tutorial, re.S)
    user = tmp_path / "user"
    (user / "carrier").mkdir(parents=True)
    (user / "exports").mkdir()
    (user / "carrier" / "carrier_views.py").write_text(blocks["carrier_views.py"])
    sent = {"stream_id": "s1", "stream_type": "shipment", "seq": 1, "type": "Sent", "payload": {"fee": 4.5, "kg": 1},
            "occurred_at": "2026-11-01T17:00:00+00:00"}
    delivered = {"stream_id": "s1", "stream_type": "shipment", "seq": 2, "type": "Delivered",
                 "occurred_at": "2026-11-03T09:00:00+00:00"}
    (user / "exports" / "shipments-001.jsonl").write_text(f"{json.dumps(delivered)}\n{json.dumps(sent)}\n")
    shell_env = {k: v for k, v in clean_environment(as_a_user=True).items() if k != "PYTHONPATH"}
    shell_env.setdefault("XDG_CACHE_HOME", str(cache_dir().parent))  # the machine's, with the set-up's class archive
    done = subprocess.run(["bash", "-euc", step3], cwd=REPO, env={**shell_env, "HOME": str(user)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^carrier\s+1\s+2\s+2\s", done.stdout, re.M), done.stdout  # 1 stream, 2 selected, 2 applied
    assert "0 error log rows" in done.stdout and "unrouted: none (the views subscribe to shipment)" in done.stdout
    assert re.search(r"^checks: (\d+) of \1 passed$", done.stdout, re.M), done.stdout  # `inorder checks`: all green
    # a later shell: the home recorded its views and their folder (`init --views`), so INORDER_HOME is enough, for
    # a run too (Spark's Python workers import the view module)
    home = user / "carrier" / ".inorder"
    assert (home / "views.txt").read_text().splitlines()[2:] == [
        "# the folder they are in, put on Python's path when they are loaded from here", f"folder: {user / 'carrier'}"]
    (home / "landing" / "shipments-002.jsonl").write_text(json.dumps({**sent, "stream_id": "s2"}) + "\n")
    later = subprocess.run(["bash", "-euc", f"{INORDER} run && {INORDER} status"], capture_output=True, text=True,
                           timeout=600, cwd=user, env={**shell_env, "INORDER_HOME": str(home)})
    assert later.returncode == 0 and re.search(r"^carrier\s+2\s+3\s+3\s", later.stdout, re.M), later.stdout + later.stderr
