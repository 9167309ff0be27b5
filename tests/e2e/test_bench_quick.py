"""The benchmark suite runs (bench/, `make bench-quick`): at tiny sizes, every case completes and
lands in the JSON results with a chart. Nothing about speed is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.cluster import QUICK_JVM

pytestmark = pytest.mark.long  # scripts/reliability.sh runs it; CI's budget does not hold it

ROOT = Path(__file__).resolve().parents[2]
CASES = ("bulk", "floor", "duckdb_peer", "spark_state_peer", "prior_art", "incremental", "tick", "scaling")


def test_bench_quick_writes_every_case(tmp_path: Path) -> None:
    results = tmp_path / "results"
    # a quick-starting driver JVM (C1 only, serial GC) as the cluster test uses: this checks the suite, not speed
    env = {**os.environ, "INORDER_SPARK_CONF": json.dumps({"spark.driver.extraJavaOptions": QUICK_JVM})}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sizes", "300,600", "--incremental-events", "100",
         "--tick-streams", "100", "--prior-events", "200", "--work", str(tmp_path / "work"),
         "--results", str(results)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    latest = json.loads((results / "latest.json").read_text())
    assert latest["mode"] == "quick"
    for case in CASES:
        assert latest["cases"].get(case), f"case {case} missing from the results"
    assert [s["events"] for s in latest["cases"]["scaling"]] == [300, 600]
    assert latest["cases"]["duckdb_peer"][0]["counts_match"], latest["cases"]["duckdb_peer"]
    assert all(p["equal"] for p in latest["cases"]["spark_state_peer"]), latest["cases"]["spark_state_peer"]
    assert latest["cases"]["prior_art"]["counts_match"], latest["cases"]["prior_art"]["check"]
    assert latest["cases"]["tick"]["timed_out_as_expected"]
    assert all(b["conserved"] for b in latest["cases"]["bulk"])
    assert (results / "latest.png").stat().st_size > 0
    assert len(list(results.glob("*.json"))) == 2  # <timestamp>.json and latest.json
    assert "| case" in done.stdout and "s/M at 600 / at 300" in done.stdout


def test_side_by_side_runs_both_checkouts_and_compares_their_stores(tmp_path: Path) -> None:
    """bench/studies/side_by_side.py (wide_pass, store_growth) on local[*] and the loopback cluster, the old
    side a worktree it makes of HEAD."""
    results, work = tmp_path / "results", tmp_path / "work"
    env = {**os.environ, "INORDER_SPARK_CONF": json.dumps({"spark.driver.extraJavaOptions": QUICK_JVM})}
    done = subprocess.run(
        [sys.executable, "-m", "bench.studies.side_by_side", "--quick", "--sizes", "300,600", "--growth-streams",
         "50", "--modes", "local,cluster", "--cluster-sizes", "300", "--old", "HEAD", "--work", str(work),
         "--results", str(results)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    latest = json.loads((results / "sides-latest.json").read_text())
    assert [(c["mode"], c["streams"]) for c in latest["cases"]] == [("local", 300), ("local", 600), ("cluster", 300)]
    for case in latest["cases"]:
        old, new = case["sides"]["old"], case["sides"]["new"]
        assert old["returncode"] == new["returncode"] == 0, (old.get("error"), new.get("error"))
        assert Path(old["engine"]).parent.name == "code-old" and Path(new["engine"]).parent == ROOT
        assert set(old["hooks"]) == {"state_load", "commit"}
        assert all(t["equal"] for t in case["stores"].values()), case["stores"]
        assert new["runs"][1]["peak_rss_bytes"]["driver"] > 0
    assert latest["cases"][-1]["sides"]["new"]["runs"][1]["peak_rss_bytes"]["executors"] > 0
    assert any(r["case"] == "store_growth new" for r in latest["table"])
    assert [p.name for p in work.iterdir()] == ["inputs"]  # its scratch folder and worktree are gone
    assert "code-old" not in subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True,
                                            text=True).stdout
