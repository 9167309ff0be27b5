"""The `inorder` console script end to end, as a user runs it."""

from __future__ import annotations

import argparse
import re

from tests.command import clean_environment, inorder


def test_generate_run_status_errors_and_clear_failures(tmp_path):
    home = tmp_path / "home"
    env = clean_environment(home)
    inorder(env, "generate", "--out", str(home / "landing"), "--events", "3000", "--streams", "30", "--batches", "3",
            "--disorder", "0.2", "--duplicates", "0.05", "--gaps", "0.02", "--poison", "0.02", "--seed", "3")
    assert sorted(p.name for p in (home / "landing").iterdir()) == [
        "batch-00001.jsonl", "batch-00002.jsonl", "batch-00003.jsonl"]
    first = inorder(env, "run", "--now", "2026-11-02T00:00:00Z")
    assert "ran 3 batches" in first.stdout and "ingest 3/3" in first.stderr
    assert "] starting Spark (local[*])…" in first.stderr  # said before the JVM's seconds of silence
    # a rate, or (when the engine's passes are not most of the run: tests/fast/test_run_summary.py) where the time went
    assert re.search(r"ran 3 batches, [\d,]+ records in [\d.]+s \(([\d,]+ records/s|Spark start [\d.]+s, passes "
                     r"[\d.]+s, commit [\d.]+s, the rest [\d.]+s: imports, ingest, Dagster, checks)\);", first.stdout), \
        first.stdout
    assert "ran a tick" in inorder(env, "run", "--now", "2026-11-02T00:30:00Z").stdout
    again = inorder(env, "run", "--now", "2026-11-02T00:30:00Z")  # a time already recorded: no second tick
    assert "ran nothing new" in again.stdout, again.stdout + again.stderr
    lines = inorder(env, "status").stdout.splitlines()
    for view in ("accounts", "account_activity", "daily_totals"):
        (row,) = [line for line in lines if re.match(rf"^{view}\s+\d", line)]
        assert row.split()[-1] == "yes", row  # the conservation identity holds
    assert "gaps" not in lines[1] and max(len(line) for line in lines[1:5]) <= 100  # the table fits 100 columns
    assert "gaps" in inorder(env, "status", "--wide").stdout.splitlines()[1]  # --wide: every outcome, gaps, waits
    errors = inorder(env, "errors", "--kind", "handler_error", "--limit", "5")
    lines = errors.stdout.splitlines()
    assert len(lines) == 8, errors.stdout  # a header, its rule, five rows and the total
    assert all(line.split()[1] == "handler_error" for line in lines[2:7])

    backwards = inorder(env, "run", "--now", "2026-11-01T00:00:00Z", code=1)
    assert backwards.stderr.strip().splitlines()[-1].startswith("inorder: error: logical time")
    not_parked = inorder(env, "retry", "--view", "accounts", "--stream", "acct-00001", code=1)
    assert "is not parked" in not_parked.stderr.splitlines()[-1]
    assert "no view named" in inorder(env, "rebuild", "nope", code=1).stderr.splitlines()[-1]


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
        done = inorder(clean_environment(), *args, code=2, timeout=120)
        assert done.stdout == "", args
        (line,) = done.stderr.splitlines()
        assert line.startswith("inorder") and says in line and "--help` lists the options" in line, line
