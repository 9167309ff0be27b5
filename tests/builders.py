"""Small builders for hand-written scenarios (records, batches, ticks)."""

from __future__ import annotations

import json

from tests.reference_model import Entry

T0 = 1_700_000_000.0


def msg(stream, seq, event_type, occurred_at="2024-03-01T10:00:00+00:00", **payload) -> str:
    return json.dumps({"stream_id": stream, "seq": seq, "type": event_type, "payload": payload,
                       "occurred_at": occurred_at, "event_id": f"{stream}-{seq}"})


def opened(stream, seq=1, owner="ada"):
    return msg(stream, seq, "AccountOpened", owner=owner)


def dep(stream, seq, amount):
    return msg(stream, seq, "Deposited", amount=amount)


def wd(stream, seq, amount):
    return msg(stream, seq, "Withdrawn", amount=amount)


def batch(n, t, *lines):
    return Entry("batch", f"b{n}", T0 + t, lines=list(lines))


def tick(n, t):
    return Entry("tick", f"tick-{n}", T0 + t)
