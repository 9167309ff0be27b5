"""The shop's views (shop/views/: msgspec event classes, constraints on the types) on the corners of their
payloads, one at a time: each is applied or refused as the shop's rules say, and a refusal is a `Reject`
(a handler_error), never a bug. msgspec takes a JSON string for a Decimal ("12.50", "NaN"), extra fields,
RFC 3339 times and dates (naive ones too) and blank strings; JSON numbers reach it in any form (7E+1,
12.50, -0.0, 1E+400). The histories are written as JSON lines so that each of these reaches the views as is.
"""

from __future__ import annotations

import copy
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import msgspec
import pytest

from inorder import replay
from shop.views.customers import CUSTOMERS
from shop.views.order_items import ORDER_ITEMS
from shop.views.orders import ORDERS
from shop.views.shop_daily import SHOP_DAILY

VIEWS = (ORDERS, ORDER_ITEMS, CUSTOMERS, SHOP_DAILY)
NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
# Decimals go out as the JSON numbers they are, in their own form (7E+1 stays 7E+1)
LINE = msgspec.json.Encoder(decimal_format="number")


class _Absent:
    """A field dropped (its repr names it, so that test ids are the same in every process)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


# -- the corners, one at a time, with what the views must decide ------------------------------------------

CUSTOMER = [
    {"type": "CustomerRegistered", "payload": {"name": "Ada", "email": "ada@example.com", "tier": "silver"}},
    {"type": "TierChanged", "payload": {"tier": "gold"}},
    {"type": "OptedIn", "payload": {}},
]
ORDER = [
    {"type": "OrderPlaced", "payload": {"customer_id": "cus-1", "gift": True}},
    {"type": "ItemAdded", "payload": {"sku": "MUG", "quantity": 2, "unit_price": Decimal("12.50"),
                                      "weight_kg": Decimal("0.75")}},
    {"type": "OrderPaid", "payload": {"amount": Decimal("25.00"), "paid_at": "2024-03-02T04:30:00Z"}},
    {"type": "OrderShipped", "payload": {"shipped_on": "2024-03-05"}},
]
# (event type, field, value (ABSENT: dropped), refused?)
CORNERS = [
    ("ItemAdded", "unit_price", "12.50", True), ("ItemAdded", "unit_price", "NaN", True),
    ("ItemAdded", "weight_kg", "0.75", True), ("ItemAdded", "weight_kg", "sNaN", True),
    ("OrderPaid", "amount", "25.00", True), ("OrderPaid", "amount", "Infinity", True),
    ("ItemAdded", "unit_price", Decimal("12.5"), False), ("ItemAdded", "unit_price", Decimal("1.25E+1"), False),
    ("ItemAdded", "unit_price", Decimal("12.505"), True), ("ItemAdded", "unit_price", -1, True),
    ("ItemAdded", "unit_price", Decimal("1E+400"), True), ("ItemAdded", "unit_price", Decimal("1E-400"), True),
    ("ItemAdded", "weight_kg", Decimal("0.3"), True), ("ItemAdded", "weight_kg", Decimal("-0.0"), False),
    ("ItemAdded", "weight_kg", Decimal("0.7500000000000000000000000000001"), False),  # 28 digits: rounds to quarters
    ("ItemAdded", "quantity", Decimal("2.0"), True), ("ItemAdded", "quantity", True, True),
    ("ItemAdded", "quantity", 1001, True), ("ItemAdded", "quantity", ABSENT, True),
    ("ItemAdded", "sku", "", True), ("ItemAdded", "sku", "\u00a0", True), ("ItemAdded", "sku", "\u200b", False),
    ("OrderPaid", "amount", 25, False), ("OrderPaid", "amount", Decimal("2.5E+1"), False),
    ("OrderPaid", "paid_at", "2024-03-02T04:30:00", False), ("OrderPaid", "paid_at", "2024-03-02 04:30", False),
    ("OrderPaid", "paid_at", "20240302T043000", False), ("OrderPaid", "paid_at", "2024-03-02", True),  # before placed
    ("OrderPaid", "paid_at", "9999-12-31T23:59:59-05:00", True), ("OrderPaid", "paid_at", "", True),
    ("OrderShipped", "shipped_on", "2024-W10-2", False), ("OrderShipped", "shipped_on", "20240305", False),
    ("OrderShipped", "shipped_on", "2024-03-05T00:00:00", True), ("OrderShipped", "shipped_on", 20240305, True),
    ("OrderPlaced", "gift", None, True), ("OrderPlaced", "gift", "yes", True), ("OrderPlaced", "gift", ABSENT, False),
    ("OrderPlaced", "customer_id", " \t", True), ("OrderPlaced", "customer_id", 42, True),
    ("OrderPlaced", "note", "an extra field", False),
    ("CustomerRegistered", "email", "a@b", True), ("CustomerRegistered", "email", "a@.b.", True),
    ("CustomerRegistered", "email", "a@b..", True), ("CustomerRegistered", "email", "a@b.c.", False),
    ("CustomerRegistered", "email", " @ . ", False),
    ("CustomerRegistered", "tier", "Gold", True), ("CustomerRegistered", "name", "\u3000", True),
    ("TierChanged", "tier", None, True), ("OptedIn", "resent", True, False),
]


def _history(stream_id: str, stream_type: str, steps: list[dict], at: str) -> list[dict]:
    start = datetime.fromisoformat(at)
    return [{"stream_id": stream_id, "stream_type": stream_type, "seq": seq, **copy.deepcopy(step),
             "occurred_at": (start + timedelta(hours=seq)).isoformat()} for seq, step in enumerate(steps, 1)]


def _spoiled(event_type: str, change) -> list[bytes]:
    """The clean customer and order histories, the one message of `event_type` changed by `change`."""
    records = (_history("cus-1", "customer", CUSTOMER, "2024-03-01T22:00:00-05:00")
               + _history("ord-1", "order", ORDER, "2024-03-02T00:00:00+00:00"))
    for record in records:
        if record["type"] == event_type:
            change(record)
    return [LINE.encode(record) for record in records]


def _refused(lines: list[bytes]) -> Counter:
    return Counter(e["kind"] for view in VIEWS for e in replay(view, lines, now=NOW).errors)


def test_the_clean_histories_are_all_applied():
    assert _refused(_spoiled("none", lambda record: None)) == Counter()


@pytest.mark.parametrize("event_type, field, value, refused", CORNERS, ids=lambda v: repr(v)[:30])
def test_a_corner_is_decided(event_type, field, value, refused):
    def change(record: dict) -> None:
        if value is ABSENT:
            del record["payload"][field]
        else:
            record["payload"][field] = value

    lines = _spoiled(event_type, change)
    assert bool(_refused(lines)) == refused
    assert set(_refused(lines)) <= {"handler_error"}


@pytest.mark.parametrize("payload", [None, [], "x", 5, ABSENT], ids=repr)
@pytest.mark.parametrize("event_type", ["OrderPlaced", "OrderPaid", "CustomerRegistered", "OptedIn"])
def test_a_payload_that_is_no_object_is_refused(event_type, payload):
    def change(record: dict) -> None:
        if payload is ABSENT:
            del record["payload"]  # arrives as {}: fine for OptedIn only
        else:
            record["payload"] = payload

    lines = _spoiled(event_type, change)
    assert bool(_refused(lines)) == (payload is not ABSENT or event_type != "OptedIn")
