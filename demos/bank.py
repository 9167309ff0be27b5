"""Demo batches for the bank views, with the disorder real feeds have.

Each account's history is valid on its own (opened, deposits, withdrawals within the balance,
sometimes closed at zero); then messages are displaced (disorder), delivered twice (duplicates;
one in ten of the second copies differs: a conflict), lost (gaps) or corrupted (poison: bad
amounts, missing owners, bad dates, unparsable lines).
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path


OWNERS = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim")
BASE_TIME = datetime(2026, 11, 1, tzinfo=timezone.utc)



@dataclass(frozen=True)
class GeneratorConfig:
    events: int = 10_000
    streams: int = 100
    batches: int = 10
    disorder: float = 0.1
    duplicates: float = 0.02
    gaps: float = 0.005
    poison: float = 0.005
    seed: int = 7


def _history(rng: random.Random, stream_id: str, length: int, clock: list[datetime]) -> list[dict]:
    events: list[dict] = []
    balance = 0  # cents

    def add(event_type: str, payload: dict) -> None:
        clock[0] += timedelta(seconds=rng.randint(1, 600))
        events.append({"stream_id": stream_id, "seq": len(events) + 1, "type": event_type, "payload": payload,
                       "occurred_at": clock[0].strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "event_id": f"{stream_id}-{len(events) + 1}"})

    add("AccountOpened", {"owner": rng.choice(OWNERS)})
    closes = length >= 4 and rng.random() < 0.2
    body = length - 1 - (2 if closes else 0)
    for _ in range(max(body, 0)):
        if balance > 0 and rng.random() < 0.4:
            cents = rng.randint(1, balance)
            balance -= cents
            add("Withdrawn", {"amount": cents / 100})
        else:
            cents = rng.randint(100, 100_000)
            balance += cents
            add("Deposited", {"amount": cents / 100})
    if closes:
        if balance > 0:
            add("Withdrawn", {"amount": balance / 100})
        else:
            add("Deposited", {"amount": 1.0})
            add("Withdrawn", {"amount": 1.0})
        add("AccountClosed", {})
    return events[:length]


def _poisoned(rng: random.Random, event: dict) -> dict:
    event = {**event, "payload": dict(event["payload"])}
    kind = rng.randrange(4)
    if kind == 0:
        event["payload"]["amount"] = "abc"
    elif kind == 1:
        event["payload"]["amount"] = -5
    elif kind == 2:
        event["payload"].pop("amount", None)
        event["payload"].pop("owner", None)
    else:
        event["occurred_at"] = "yesterday"
    return event


def _redelivered(rng: random.Random, line: str) -> str:
    """A second delivery: usually an exact copy, sometimes (1 in 10) with a changed amount — a conflict."""
    event = json.loads(line)
    if rng.random() < 0.1 and isinstance(event["payload"].get("amount"), (int, float)):
        event["payload"]["amount"] = round(event["payload"]["amount"] + 0.01, 2)
        return json.dumps(event)
    return line


def batch_paths(out: Path, count: int, prefix: str = "batch-") -> list[Path]:
    """`count` new batch files in `out`, `{prefix}00001.jsonl`… numbered on from the highest
    `{prefix}<number>` file already there: generating again never overwrites a batch (nor gives new
    content an old name, which the landing folder would set aside as a changed file)."""
    if "/" in prefix or os.sep in prefix:
        raise ValueError(f"batch file prefix {prefix!r} must not contain a path separator")
    numbered = re.compile(rf"{re.escape(prefix)}(\d+)\.")
    highest = max((int(m.group(1)) for p in out.iterdir() if (m := numbered.match(p.name))), default=0)
    return [out / f"{prefix}{highest + n:05d}.jsonl" for n in range(1, count + 1)]


def generate(out: Path, config: GeneratorConfig, prefix: str = "batch-") -> list[Path]:
    """Write `config.batches` JSON Lines files into `out` (named by `batch_paths`); returns their paths."""
    rng = random.Random(config.seed)
    out.mkdir(parents=True, exist_ok=True)
    streams = max(1, min(config.streams, config.events))
    lengths = [config.events // streams + (1 if i < config.events % streams else 0) for i in range(streams)]
    timed: list[tuple[datetime, int, str]] = []
    for i, length in enumerate(lengths):
        clock = [BASE_TIME + timedelta(seconds=rng.randint(0, 86_400))]
        for event in _history(rng, f"acct-{i + 1:05d}", length, clock):
            if rng.random() < config.gaps:
                continue  # never delivered
            moment = datetime.fromisoformat(event["occurred_at"])
            if rng.random() < config.poison:
                event = _poisoned(rng, event)
            timed.append((moment, len(timed), json.dumps(event)))
    timed.sort()
    lines = [line for _, _, line in timed]
    for i in range(len(lines)):
        if rng.random() < config.disorder:
            j = min(len(lines) - 1, i + rng.randint(1, max(2, len(lines) // max(config.batches, 1))))
            lines[i], lines[j] = lines[j], lines[i]
    keyed = [(float(i), line) for i, line in enumerate(lines)]
    keyed += [(i + rng.randint(1, 1000) + 0.5, _redelivered(rng, lines[i]))
              for i in range(len(lines)) if rng.random() < config.duplicates]
    keyed += [(rng.uniform(0, len(lines)), '{"stream_id": "acct-00001", "seq": oops}')
              for _ in range(round(len(lines) * config.poison / 10))]
    keyed.sort(key=lambda pair: pair[0])
    lines = [line for _, line in keyed]
    batches = max(1, config.batches)
    size = -(-len(lines) // batches) if lines else 0
    paths = batch_paths(out, batches, prefix)
    for b, path in enumerate(paths):
        chunk = lines[b * size:(b + 1) * size]
        path.write_text("".join(line + "\n" for line in chunk))
    return paths
