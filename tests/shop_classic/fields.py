"""What the shop's views share: safe payload readers and the order lifecycle.

A handler refuses poison data with `Reject`. Any other exception escaping it (AttributeError,
KeyError, TypeError...) counts as a bug in the view and parks the stream, so nothing here indexes
a payload blindly: every reader checks the JSON type and range, and returns the value with its
column's Python type (Decimal for DECIMAL, float for DOUBLE, int, bool, date, aware UTC datetime).

The order rules (`accept_*`) take the order's current row from whichever view asks (it needs
`status`, `total` and `placed_at`), so every view that follows orders refuses the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from pipelines.view import Event, Reject

TIERS = ("bronze", "silver", "gold")
ORDER_STATUSES = ("placed", "paid", "shipped", "cancelled")
CENT = Decimal("0.01")
ZERO = Decimal("0.00")
MAX_UNIT_PRICE = Decimal("99999.99")
MAX_TOTAL = Decimal("9999999999.99")  # DECIMAL(12,2)
MAX_QUANTITY = 1000
MAX_UNIT_WEIGHT_KG = 1000

# which statuses an order may have for each event, and how a refusal reads otherwise
_MAY_FOLLOW = {"ItemAdded": ("placed",), "OrderPaid": ("placed",), "OrderShipped": ("paid",),
               "OrderCancelled": ("placed", "paid")}
_VERBS = {"ItemAdded": "add items to", "OrderPaid": "pay", "OrderShipped": "ship", "OrderCancelled": "cancel"}
_STATUS_WORDS = {"placed": "an unpaid", "paid": "an already paid", "shipped": "a shipped",
                 "cancelled": "a cancelled"}


# ----------------------------------------------------------------------------- payload readers

def payload_of(event: Event) -> dict:
    payload = event.payload
    if type(payload) is not dict:
        raise Reject(f"{event.event_type}: the payload must be a JSON object")
    return payload


def text(payload: dict, name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise Reject(f"{name} must be a non-empty string, got {value!r:.80}")
    return value


def flag(payload: dict, name: str, default: bool) -> bool:
    value = payload.get(name, default)
    if type(value) is not bool:
        raise Reject(f"{name} must be true or false, got {value!r:.80}")
    return value


def whole(payload: dict, name: str, low: int, high: int) -> int:
    value = payload.get(name)
    if type(value) is not int or not low <= value <= high:
        raise Reject(f"{name} must be a whole number from {low} to {high}, got {value!r:.80}")
    return value


def money(payload: dict, name: str, maximum: Decimal) -> Decimal:
    """A JSON number > 0 with at most two decimals, exact (payload fractions arrive as Decimal)."""
    value = payload.get(name)
    if type(value) is int:
        value = Decimal(value)
    elif type(value) is not Decimal:  # bool, str, None, objects: not a JSON number
        raise Reject(f"{name} must be a JSON number, got {value!r:.80}")
    if not 0 < value <= maximum:
        raise Reject(f"{name} must be more than 0 and at most {maximum}, got {value}")
    if value != value.quantize(CENT):
        raise Reject(f"{name} {value} has more than two decimals")
    return value.quantize(CENT)


def quarter_kilos(payload: dict, name: str) -> float:
    """A weight in whole quarter kilograms (0, 0.25, 0.5...), as a float.

    Quarters are exact in binary floating point, and so is every sum of them (far below 2**50 kg),
    so the DOUBLE weight sums of `orders` and `shop_daily` do not depend on the order the engine
    adds them in (across streams that order is not defined). Any other weight is refused."""
    value = payload.get(name)
    if type(value) not in (int, Decimal):
        raise Reject(f"{name} must be a JSON number, got {value!r:.80}")
    if not 0 <= value <= MAX_UNIT_WEIGHT_KG or (value * 4) % 1 != 0:
        raise Reject(f"{name} must be a multiple of 0.25 from 0 to {MAX_UNIT_WEIGHT_KG}, got {value}")
    return float(value)


def moment(value: Any, what: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime (a trailing Z means UTC; no offset is taken as UTC)."""
    if not isinstance(value, str) or not value:
        raise Reject(f"{what} is missing")
    iso = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        parsed = datetime.fromisoformat(iso)
        return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: an offset that moves year 1 or 9999 out of range
        raise Reject(f"{what} is not an ISO 8601 time: {value[:64]!r}") from None


def day(value: Any, what: str) -> date:
    if not isinstance(value, str):
        raise Reject(f"{what} must be an ISO 8601 date, got {value!r:.80}")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise Reject(f"{what} is not an ISO 8601 date: {value[:64]!r}") from None


