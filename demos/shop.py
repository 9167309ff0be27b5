"""Demo batches for the shop views, with the trouble real feeds have.

Customers register first; then orders, each placed by one of the generated customers, get items,
are paid (exactly their total) and shipped, or are cancelled. Every history is valid on its own;
then messages are lost (gaps), corrupted (poison: payloads the handlers refuse, plus a few lines
that are not JSON at all), displaced (disorder) and delivered twice (duplicates; one in ten of the
second copies differs: a conflict). Deterministic for a seed.

Event types and payloads (stream type `customer`, ids `cus-00001`...; `order`, ids `ord-00001`...):
  CustomerRegistered {name, email, tier}   TierChanged {tier}   OptedIn {}   OptedOut {}
  OrderPlaced {customer_id, gift}   ItemAdded {sku, quantity, unit_price, weight_kg}
  OrderPaid {amount, paid_at}   OrderShipped {shipped_on}   OrderCancelled {reason}
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

# the bank demo's knobs (events, streams, batches, disorder, duplicates, gaps, poison, seed) and file names
from demos.bank import GeneratorConfig, batch_paths

__all__ = ["GeneratorConfig", "generate", "POISON", "poison_changes", "poisoned"]

NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim")
TIERS = ("bronze", "silver", "gold")
# sku -> (unit price in cents, unit weight in quarter kilos)
CATALOGUE = {"MUG-01": (1250, 2), "TEE-02": (1999, 1), "LAMP-03": (4500, 9), "BOOK-04": (2390, 3),
             "RUG-05": (12900, 26), "PEN-06": (199, 0), "KETTLE-07": (3475, 6), "CHAIR-08": (8900, 31)}
CANCEL_REASONS = ("changed my mind", "found it cheaper", "out of stock", "payment failed")
BASE_TIME = datetime(2026, 11, 1, tzinfo=timezone.utc)
CUSTOMER_SHARE = 5  # one stream in five is a customer


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _History:
    """One stream's messages in seq order, with its own clock."""

    def __init__(self, rng: random.Random, stream_id: str, stream_type: str, start: datetime) -> None:
        self.rng, self.stream_id, self.stream_type, self.clock = rng, stream_id, stream_type, start
        self.events: list[dict] = []

    def add(self, event_type: str, payload: dict, at: datetime | None = None) -> None:
        """The next message, at `at` or 1 to 600 seconds after the previous one."""
        self.clock = at or self.clock + timedelta(seconds=self.rng.randint(1, 600))
        seq = len(self.events) + 1
        self.events.append({"stream_id": self.stream_id, "stream_type": self.stream_type, "seq": seq,
                            "type": event_type, "payload": payload, "occurred_at": _stamp(self.clock),
                            "event_id": f"{self.stream_id}-{seq}"})


def _customer(rng: random.Random, customer_id: str, length: int) -> list[dict]:
    history = _History(rng, customer_id, "customer", BASE_TIME + timedelta(seconds=rng.randint(0, 43_200)))
    name = rng.choice(NAMES)
    history.add("CustomerRegistered", {"name": name, "email": f"{name.lower()}.{customer_id}@example.com",
                                       "tier": rng.choice(TIERS)})
    while len(history.events) < length:
        change = rng.randrange(3)
        if change == 0:
            history.add("TierChanged", {"tier": rng.choice(TIERS)})
        else:
            history.add("OptedIn" if change == 1 else "OptedOut", {})
    return history.events


def _order(rng: random.Random, order_id: str, customer_id: str, length: int) -> list[dict]:
    """OrderPlaced, items, then (room permitting) paid and shipped, sometimes cancelled instead."""
    history = _History(rng, order_id, "order", BASE_TIME + timedelta(seconds=rng.randint(43_200, 129_600)))
    history.add("OrderPlaced", {"customer_id": customer_id, "gift": rng.random() < 0.2})
    ending = ["OrderPaid", "OrderShipped"][:max(0, length - 2)]
    if ending and rng.random() < 0.15:
        ending[-1] = "OrderCancelled"  # cancelled unpaid, or paid and cancelled before shipping
    total = 0  # cents
    for _ in range(length - 1 - len(ending)):
        sku = rng.choice(sorted(CATALOGUE))
        cents, quarters = CATALOGUE[sku]
        quantity = rng.randint(1, 3)
        total += quantity * cents
        history.add("ItemAdded", {"sku": sku, "quantity": quantity, "unit_price": cents / 100,
                                  "weight_kg": quarters / 4})
    for event_type in ending:
        if event_type == "OrderPaid":  # the payment provider reports a little after it took the money
            paid_at = history.clock + timedelta(seconds=rng.randint(1, 7_200))
            history.add(event_type, {"amount": total / 100, "paid_at": _stamp(paid_at)},
                        at=paid_at + timedelta(seconds=rng.randint(0, 120)))
        elif event_type == "OrderShipped":
            shipped = history.clock + timedelta(seconds=rng.randint(3_600, 4 * 86_400))
            history.add(event_type, {"shipped_on": shipped.date().isoformat()}, at=shipped)
        else:
            history.add(event_type, {"reason": rng.choice(CANCEL_REASONS)})
    return history.events


