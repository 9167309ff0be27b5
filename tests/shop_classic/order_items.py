"""View `order_items`: one row per item line of an order, numbered 1, 2, 3... within the order.

An append table: a handler reads only the order's newest line (to number the next one), so the
engine never loads an order's whole history. Each line is checked on its own; whether the order
still accepted items at that point is the `orders` view's business (on clean data they agree).
"""

from __future__ import annotations

from typing import Protocol

from pipelines.view import AppendTable, Event, Table, View, between, not_null, unique
from tests.shop_classic.fields import MAX_QUANTITY, item_of

ORDER_ITEMS_TABLE = Table(
    "order_items",
    columns={
        "order_id": "VARCHAR",
        "line_no": "BIGINT",
        "sku": "VARCHAR",
        "quantity": "INTEGER",
        "unit_price": "DECIMAL(10,2)",
        "line_total": "DECIMAL(12,2)",
        "added_at": "TIMESTAMPTZ",
    },
    primary_key=("order_id", "line_no"),
    kind="append",
    stream_key="order_id",
    descriptions={
        "order_id": "the order (its stream id)",
        "line_no": "1, 2, … per order",
        "sku": "catalogue item",
        "quantity": "units ordered",
        "unit_price": "price of one unit",
        "line_total": "quantity × unit_price",
        "added_at": "when the item was added (occurred_at)",
    },
)


class ItemTables(Protocol):
    order_items: AppendTable


def item_added(event: Event, tables: ItemTables) -> None:
    item = item_of(event)
    last = tables.order_items.last()
    tables.order_items.append({
        "order_id": event.stream_id,
        "line_no": 1 if last is None else last["line_no"] + 1,
        "sku": item.sku,
        "quantity": item.quantity,
        "unit_price": item.unit_price,
        "line_total": item.line_total,
        "added_at": item.added_at,
    })


ORDER_ITEMS = View(
    name="order_items",
    tables=(ORDER_ITEMS_TABLE,),
    subscribes=("order",),
    handlers={"ItemAdded": item_added},
    expectations=(
        *not_null("order_items", "order_id", "line_no", "sku", "quantity", "unit_price", "line_total", "added_at"),
        unique("order_items", "order_id", "line_no"),
        between("order_items", "line_no", min_value=1),
        between("order_items", "quantity", min_value=1, max_value=MAX_QUANTITY),
        between("order_items", "unit_price", min_value=0.01),
        between("order_items", "line_total", min_value=0.01),
    ),
)
