"""View `shop_daily`: the shop's day in numbers, fed by BOTH stream types (`order` and `customer`).

Each counter is booked on the UTC day its event happened: orders placed, item units and their
weight, payments and revenue (on the day paid), shipments (on the day shipped), cancellations,
and customer sign-ups. `shop_daily` is an aggregate table, shared by every stream: handlers only
add increments, so the (undefined) order between streams never matters.

To refuse exactly what `orders` and `customers` refuse (a payment that does not match the order,
a second registration...), the view keeps a little state per stream in two keyed tables, one per
stream type: a row of `daily_order_state` belongs to an order stream, a row of
`daily_customer_state` to a customer stream, and each handler writes only its own stream's row.
"""

from __future__ import annotations

from datetime import date
from typing import Protocol

from pipelines.view import AggregateTable, Event, KeyedTable, Table, View, between, in_set, not_null, unique
from tests.shop_classic.fields import (ORDER_STATUSES, ZERO, accept_cancellation, accept_item, accept_payment,
                               accept_placement, accept_registration, accept_shipment)

COUNTERS = ("orders_placed", "items", "weight_kg", "orders_paid", "revenue", "orders_shipped",
            "orders_cancelled", "signups")

SHOP_DAILY_TABLE = Table(
    "shop_daily",
    columns={
        "day": "DATE",
        "orders_placed": "BIGINT",
        "items": "INTEGER",
        # summed across streams in no defined order: exact only because weights are whole quarter
        # kilos (fields.quarter_kilos), which binary floating point adds without rounding
        "weight_kg": "DOUBLE",
        "orders_paid": "BIGINT",
        "revenue": "DECIMAL(14,2)",
        "orders_shipped": "BIGINT",
        "orders_cancelled": "BIGINT",
        "signups": "BIGINT",
    },
    primary_key=("day",),
    kind="aggregate",
    descriptions={"day": "UTC day (of each event's occurred_at)", "orders_placed": "orders placed that day",
                  "items": "units added to orders that day", "weight_kg": "shipping weight added that day",
                  "orders_paid": "orders paid that day", "revenue": "amounts paid that day",
                  "orders_shipped": "orders shipped that day", "orders_cancelled": "orders cancelled that day",
                  "signups": "customers registered that day"},
)

ORDER_STATE_TABLE = Table(
    "daily_order_state",
    columns={"order_id": "VARCHAR", "placed_at": "TIMESTAMPTZ", "status": "VARCHAR", "total": "DECIMAL(12,2)"},
    primary_key=("order_id",),
    kind="keyed",
    stream_key="order_id",
    descriptions={"order_id": "the order (its stream id)", "placed_at": "when it was placed",
                  "status": "its status as far as the daily totals counted it", "total": "its total when placed"},
)

CUSTOMER_STATE_TABLE = Table(
    "daily_customer_state",
    columns={"customer_id": "VARCHAR", "joined_on": "DATE"},
    primary_key=("customer_id",),
    kind="keyed",
    stream_key="customer_id",
    descriptions={"customer_id": "the customer (its stream id)", "joined_on": "UTC day of registration"},
)

SHOP_DAILY = View(
    name="shop_daily",
    tables=(SHOP_DAILY_TABLE, ORDER_STATE_TABLE, CUSTOMER_STATE_TABLE),
    subscribes=("order", "customer"),
    expectations=(
        *not_null("shop_daily", "day", *COUNTERS),
        unique("shop_daily", "day"),
        *(between("shop_daily", counter, min_value=0) for counter in COUNTERS),
        *not_null("daily_order_state", "order_id", "placed_at", "status", "total"),
        unique("daily_order_state", "order_id"),
        in_set("daily_order_state", "status", ORDER_STATUSES),
        *not_null("daily_customer_state", "customer_id", "joined_on"),
        unique("daily_customer_state", "customer_id"),
    ),
)


class DailyTables(Protocol):
    shop_daily: AggregateTable
    daily_order_state: KeyedTable
    daily_customer_state: KeyedTable


def _order(event: Event, tables: DailyTables) -> dict | None:
    return tables.daily_order_state.get(event.stream_id)


def _book(tables: DailyTables, row: dict, day: date, **counts) -> None:
    """Keep the order's state and add its counts to `day`."""
    tables.daily_order_state.put(row)
    tables.shop_daily.add({"day": day}, **counts)


@SHOP_DAILY.on("OrderPlaced")
def order_placed(event: Event, tables: DailyTables) -> None:
    placement = accept_placement(event, _order(event, tables))
    row = {"order_id": event.stream_id, "placed_at": placement.placed_at, "status": "placed", "total": ZERO}
    _book(tables, row, placement.placed_at.date(), orders_placed=1)


@SHOP_DAILY.on("ItemAdded")
def item_added(event: Event, tables: DailyTables) -> None:
    row = _order(event, tables)
    item = accept_item(event, row)
    _book(tables, {**row, "total": row["total"] + item.line_total}, item.added_at.date(),
          items=item.quantity, weight_kg=item.weight_kg)


@SHOP_DAILY.on("OrderPaid")
def order_paid(event: Event, tables: DailyTables) -> None:
    row = _order(event, tables)
    payment = accept_payment(event, row)
    _book(tables, {**row, "status": "paid"}, payment.paid_at.date(), orders_paid=1, revenue=payment.amount)


@SHOP_DAILY.on("OrderShipped")
def order_shipped(event: Event, tables: DailyTables) -> None:
    row = _order(event, tables)
    shipped_on = accept_shipment(event, row)
    _book(tables, {**row, "status": "shipped"}, shipped_on, orders_shipped=1)


@SHOP_DAILY.on("OrderCancelled")
def order_cancelled(event: Event, tables: DailyTables) -> None:
    row = _order(event, tables)
    cancellation = accept_cancellation(event, row)
    _book(tables, {**row, "status": "cancelled"}, cancellation.cancelled_at.date(), orders_cancelled=1)


@SHOP_DAILY.on("CustomerRegistered")
def customer_registered(event: Event, tables: DailyTables) -> None:
    registration = accept_registration(event, tables.daily_customer_state.get(event.stream_id))
    tables.daily_customer_state.put({"customer_id": event.stream_id, "joined_on": registration.joined_on})
    tables.shop_daily.add({"day": registration.joined_on}, signups=1)
