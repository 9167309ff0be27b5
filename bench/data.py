"""Benchmark inputs: bank demo batches from `inorder generate`, cached by their parameters.

Every case uses the issue's mix: streams = events / 20, disorder 30 %, duplicates 1 %, gaps 0.1 %,
poison 0.01 %. Generation runs in its own process (the `inorder` CLI), so its memory never counts
towards a measured run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipelines.config import Settings
from pipelines.registry import load_views
from pipelines.store.database import Home

BANK_VIEWS = load_views("views")  # the bench measures the bank demo, whatever INORDER_VIEWS says
EVENTS_PER_STREAM = 20
MIX = {"disorder": 0.3, "duplicates": 0.01, "gaps": 0.001, "poison": 0.0001}
BATCHES = 10
SEED = 7
INCREMENTAL_ROUNDS = 3  # the incremental case's rounds (bench/incremental.py)


def inorder_cli() -> list[str]:
    """The installed `inorder` entry point of this interpreter's venv (or the module, failing that)."""
    script = Path(sys.executable).with_name("inorder")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from inorder.cli import main; main()"]


def bank_batches(cache: Path, events: int, batches: int = BATCHES, seed: int = SEED) -> Path:
    """A folder of `batches` JSON Lines files with `events` bank events (generated once, then reused)."""
    folder = cache / f"bank-{events}-b{batches}-s{seed}"
    done = folder / ".done"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    args = {"events": events, "streams": max(1, events // EVENTS_PER_STREAM), "batches": batches, **MIX,
            "seed": seed}
    subprocess.run([*inorder_cli(), "generate", "--out", str(folder),
                    *[a for k, v in args.items() for a in (f"--{k}", str(v))]], check=True,
                   stdout=subprocess.DEVNULL)
    done.write_text(json.dumps(args))
    return folder


def incremental_batch(cache: Path, events: int, round_no: int = 1) -> Path:
    """One batch of `events` bank events on streams of their own (`inc<round>-…`), with the same mix:
    committing it onto an empty store and onto a full one is the same work on the batch itself.
    Each round is a different batch (its own seed and streams), so rounds can follow each other."""
    target = cache / f"incremental-{events}" / f"zz-incremental-{round_no}.jsonl"
    if target.exists():
        return target
    source = bank_batches(cache, events, batches=1, seed=SEED + round_no)
    text = (source / "batch-00001.jsonl").read_text()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".tmp")
    partial.write_text(text.replace('"acct-', f'"inc{round_no}-'))
    partial.replace(target)
    return target


def blocked_batches(cache: Path, streams: int) -> tuple[Path, Path]:
    """Two batches for the tick case: every stream gets seq 1 and 3 (2 never arrives), so it is
    blocked; batch `a` holds the first half of the streams, batch `b` the second half."""
    folder = cache / f"blocked-{streams}"
    a, b = folder / "batch-a.jsonl", folder / "batch-b.jsonl"
    if a.exists() and b.exists():
        return a, b
    folder.mkdir(parents=True, exist_ok=True)
    for path, ids in ((a, range(streams // 2)), (b, range(streams // 2, streams))):
        lines = []
        for i in ids:
            stream = f"blk-{i:07d}"
            lines.append(json.dumps({"stream_id": stream, "seq": 1, "type": "AccountOpened",
                                     "payload": {"owner": "Ada"}, "occurred_at": "2026-11-01T00:00:00Z",
                                     "event_id": f"{stream}-1"}))
            lines.append(json.dumps({"stream_id": stream, "seq": 3, "type": "Deposited",
                                     "payload": {"amount": 10.0}, "occurred_at": "2026-11-01T00:02:00Z",
                                     "event_id": f"{stream}-3"}))
        partial = path.with_suffix(".tmp")
        partial.write_text("".join(line + "\n" for line in lines))
        partial.replace(path)
    return a, b


def land(files: list[Path], landing: Path) -> None:
    """Put input files into a landing folder (hard links where possible: the inputs can be GBs)."""
    landing.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = landing / f.name
        if target.exists():
            continue
        try:
            os.link(f, target)
        except OSError:
            shutil.copyfile(f, target)


def jsonl_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jsonl"))


def _account_events(path: Path, stream_ids: range, seqs: range) -> None:
    """Bank events for `wide-<i>` accounts: seq 1 opens the account, every later seq deposits 10."""
    def line(stream: str, seq: int) -> str:
        kind, payload = ("AccountOpened", '{"owner": "Ada"}') if seq == 1 else ("Deposited", '{"amount": 10.0}')
        return (f'{{"stream_id": "{stream}", "seq": {seq}, "type": "{kind}", "payload": {payload}, '
                f'"occurred_at": "2026-11-01T00:{seq:02d}:00Z", "event_id": "{stream}-{seq}"}}\n')

    partial = path.with_suffix(".tmp")
    with open(partial, "w") as out:
        for i in stream_ids:
            stream = f"wide-{i:07d}"
            out.write("".join(line(stream, seq) for seq in seqs))
    partial.replace(path)


def wide_batches(cache: Path, streams: int) -> tuple[Path, Path]:
    """The wide pass's inputs (bench/studies/side_by_side.py): `streams` accounts with
    seq 1–2 (the store), then seq 3 for every one of them (the pass)."""
    folder = cache / f"wide-{streams}"
    folder.mkdir(parents=True, exist_ok=True)
    store, wide = folder / "wide-1-store.jsonl", folder / "wide-2-pass.jsonl"
    for path, seqs in ((store, range(1, 3)), (wide, range(3, 4))):
        if not path.exists():
            _account_events(path, range(streams), seqs)
    return store, wide


def growth_batch(cache: Path, streams: int, touched: int) -> Path:
    """After the wide pass: seq 4 for the first `touched` of its `streams` accounts (the store_growth pass)."""
    path = cache / f"wide-{streams}" / f"wide-3-growth-{touched}.jsonl"
    if not path.exists():
        _account_events(path, range(min(touched, streams)), range(4, 5))
    return path


def home(root: Path) -> Home:
    """A benchmark's home, configured by the environment's INORDER_* variables (the suite is a process's edge)."""
    return Home.of(Settings.from_env(), root)


def session():
    """The benchmark's Spark session, as the environment's INORDER_SPARK_MASTER and INORDER_SPARK_CONF say."""
    from pipelines.spark.session import spark_session

    settings = Settings.from_env()
    return spark_session(settings.spark_master, settings.spark_conf)
