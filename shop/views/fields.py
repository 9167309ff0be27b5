"""What the shop's views share: the order lifecycle, and the checks the event types cannot express.

A handler refuses poison data with `Reject`. Any other exception escaping it counts as a bug in the view
and parks the stream, so the times read here are refused, never raised on, when they do not parse.

The order rules (`accept_*`) take the order's current row from whichever view asks (it needs `status`,
`total` and `placed_at`), so every view that follows orders refuses the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from inorder import Event, Reject
from shop.views.events import MAX_UNIT_WEIGHT_KG, ItemAdded, OrderPaid, OrderShipped

ORDER_STATUSES = ("placed", "paid", "shipped", "cancelled")
ZERO = Decimal("0.00")

# which statuses an order may have for each event, and how a refusal reads otherwise
_MAY_FOLLOW = {"ItemAdded": ("placed",), "OrderPaid": ("placed",), "OrderShipped": ("paid",),
               "OrderCancelled": ("placed", "paid")}
_VERBS = {"ItemAdded": "add items to", "OrderPaid": "pay", "OrderShipped": "ship", "OrderCancelled": "cancel"}
_STATUS_WORDS = {"placed": "an unpaid", "paid": "an already paid", "shipped": "a shipped",
                 "cancelled": "a cancelled"}


# ----------------------------------------------------------------------------- what the types cannot say

def quarter_kilos(weight: Decimal) -> float:
    """A weight in whole quarter kilograms (0, 0.25, 0.5...), as a float.

    Quarters are exact in binary floating point, and so is every sum of them (far below 2**50 kg),
    so the DOUBLE weight sums of `orders` and `shop_daily` do not depend on the order the engine
    adds them in (across streams that order is not defined). Any other weight is refused."""
    if (weight * 4) % 1 != 0:
        raise Reject(f"weight_kg must be a multiple of 0.25 from 0 to {MAX_UNIT_WEIGHT_KG}, got {weight}")
    return float(weight)


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


def day(value: str, what: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise Reject(f"{what} is not an ISO 8601 date: {value[:64]!r}") from None


def occurred(event: Event) -> datetime:
    """When the message says it happened; every order and registration message must say so."""
    return moment(event.occurred_at, "occurred_at")


# ----------------------------------------------------------------------------- what messages mean

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


def item_of(added: ItemAdded, event: Event) -> Item:
    """An ItemAdded message's line, checked on its own (no order state)."""
    return Item(sku=added.sku, quantity=added.quantity, unit_price=added.unit_price,
                unit_weight_kg=quarter_kilos(added.weight_kg), added_at=occurred(event))


def order_in_state(row: dict | None, event: Event) -> dict:
    """The order's row if `event` may happen to the order now; otherwise a business refusal."""
    if row is None:
        raise Reject(f"{event.event_type}: order {event.stream_id} was never placed (or its OrderPlaced was refused)")
    if row["status"] not in _MAY_FOLLOW[event.event_type]:
        status = row["status"]
        raise Reject(f"cannot {_VERBS[event.event_type]} {_STATUS_WORDS.get(status, status)} order")
    return row


def accept_placement(event: Event, row: dict | None) -> datetime:
    """When the order was placed; an order is placed once."""
    if row is not None:
        raise Reject(f"order {event.stream_id} is already placed")
    return occurred(event)


def accept_item(added: ItemAdded, event: Event, row: dict | None) -> Item:
    order_in_state(row, event)
    return item_of(added, event)


def accept_payment(payment: OrderPaid, event: Event, row: dict | None) -> datetime:
    """When the order was paid. A payment is refused unless it pays exactly what the order's items cost,
    after it was placed."""
    row = order_in_state(row, event)
    occurred(event)
    paid_at = moment(payment.paid_at, "paid_at")
    if row["total"] == 0:
        raise Reject("payment refused: the order has no items")
    if payment.amount != row["total"]:
        raise Reject(f"payment refused: {payment.amount} paid, {row['total']} due")
    if paid_at < row["placed_at"]:
        raise Reject(f"payment refused: paid at {paid_at.isoformat()}, before the order was placed")
    return paid_at


def accept_shipment(shipment: OrderShipped, event: Event, row: dict | None) -> date:
    """The day the order shipped: not before the (UTC) day it was placed."""
    row = order_in_state(row, event)
    occurred(event)
    shipped_on = day(shipment.shipped_on, "shipped_on")
    if shipped_on < row["placed_at"].date():
        raise Reject(f"shipped on {shipped_on}, before the order was placed")
    return shipped_on


def accept_cancellation(event: Event, row: dict | None) -> datetime:
    """When the order was cancelled: before it shipped."""
    order_in_state(row, event)
    return occurred(event)


def accept_registration(event: Event, row: dict | None) -> date:
    """The (UTC) day the customer joined; a customer registers once."""
    if row is not None:
        raise Reject(f"customer {event.stream_id} is already registered")
    return occurred(event).date()