# per event type: payload changes every view refuses (a value None removes the field)
POISON = {
    "CustomerRegistered": ({"tier": "platinum"}, {"email": "nobody"}, {"name": None}),
    "TierChanged": ({"tier": "diamond"}, {"tier": None}),
    "OrderPlaced": ({"customer_id": None}, {"customer_id": 42}, {"gift": "yes"}),
    "ItemAdded": ({"quantity": 0}, {"quantity": "two"}, {"unit_price": -1}, {"unit_price": 1.005},
                  {"weight_kg": 0.3}, {"sku": ""}),
    "OrderPaid": ({"amount": "abc"}, {"amount": None}, {"amount": 0.01}, {"paid_at": "soon"}),
    "OrderShipped": ({"shipped_on": "someday"}, {"shipped_on": None}),
    "OrderCancelled": ({"reason": ""},),
}
NOT_AN_OBJECT, BAD_TIME = "payload not an object", "occurred_at unparsable"
# the messages whose time the views read: a bad occurred_at on them is refused
TIMED = ("CustomerRegistered", "OrderPlaced", "ItemAdded", "OrderPaid", "OrderShipped", "OrderCancelled")


def poison_changes(event_type: str) -> list:
    """The ways a message of this type can be poisoned: a `POISON` change, NOT_AN_OBJECT or BAD_TIME."""
    return [*POISON.get(event_type, ()), NOT_AN_OBJECT, *((BAD_TIME,) if event_type in TIMED else ())]


def poisoned(event: dict, change: dict | str) -> dict:
    """A copy of the record with one of its `poison_changes` applied."""
    if change == NOT_AN_OBJECT:
        return {**event, "payload": ["not", "an", "object"]}
    if change == BAD_TIME:
        return {**event, "occurred_at": "yesterday"}
    payload = {**event.get("payload", {}), **change}
    return {**event, "payload": {k: v for k, v in payload.items() if v is not None}}


def _redelivered(rng: random.Random, event: dict) -> dict:
    """A second delivery: usually the same, one in ten times with a changed number (a conflict)."""
    payload = event["payload"]
    if rng.random() >= 0.1 or not isinstance(payload, dict):
        return event
    if isinstance(payload.get("quantity"), int):
        return {**event, "payload": {**payload, "quantity": payload["quantity"] + 1}}
    if isinstance(payload.get("amount"), float):
        return {**event, "payload": {**payload, "amount": round(payload["amount"] + 0.01, 2)}}
    return {**event, "payload": {**payload, "resent": True}}


def _histories(rng: random.Random, config: GeneratorConfig) -> list[list[dict]]:
    streams = max(1, min(config.streams, config.events))
    lengths = [config.events // streams + (1 if i < config.events % streams else 0) for i in range(streams)]
    customers = max(1, streams // CUSTOMER_SHARE)
    customer_ids = [f"cus-{i + 1:05d}" for i in range(customers)]
    out = [_customer(rng, cid, length) for cid, length in zip(customer_ids, lengths)]
    out += [_order(rng, f"ord-{i + 1:05d}", rng.choice(customer_ids), length)
            for i, length in enumerate(lengths[customers:])]
    return out


def _arrivals(rng: random.Random, config: GeneratorConfig) -> list[str]:
    """Every delivered line in arrival order: by time, some late, duplicates later, junk anywhere."""
    delivered = sorted((event["occurred_at"], event["stream_id"], event["seq"], event)
                       for history in _histories(rng, config) for event in history
                       if rng.random() >= config.gaps)  # the rest is never delivered
    events = [poisoned(event, rng.choice(poison_changes(event["type"]))) if rng.random() < config.poison else event
              for *_, event in delivered]
    window = max(2, len(events) // max(config.batches, 1))
    arrivals = []  # (position in the arrival order, tie-break, line)
    for i, event in enumerate(events):
        late = rng.randint(1, window) if rng.random() < config.disorder else 0
        arrivals.append((i + late, 0, json.dumps(event)))
        if rng.random() < config.duplicates:
            arrivals.append((i + rng.randint(1, 1000), 1, json.dumps(_redelivered(rng, event))))
    for _ in range(round(len(events) * config.poison / 10)):
        cut = json.dumps(rng.choice(events))
        junk = rng.choice(('{"stream_id": "ord-00001", "stream_type": "order", "seq": oops}', cut[:len(cut) // 2]))
        arrivals.append((rng.uniform(0, len(events)), 2, junk))
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return [line for *_, line in arrivals]


def generate(out: Path, config: GeneratorConfig, prefix: str = "batch-") -> list[Path]:
    """Write `config.batches` JSON Lines files into `out` (`batch-00001.jsonl`… in an empty folder; see
    `batch_paths`); returns their paths."""
    rng = random.Random(config.seed)
    out.mkdir(parents=True, exist_ok=True)
    lines = _arrivals(rng, config) if config.events > 0 else []
    batches = max(1, config.batches)
    paths = batch_paths(out, batches, prefix)
    for b, path in enumerate(paths):
        chunk = lines[len(lines) * b // batches:len(lines) * (b + 1) // batches]
        path.write_text("".join(line + "\n" for line in chunk))
    return paths
