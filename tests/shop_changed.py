"""The shop's views, with `orders` changed the way SHOP_CHANGE says: what a view author does to a
view that is already running (tests of views that change: tests/engine/test_view_versions.py).

INORDER_VIEWS=shop.views.customers,shop.views.order_items,shop.views.shop_daily,tests.shop_changed

SHOP_CHANGE:
- unset: `orders` as the shop declares it;
- `handler`: OrderPlaced stores the customer id upper-cased (a changed handler, same tables);
- `table`: a `channel` column, filled by OrderPlaced (a changed table: refused until rebuilt);
- `migration`: the same, declared as a migration (`add_column`): applied, no rebuild;
- `rebuild`: the changed handler, with on_change="rebuild" (the next run rebuilds the view).
"""

from __future__ import annotations

import os
from dataclasses import replace

import shop.views.orders as shop_orders
from pipelines.view import Column, Event, Handlers, add_column

CHANGE = os.environ.get("SHOP_CHANGE", "")
VIEWS = "shop.views.customers,shop.views.order_items,shop.views.shop_daily,tests.shop_changed"


def placed_upper(event: Event, tables) -> None:
    shop_orders.placed(event, tables)
    row = tables.orders.get(event.stream_id)
    tables.orders.put({**row, "customer_id": row["customer_id"].upper()})


def placed_with_channel(event: Event, tables) -> None:
    shop_orders.placed(event, tables)
    tables.orders.put({**tables.orders.get(event.stream_id), "channel": "web"})


def _with_placed(original, placed) -> Handlers:
    """The view's handlers with OrderPlaced replaced: what editing the handler in its module does."""
    return Handlers(original.name, {**original.handlers, "OrderPlaced": placed})


def changed_orders(change: str):
    original = shop_orders.ORDERS
    if change in ("handler", "rebuild"):
        return replace(original, handlers=_with_placed(original, placed_upper),
                       on_change="rebuild" if change == "rebuild" else "mark")
    if change in ("table", "migration"):
        (table,) = original.tables
        return replace(original, tables=(replace(table, columns={**table.columns, "channel": Column(str)}),),
                       handlers=_with_placed(original, placed_with_channel),
                       migrations=(add_column("orders", "channel"),) if change == "migration" else ())
    if change:
        raise ValueError(f"SHOP_CHANGE={change!r}: one of handler, table, migration, rebuild")
    return original


ORDERS = changed_orders(CHANGE)
