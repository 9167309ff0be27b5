"""View `orders`: one row per order, from placement to payment, shipping or cancellation.

Stream type `order`; the stream id is the order id. A refused message (a payment that does not
match the order, paying a cancelled order, shipping an unpaid one...) PARKS the order's stream:
later messages of that order wait until an operator retries or skips it (`on_error="park"`).

The payment and shipping handlers compute from values read back from this table in an earlier
message (`placed_at` TIMESTAMPTZ, `placed_on` DATE), possibly stored by an earlier run.
"""

from __future__ import annotations

from datetime import date, datetime

from inorder import DECIMAL, INTEGER, Column, Event, Table, Tables, View
from shop.views.events import ItemAdded, OrderCancelled, OrderPaid, OrderPlaced, OrderShipped
from shop.views.fields import (ORDER_STATUSES, ZERO, accept_cancellation, accept_item, accept_payment,
                               accept_placement, accept_shipment)

ORDERS_TABLE = Table.per_stream("orders", key="order_id", columns={
    "order_id": Column(str, not_null=True, unique=True, doc="the order (its stream id)"),
    "customer_id": Column(str, not_null=True, doc="who placed it"),
    "status": Column(str, not_null=True, one_of=ORDER_STATUSES, doc="placed, paid, shipped or cancelled"),
    "placed_on": Column(date, not_null=True, doc="UTC day it was placed"),
    "placed_at": Column(datetime, not_null=True, doc="when it was placed"),
    "item_count": Column(INTEGER, not_null=True, min=0, doc="units across its lines"),
    "total": Column(DECIMAL(12, 2), not_null=True, min=0, doc="sum of its line totals"),
    # sums of quarter kilos: exact (see fields.quarter_kilos)
    "weight_kg": Column(float, not_null=True, min=0, doc="shipping weight"),
    "gift": Column(bool, not_null=True, doc="gift wrapped"),
    "paid_at": Column(datetime, doc="when it was paid (NULL until then)"),
    "hours_to_pay": Column(float, min=0, doc="hours from placed to paid"),
    "shipped_on": Column(date, doc="UTC day it shipped"),
    "days_to_ship": Column(INTEGER, min=0, doc="days from placed to shipped"),
    "cancel_reason": Column(str, doc="why it was cancelled"),
    "version": Column(int, not_null=True, min=1, doc="seq of the newest message applied"),
})

ORDERS = View(name="orders", tables=(ORDERS_TABLE,), subscribes=("order",), on_error="park")


@ORDERS.on(OrderPlaced)
def place(order: OrderPlaced, tables: Tables, event: Event) -> None:
    orders = tables[ORDERS_TABLE]
    placed_at = accept_placement(event, orders.row)
    orders.save(customer_id=order.customer_id, status="placed", placed_on=placed_at.date(), placed_at=placed_at,
                item_count=0, total=ZERO, weight_kg=0.0, gift=order.gift, version=event.seq)


# OrderPlaced's handler as the engine calls it, (event, tables): a changed view wraps it (tests/shop_changed.py)
placed = ORDERS.handlers["OrderPlaced"]


@ORDERS.on(ItemAdded)
def item_added(added: ItemAdded, tables: Tables, event: Event) -> None:
    orders = tables[ORDERS_TABLE]
    row = orders.row
    item = accept_item(added, event, row)
    orders.save(item_count=row["item_count"] + item.quantity, total=row["total"] + item.line_total,
                weight_kg=row["weight_kg"] + item.weight_kg, version=event.seq)


@ORDERS.on(OrderPaid)
def paid(payment: OrderPaid, tables: Tables, event: Event) -> None:
    orders = tables[ORDERS_TABLE]
    row = orders.row
    paid_at = accept_payment(payment, event, row)
    # placed_at was stored by an earlier message (maybe an earlier run) and comes back an aware UTC datetime
    hours_to_pay = (paid_at - row["placed_at"]).total_seconds() / 3600
    orders.save(status="paid", paid_at=paid_at, hours_to_pay=hours_to_pay, version=event.seq)


@ORDERS.on(OrderShipped)
def shipped(shipment: OrderShipped, tables: Tables, event: Event) -> None:
    orders = tables[ORDERS_TABLE]
    row = orders.row
    shipped_on = accept_shipment(shipment, event, row)
    days_to_ship = (shipped_on - row["placed_on"]).days  # placed_on comes back a date, whichever run stored it
    orders.save(status="shipped", shipped_on=shipped_on, days_to_ship=days_to_ship, version=event.seq)


@ORDERS.on(OrderCancelled)
def cancelled(cancellation: OrderCancelled, tables: Tables, event: Event) -> None:
    orders = tables[ORDERS_TABLE]
    accept_cancellation(event, orders.row)
    orders.save(status="cancelled", cancel_reason=cancellation.reason, version=event.seq)
