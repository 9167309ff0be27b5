"""The `inorder` console script end to end, as a user runs it."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

INORDER = str(Path(sys.executable).with_name("inorder"))


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "INORDER_HOME": str(home)}
    return subprocess.run([INORDER, *args], env=env, capture_output=True, text=True, timeout=300)


def test_generate_run_status_errors_and_clear_failures(tmp_path):
    home = tmp_path / "home"
    gen = cli(home, "generate", "--out", str(home / "landing"), "--events", "3000", "--streams", "30",
              "--batches", "3", "--disorder", "0.2", "--duplicates", "0.05", "--gaps", "0.02", "--poison", "0.02",
              "--seed", "3")
    assert gen.returncode == 0, gen.stderr
    assert sorted(p.name for p in (home / "landing").iterdir()) == [
        "batch-00001.jsonl", "batch-00002.jsonl", "batch-00003.jsonl"]
    first = cli(home, "run", "--now", "2026-11-02T00:00:00Z")
    assert first.returncode == 0, first.stderr
    assert "ran 3 batches" in first.stdout and "ingest 3/3" in first.stderr
    assert "] starting Spark (local[*])…" in first.stderr  # said before the JVM's seconds of silence
    # a rate, or (when the engine's passes are not most of the run: tests/fast/test_run_summary.py) where the time went
    assert re.search(r"ran 3 batches, [\d,]+ records in [\d.]+s \(([\d,]+ records/s|Spark start [\d.]+s, passes "
                     r"[\d.]+s, commit [\d.]+s, the rest [\d.]+s: imports, ingest, Dagster, checks)\);", first.stdout), \
        first.stdout
    tick = cli(home, "run", "--now", "2026-11-02T00:30:00Z")
    assert tick.returncode == 0 and "ran a tick" in tick.stdout
    again = cli(home, "run", "--now", "2026-11-02T00:30:00Z")  # a time already recorded: no second tick
    assert again.returncode == 0 and "ran nothing new" in again.stdout, again.stdout + again.stderr
    status = cli(home, "status")
    assert status.returncode == 0
    lines = status.stdout.splitlines()
    for view in ("accounts", "account_activity", "daily_totals"):
        (row,) = [line for line in lines if re.match(rf"^{view}\s+\d", line)]
        assert row.split()[-1] == "yes", row  # the conservation identity holds
    assert "gaps" not in lines[1] and max(len(line) for line in lines[1:5]) <= 100  # the table fits 100 columns
    assert "gaps" in cli(home, "status", "--wide").stdout.splitlines()[1]  # --wide: every outcome, gaps, waits
    errors = cli(home, "errors", "--kind", "handler_error", "--limit", "5")
    lines = errors.stdout.splitlines()
    assert errors.returncode == 0 and len(lines) == 8, errors.stdout  # a header, its rule, five rows and the total
    assert all(line.split()[1] == "handler_error" for line in lines[2:7])

    backwards = cli(home, "run", "--now", "2026-11-01T00:00:00Z")
    assert backwards.returncode == 1
    assert backwards.stderr.strip().splitlines()[-1].startswith("inorder: error: logical time")
    not_parked = cli(home, "retry", "--view", "accounts", "--stream", "acct-00001")
    assert not_parked.returncode == 1 and "is not parked" in not_parked.stderr.splitlines()[-1]
    unknown = cli(home, "rebuild", "nope")
    assert unknown.returncode == 1 and "no view named" in unknown.stderr.splitlines()[-1]


def _commands(parser: argparse.ArgumentParser, prefix: str = "inorder"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield f"{prefix} {name}", command
                yield from _commands(command, f"{prefix} {name}")


def test_every_command_and_option_says_what_it_is_its_default_and_its_unit():
    from inorder.cli import parser

    commands = dict(_commands(parser()))
    assert {"inorder status", "inorder generate", "inorder spark start"} <= set(commands)
    for name, command in commands.items():
        assert command.description and command.description.startswith(f"{name}: "), name
        for action in command._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, (name, action.dest)
            if action.default not in (None, False) and not action.required:
                assert "default" in action.help, (name, action.dest)  # and the unit, where it has one:
    generate = commands["inorder generate"].format_help()
    assert "0 to 1 (default 0.1: 10 %)" in " ".join(generate.split())  # --disorder: a fraction, not a percent


def test_a_bad_argument_gets_one_line_of_the_clis_own():
    for args, says in ((["stauts"], "did you mean 'status'?"), (["errors", "--limit", "-1"], "-1 is negative"),
                       (["generate", "--out", "x", "--events", "0"], "give 1 or more"),
                       (["generate", "--out", "x", "--disorder", "abc"], "not a number: 'abc'")):
        done = subprocess.run([INORDER, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stdout == "", args
        (line,) = done.stderr.splitlines()
        assert line.startswith("inorder") and says in line and "--help` lists the options" in line, line
