"""Hypothesis strategies: shop scenarios (customers and orders, lists of `Entry`) with the same kinds
of disorder as the bank's in tests/strategies.py: gaps, poison, duplicates, conflicts, malformed and
unrouted lines, any arrival order, any split into batches, ticks and (optionally) gap timeouts.

Histories mostly follow the order lifecycle; now and then they try something the shop refuses
(paying an order with no items, shipping an unpaid one, paying a cancelled one), so the views'
business refusals and the `orders` view's parking are exercised too.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import strategies as st

from demos.shop import poison_changes, poisoned
from tests.reference_model import Entry
from tests.strategies import MALFORMED_LINES, batches_of, resplit

__all__ = ["shop_histories", "shop_scenarios", "resplit"]

NAMES = ("ada", "bob", "chen", "dana", "émile")
TIERS = ("bronze", "silver", "gold")
SKUS = ("MUG", "TEE", "LAMP", "BOOK")
START = datetime(2024, 3, 1, 20, tzinfo=timezone.utc)  # evenings: local days and UTC days differ
OFFSETS = (timezone.utc, timezone(timedelta(hours=-5)), timezone(timedelta(hours=9)))
# what an order may do next in each status; an order with no items is rarely paid (refused)
NEXT = {"placed": ("ItemAdded", "ItemAdded", "ItemAdded", "ItemAdded", "OrderPaid", "OrderPaid", "OrderCancelled"),
        "paid": ("OrderShipped", "OrderShipped", "OrderShipped", "OrderShipped", "OrderCancelled", "ItemAdded")}
EMPTY_ORDER = ("ItemAdded", "ItemAdded", "ItemAdded", "ItemAdded", "ItemAdded", "OrderPaid", "OrderCancelled")
# after shipping or cancelling, an order now and then still tries something (refused)
TOO_LATE = ("OrderPaid", "OrderShipped", "ItemAdded", "OrderCancelled")


def _render(draw, moment: datetime) -> str:
    """An instant written in one of several ways: Z, an offset, or no offset (taken as UTC)."""
    style = draw(st.sampled_from(["Z", "offset", "offset", "naive"]))
    if style == "Z":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style == "naive":
        return moment.replace(tzinfo=None).isoformat()
    return moment.astimezone(draw(st.sampled_from(OFFSETS))).isoformat()


def _money(draw, cents: int) -> float | int:
    return cents // 100 if cents % 100 == 0 and draw(st.booleans()) else cents / 100


class _Stream:
    def __init__(self, draw, stream_id: str, stream_type: str) -> None:
        self.draw, self.stream_id, self.stream_type = draw, stream_id, stream_type
        self.now = START + timedelta(minutes=draw(st.integers(0, 600)))
        self.messages: list[dict] = []

    def add(self, event_type: str, payload: dict) -> None:
        draw, seq = self.draw, len(self.messages) + 1
        self.now += timedelta(minutes=draw(st.sampled_from([1, 30, 240, 1440])))
        message = {"stream_id": self.stream_id, "stream_type": self.stream_type,
                   "seq": draw(st.sampled_from([seq, seq, str(seq)])), "type": event_type, "payload": payload,
                   "occurred_at": _render(draw, self.now), "event_id": f"{self.stream_id}-{seq}"}
        if not payload and draw(st.booleans()):
            del message["payload"]
        self.messages.append(message)


def _customer(draw, customer_id: str, length: int) -> list[dict]:
    stream = _Stream(draw, customer_id, "customer")
    name = draw(st.sampled_from(NAMES))
    stream.add("CustomerRegistered", {"name": name, "email": f"{name}.{customer_id}@example.com",
                                      "tier": draw(st.sampled_from(TIERS))})
    for _ in range(length - 1):
        event_type = draw(st.sampled_from(["TierChanged", "OptedIn", "OptedOut"]))
        stream.add(event_type, {"tier": draw(st.sampled_from(TIERS))} if event_type == "TierChanged" else {})
    return stream.messages


def _order(draw, order_id: str, customer_ids: list[str], length: int) -> list[dict]:
    stream = _Stream(draw, order_id, "order")
    placed = {"customer_id": draw(st.sampled_from(customer_ids))}
    if draw(st.booleans()):
        placed["gift"] = draw(st.booleans())  # absent means False
    stream.add("OrderPlaced", placed)
    status, total = "placed", 0  # what the order should be now (cents)
    for _ in range(length - 1):
        if status in ("shipped", "cancelled"):
            if draw(st.integers(0, 3)):
                break
            event_type = draw(st.sampled_from(TOO_LATE))
        else:
            event_type = draw(st.sampled_from(NEXT[status] if total else EMPTY_ORDER))
        if event_type == "ItemAdded":
            cents, quantity = draw(st.integers(1, 20_000)), draw(st.integers(1, 5))
            stream.add(event_type, {"sku": draw(st.sampled_from(SKUS)), "quantity": quantity,
                                    "unit_price": _money(draw, cents), "weight_kg": draw(st.integers(0, 40)) / 4})
            if status == "placed":
                total += quantity * cents
        elif event_type == "OrderPaid":
            paid_at = _render(draw, stream.now + timedelta(minutes=1))  # the message comes a little later
            stream.add(event_type, {"amount": _money(draw, total or 1), "paid_at": paid_at})
            status = "paid" if status == "placed" and total else status
        elif event_type == "OrderShipped":
            shipped_on = (stream.now + timedelta(days=draw(st.integers(0, 3)))).date().isoformat()
            stream.add(event_type, {"shipped_on": shipped_on})
            status = "shipped" if status == "paid" else status
        else:
            stream.add(event_type, {"reason": draw(st.sampled_from(["changed my mind", "too slow"]))})
            status = "cancelled" if status in ("placed", "paid") else status
    return stream.messages


@st.composite
def shop_histories(draw, max_streams: int = 4, max_events: int = 40) -> list[dict]:
    """Customers, then orders placed by them, as in-order message dicts (not yet disordered)."""
    n_streams = draw(st.integers(1, max_streams))
    n_customers = draw(st.integers(1, max(1, n_streams // 2)))
    per_stream = max(1, max_events // n_streams)
    customer_ids = [f"cus-{i + 1}" for i in range(n_customers)]
    messages = []
    for customer_id in customer_ids:
        messages += _customer(draw, customer_id, draw(st.integers(1, per_stream)))
    for i in range(n_streams - n_customers):
        messages += _order(draw, f"ord-{i + 1}", customer_ids, draw(st.integers(1, per_stream)))
    return messages


def _redelivery(draw, message: dict) -> dict:
    """A second copy whose content differs from the first: a conflict."""
    payload = message.get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("quantity"), int):
        return {**message, "payload": {**payload, "quantity": payload["quantity"] + 1}, "event_id": None}
    return {**message, "occurred_at": _render(draw, START + timedelta(days=draw(st.integers(0, 5))))}


@st.composite
def shop_scenario_lines(draw, max_streams: int = 4, max_events: int = 40, allow_conflicts: bool = True) -> list:
    """The delivered record lines, in arrival order: disordered, duplicated, gappy, poisoned."""
    delivered = []
    for message in draw(shop_histories(max_streams, max_events)):
        # one in 10 lost (a gap), one in 12 poisoned, one in 8 delivered twice, one in 10 sent again changed
        lost, bad, twice, changed = (draw(st.integers(1, n)) == 1 for n in (10, 12, 8, 10))
        if bad:
            message = poisoned(message, draw(st.sampled_from(poison_changes(message["type"]))))
        copies = [] if lost else [message, message] if twice else [message]
        delivered += copies + ([_redelivery(draw, message)] if changed and allow_conflicts and copies else [])
    if draw(st.integers(0, 4)) == 0:  # a bank message: no shop view subscribes to it (unrouted)
        delivered.append({"stream_id": "acct-1", "seq": 1, "type": "AccountOpened", "payload": {"owner": "ada"}})
    lines: list = [json.dumps(m, ensure_ascii=draw(st.booleans())) for m in delivered]
    lines += draw(st.lists(st.sampled_from(MALFORMED_LINES), max_size=3))
    return draw(st.permutations(lines))


def shop_scenarios(max_streams: int = 4, max_events: int = 40, allow_timeouts: bool = True,
                   allow_conflicts: bool = True) -> st.SearchStrategy[list[Entry]]:
    """Shop scenarios: the delivered lines split into batches, with ticks (and gap timeouts if allowed)."""
    return shop_scenario_lines(max_streams, max_events, allow_conflicts).flatmap(
        lambda lines: batches_of(lines, allow_timeouts=allow_timeouts, ticks=True))
