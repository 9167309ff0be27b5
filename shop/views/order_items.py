"""View `order_items`: one row per item line of an order, numbered 1, 2, 3... within the order.

An append table: a handler reads only the order's newest line (to number the next one), so the
engine never loads an order's whole history. Each line is checked on its own; whether the order
still accepted items at that point is the `orders` view's business (on clean data they agree).
"""

from __future__ import annotations

from datetime import datetime

from inorder import DECIMAL, INTEGER, Column, Event, Table, Tables, View
from shop.views.events import MAX_QUANTITY, ItemAdded
from shop.views.fields import item_of

ORDER_ITEMS_TABLE = Table.append("order_items", key=("order_id", "line_no"), stream_key="order_id", columns={
    "order_id": Column(str, not_null=True, doc="the order (its stream id)"),
    "line_no": Column(int, not_null=True, min=1, doc="1, 2, … per order"),
    "sku": Column(str, not_null=True, doc="catalogue item"),
    "quantity": Column(INTEGER, not_null=True, min=1, max=MAX_QUANTITY, doc="units ordered"),
    "unit_price": Column(DECIMAL(10, 2), not_null=True, min=0.01, doc="price of one unit"),
    "line_total": Column(DECIMAL(12, 2), not_null=True, min=0.01, doc="quantity × unit_price"),
    "added_at": Column(datetime, not_null=True, doc="when the item was added (occurred_at)"),
}, unique=(("order_id", "line_no"),))

ORDER_ITEMS = View(name="order_items", tables=(ORDER_ITEMS_TABLE,), subscribes=("order",))


@ORDER_ITEMS.on(ItemAdded)
def item_added(added: ItemAdded, tables: Tables, event: Event) -> None:
    item = item_of(added, event)
    lines = tables[ORDER_ITEMS_TABLE]
    last = lines.last()
    lines.append({
        "order_id": event.stream_id,
        "line_no": 1 if last is None else last["line_no"] + 1,
        "sku": item.sku,
        "quantity": item.quantity,
        "unit_price": item.unit_price,
        "line_total": item.line_total,
        "added_at": item.added_at,
    })
