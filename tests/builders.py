"""Small builders for hand-written scenarios (records, batches, ticks)."""

from __future__ import annotations

import json
from decimal import Decimal

from pipelines.view import Event, Reject
from tests.reference_model import Entry

T0 = 1_700_000_000.0


def msg(stream, seq, event_type, occurred_at="2024-03-01T10:00:00+00:00", *, stream_type=None, **payload) -> str:
    """A record; with `stream_type`, it says its stream's type (a source with several, such as the shop's)."""
    record = {"stream_id": stream, "seq": seq, "type": event_type, "payload": payload,
              "occurred_at": occurred_at, "event_id": f"{stream}-{seq}"}
    return json.dumps(record if stream_type is None else {**record, "stream_type": stream_type})


def opened(stream, seq=1, owner="ada"):
    return msg(stream, seq, "AccountOpened", owner=owner)


def dep(stream, seq, amount):
    return msg(stream, seq, "Deposited", amount=amount)


def wd(stream, seq, amount):
    return msg(stream, seq, "Withdrawn", amount=amount)


def amount_of(event: Event) -> Decimal:
    """The `amount` of a `dep` or `wd` message, as the test views read it: a JSON number > 0 with at most
    two decimals that fits DECIMAL(18,2), or a `Reject` saying why not."""
    amount = event.payload.get("amount") if type(event.payload) is dict else None
    if type(amount) is int:
        amount = Decimal(amount)
    elif type(amount) is not Decimal:  # bool, str, None, objects: not a JSON number
        raise Reject(f"amount must be a JSON number, got {amount!r}")
    if not Decimal(0) < amount <= Decimal("9999999999999999.99"):
        raise Reject(f"amount {amount} is not > 0 or does not fit DECIMAL(18,2)")
    if amount.quantize(Decimal("0.01")) != amount:
        raise Reject(f"amount {amount} has more than two decimals")
    return amount.quantize(Decimal("0.01"))


def batch(n, t, *lines):
    return Entry("batch", f"b{n}", T0 + t, lines=list(lines))


def tick(n, t):
    return Entry("tick", f"tick-{n}", T0 + t)


# Gap timers falling due inside a pass of several entries (the bank's views wait 600 s): x, y and z block at 0, 200
# and 400 s, each missing its seq 2; the next three entries, at 600, 800 and 1000 s, bring only w, and each finds
# one timer due, exactly at its gap_timeout: x's at the first, y's at the middle one, z's at the last.
TIMERS_DUE_IN_A_PASS = [
    batch(1, 0, opened("x"), dep("x", 3, 30)),
    batch(2, 200, opened("y"), dep("y", 3, 30)),
    batch(3, 400, opened("z"), dep("z", 3, 30), opened("w")),
    batch(4, 600, dep("w", 2, 1)),
    batch(5, 800, dep("w", 3, 1)),
    batch(6, 1000, dep("w", 4, 1)),
]
