"""View `shop_daily`: the shop's day in numbers, fed by BOTH stream types (`order` and `customer`).

Each counter is booked on the UTC day its event happened: orders placed, item units and their
weight, payments and revenue (on the day paid), shipments (on the day shipped), cancellations,
and customer sign-ups. `shop_daily` is an aggregate table, shared by every stream: handlers only
add increments, so the (undefined) order between streams never matters.

To refuse exactly what `orders` and `customers` refuse (a payment that does not match the order,
a second registration...), the view keeps a little state per stream in two tables, one per
stream type: a row of `daily_order_state` belongs to an order stream, a row of
`daily_customer_state` to a customer stream, and each handler writes only its own stream's row.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from inorder import DECIMAL, INTEGER, Column, Event, Table, Tables, View
from shop.views.events import CustomerRegistered, ItemAdded, OrderCancelled, OrderPaid, OrderPlaced, OrderShipped
from shop.views.fields import (ORDER_STATUSES, ZERO, accept_cancellation, accept_item, accept_payment,
                               accept_placement, accept_registration, accept_shipment)


def _counter(type_, doc: str) -> Column:
    return Column(type_, not_null=True, min=0, doc=doc)


SHOP_DAILY_TABLE = Table.aggregate("shop_daily", key=("day",), columns={
    "day": Column(date, not_null=True, unique=True, doc="UTC day (of each event's occurred_at)"),
    "orders_placed": _counter(int, "orders placed that day"),
    "items": _counter(INTEGER, "units added to orders that day"),
    # summed across streams in no defined order: exact only because weights are whole quarter
    # kilos (fields.quarter_kilos), which binary floating point adds without rounding
    "weight_kg": _counter(float, "shipping weight added that day"),
    "orders_paid": _counter(int, "orders paid that day"),
    "revenue": _counter(DECIMAL(14, 2), "amounts paid that day"),
    "orders_shipped": _counter(int, "orders shipped that day"),
    "orders_cancelled": _counter(int, "orders cancelled that day"),
    "signups": _counter(int, "customers registered that day"),
})

ORDER_STATE_TABLE = Table.per_stream("daily_order_state", key="order_id", columns={
    "order_id": Column(str, not_null=True, unique=True, doc="the order (its stream id)"),
    "placed_at": Column(datetime, not_null=True, doc="when it was placed"),
    "status": Column(str, not_null=True, one_of=ORDER_STATUSES,
                     doc="its status as far as the daily totals counted it"),
    "total": Column(DECIMAL(12, 2), not_null=True, doc="its total when placed"),
})

CUSTOMER_STATE_TABLE = Table.per_stream("daily_customer_state", key="customer_id", columns={
    "customer_id": Column(str, not_null=True, unique=True, doc="the customer (its stream id)"),
    "joined_on": Column(date, not_null=True, doc="UTC day of registration"),
})

SHOP_DAILY = View(name="shop_daily", tables=(SHOP_DAILY_TABLE, ORDER_STATE_TABLE, CUSTOMER_STATE_TABLE),
                  subscribes=("order", "customer"))


def _book(tables: Tables, day: date, state: dict, **counts: int | float | Decimal) -> None:
    """Save these changes to the order's state and add its counts to `day`."""
    tables[ORDER_STATE_TABLE].save(**state)
    tables[SHOP_DAILY_TABLE].add({"day": day}, **counts)


@SHOP_DAILY.on(OrderPlaced)
def order_placed(order: OrderPlaced, tables: Tables, event: Event) -> None:
    placed_at = accept_placement(event, tables[ORDER_STATE_TABLE].row)
    _book(tables, placed_at.date(), {"placed_at": placed_at, "status": "placed", "total": ZERO}, orders_placed=1)


@SHOP_DAILY.on(ItemAdded)
def item_added(added: ItemAdded, tables: Tables, event: Event) -> None:
    row = tables[ORDER_STATE_TABLE].row
    item = accept_item(added, event, row)
    _book(tables, item.added_at.date(), {"total": row["total"] + item.line_total}, items=item.quantity,
          weight_kg=item.weight_kg)


@SHOP_DAILY.on(OrderPaid)
def order_paid(payment: OrderPaid, tables: Tables, event: Event) -> None:
    paid_at = accept_payment(payment, event, tables[ORDER_STATE_TABLE].row)
    _book(tables, paid_at.date(), {"status": "paid"}, orders_paid=1, revenue=payment.amount)


@SHOP_DAILY.on(OrderShipped)
def order_shipped(shipment: OrderShipped, tables: Tables, event: Event) -> None:
    shipped_on = accept_shipment(shipment, event, tables[ORDER_STATE_TABLE].row)
    _book(tables, shipped_on, {"status": "shipped"}, orders_shipped=1)


@SHOP_DAILY.on(OrderCancelled)
def order_cancelled(cancellation: OrderCancelled, tables: Tables, event: Event) -> None:
    cancelled_at = accept_cancellation(event, tables[ORDER_STATE_TABLE].row)
    _book(tables, cancelled_at.date(), {"status": "cancelled"}, orders_cancelled=1)


@SHOP_DAILY.on(CustomerRegistered)
def customer_registered(registration: CustomerRegistered, tables: Tables, event: Event) -> None:
    customers = tables[CUSTOMER_STATE_TABLE]
    joined_on = accept_registration(event, customers.row)
    customers.save(joined_on=joined_on)
    tables[SHOP_DAILY_TABLE].add({"day": joined_on}, signups=1)
