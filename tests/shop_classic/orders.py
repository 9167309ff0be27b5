"""View `orders`: one row per order, from placement to payment, shipping or cancellation.

Stream type `order`; the stream id is the order id. A refused message (a payment that does not
match the order, paying a cancelled order, shipping an unpaid one...) PARKS the order's stream:
later messages of that order wait until an operator retries or skips it (`on_error="park"`).

The payment and shipping handlers compute from values read back from this table in an earlier
message (`placed_at` TIMESTAMPTZ, `placed_on` DATE), possibly stored by an earlier run.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.view import Event, KeyedTable, Table, View, between, in_set, not_null, unique
from tests.shop_classic.fields import (ORDER_STATUSES, ZERO, accept_cancellation, accept_item, accept_payment,
                               accept_placement, accept_shipment)

ORDERS_TABLE = Table(
    "orders",
    columns={
        "order_id": "VARCHAR",
        "customer_id": "VARCHAR",
        "status": "VARCHAR",
        "placed_on": "DATE",
        "placed_at": "TIMESTAMPTZ",
        "item_count": "INTEGER",
        "total": "DECIMAL(12,2)",
        "weight_kg": "DOUBLE",  # sums of quarter kilos: exact (see fields.quarter_kilos)
        "gift": "BOOLEAN",
        "paid_at": "TIMESTAMPTZ",
        "hours_to_pay": "DOUBLE",
        "shipped_on": "DATE",
        "days_to_ship": "INTEGER",
        "cancel_reason": "VARCHAR",
        "version": "BIGINT",
    },
    primary_key=("order_id",),
    kind="keyed",
    stream_key="order_id",
    descriptions={
        "order_id": "the order (its stream id)",
        "customer_id": "who placed it",
        "status": "placed, paid, shipped or cancelled",
        "placed_on": "UTC day it was placed",
        "placed_at": "when it was placed",
        "item_count": "units across its lines",
        "total": "sum of its line totals",
        "weight_kg": "shipping weight",
        "gift": "gift wrapped",
        "paid_at": "when it was paid (NULL until then)",
        "hours_to_pay": "hours from placed to paid",
        "shipped_on": "UTC day it shipped",
        "days_to_ship": "days from placed to shipped",
        "cancel_reason": "why it was cancelled",
        "version": "seq of the newest message applied",
    },
)

ORDERS = View(
    name="orders",
    tables=(ORDERS_TABLE,),
    subscribes=("order",),
    on_error="park",
    expectations=(
        *not_null("orders", "order_id", "customer_id", "status", "placed_on", "placed_at", "item_count", "total",
                  "weight_kg", "gift", "version"),
        unique("orders", "order_id"),
        in_set("orders", "status", ORDER_STATUSES),
        between("orders", "item_count", min_value=0),
        between("orders", "total", min_value=0),
        between("orders", "weight_kg", min_value=0),
        between("orders", "hours_to_pay", min_value=0),
        between("orders", "days_to_ship", min_value=0),
        between("orders", "version", min_value=1),
    ),
)


class OrderTables(Protocol):
    orders: KeyedTable


@ORDERS.on("OrderPlaced")
def placed(event: Event, tables: OrderTables) -> None:
    placement = accept_placement(event, tables.orders.get(event.stream_id))
    tables.orders.put({
        "order_id": event.stream_id,
        "customer_id": placement.customer_id,
        "status": "placed",
        "placed_on": placement.placed_at.date(),
        "placed_at": placement.placed_at,
        "item_count": 0,
        "total": ZERO,
        "weight_kg": 0.0,
        "gift": placement.gift,
        "version": event.seq,
    })


def _save(tables: OrderTables, row: dict, event: Event, **changes) -> None:
    tables.orders.put({**row, **changes, "version": event.seq})


@ORDERS.on("ItemAdded")
def item_added(event: Event, tables: OrderTables) -> None:
    row = tables.orders.get(event.stream_id)
    item = accept_item(event, row)
    _save(tables, row, event, item_count=row["item_count"] + item.quantity, total=row["total"] + item.line_total,
          weight_kg=row["weight_kg"] + item.weight_kg)


@ORDERS.on("OrderPaid")
def paid(event: Event, tables: OrderTables) -> None:
    row = tables.orders.get(event.stream_id)
    payment = accept_payment(event, row)
    # placed_at was stored by an earlier message (maybe an earlier run) and comes back an aware UTC datetime
    hours_to_pay = (payment.paid_at - row["placed_at"]).total_seconds() / 3600
    _save(tables, row, event, status="paid", paid_at=payment.paid_at, hours_to_pay=hours_to_pay)


@ORDERS.on("OrderShipped")
def shipped(event: Event, tables: OrderTables) -> None:
    row = tables.orders.get(event.stream_id)
    shipped_on = accept_shipment(event, row)
    days_to_ship = (shipped_on - row["placed_on"]).days  # placed_on comes back a date, whichever run stored it
    _save(tables, row, event, status="shipped", shipped_on=shipped_on, days_to_ship=days_to_ship)


@ORDERS.on("OrderCancelled")
def cancelled(event: Event, tables: OrderTables) -> None:
    row = tables.orders.get(event.stream_id)
    _save(tables, row, event, status="cancelled", cancel_reason=accept_cancellation(event, row).reason)