def occurred(event: Event) -> datetime:
    """When the message says it happened; every order and registration message must say so."""
    return moment(event.occurred_at, "occurred_at")


def tier_of(payload: dict) -> str:
    tier = payload.get("tier")
    if tier not in TIERS:
        raise Reject(f"unknown customer tier {tier!r:.40} (known: {', '.join(TIERS)})")
    return tier


# ----------------------------------------------------------------------------- what messages mean

@dataclass(frozen=True)
class Placement:
    customer_id: str
    gift: bool
    placed_at: datetime


@dataclass(frozen=True)
class Item:
    sku: str
    quantity: int
    unit_price: Decimal
    unit_weight_kg: float
    added_at: datetime

    @property
    def line_total(self) -> Decimal:
        return self.quantity * self.unit_price

    @property
    def weight_kg(self) -> float:
        return self.quantity * self.unit_weight_kg  # quarters times a whole number: exact


@dataclass(frozen=True)
class Payment:
    amount: Decimal
    paid_at: datetime


@dataclass(frozen=True)
class Cancellation:
    reason: str
    cancelled_at: datetime


@dataclass(frozen=True)
class Registration:
    name: str
    email: str
    tier: str
    joined_on: date


def item_of(event: Event) -> Item:
    """An ItemAdded message's line, checked on its own (no order state)."""
    payload = payload_of(event)
    return Item(sku=text(payload, "sku"), quantity=whole(payload, "quantity", 1, MAX_QUANTITY),
                unit_price=money(payload, "unit_price", MAX_UNIT_PRICE),
                unit_weight_kg=quarter_kilos(payload, "weight_kg"), added_at=occurred(event))


def order_in_state(row: dict | None, event: Event) -> dict:
    """The order's row if `event` may happen to the order now; otherwise a business refusal."""
    if row is None:
        raise Reject(f"{event.event_type}: order {event.stream_id} was never placed (or its OrderPlaced was refused)")
    if row["status"] not in _MAY_FOLLOW[event.event_type]:
        status = row["status"]
        raise Reject(f"cannot {_VERBS[event.event_type]} {_STATUS_WORDS.get(status, status)} order")
    return row


def accept_placement(event: Event, row: dict | None) -> Placement:
    if row is not None:
        raise Reject(f"order {event.stream_id} is already placed")
    payload = payload_of(event)
    return Placement(customer_id=text(payload, "customer_id"), gift=flag(payload, "gift", False),
                     placed_at=occurred(event))


def accept_item(event: Event, row: dict | None) -> Item:
    order_in_state(row, event)
    return item_of(event)


def accept_payment(event: Event, row: dict | None) -> Payment:
    """A payment is refused unless it pays exactly what the order's items cost, after it was placed."""
    row = order_in_state(row, event)
    payload = payload_of(event)
    occurred(event)
    amount = money(payload, "amount", MAX_TOTAL)
    paid_at = moment(payload.get("paid_at"), "paid_at")
    if row["total"] == 0:
        raise Reject("payment refused: the order has no items")
    if amount != row["total"]:
        raise Reject(f"payment refused: {amount} paid, {row['total']} due")
    if paid_at < row["placed_at"]:
        raise Reject(f"payment refused: paid at {paid_at.isoformat()}, before the order was placed")
    return Payment(amount, paid_at)


def accept_shipment(event: Event, row: dict | None) -> date:
    """The day the order shipped: not before the (UTC) day it was placed."""
    row = order_in_state(row, event)
    payload = payload_of(event)
    occurred(event)
    shipped_on = day(payload.get("shipped_on"), "shipped_on")
    if shipped_on < row["placed_at"].date():
        raise Reject(f"shipped on {shipped_on}, before the order was placed")
    return shipped_on


def accept_cancellation(event: Event, row: dict | None) -> Cancellation:
    order_in_state(row, event)
    return Cancellation(reason=text(payload_of(event), "reason"), cancelled_at=occurred(event))


def accept_registration(event: Event, row: dict | None) -> Registration:
    if row is not None:
        raise Reject(f"customer {event.stream_id} is already registered")
    payload = payload_of(event)
    email = text(payload, "email")
    local, _, domain = email.partition("@")
    if not local or "." not in domain.strip("."):
        raise Reject(f"email {email[:80]!r} is not an address")
    return Registration(name=text(payload, "name"), email=email, tier=tier_of(payload),
                        joined_on=occurred(event).date())
