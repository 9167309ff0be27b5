"""Routing (DESIGN §2 step 2): which views each (stream type, entry) of a pass goes to."""

from __future__ import annotations

import dataclasses

from pipelines.engine.routing import routes
from views import account_activity, accounts

ACCOUNTS, ACTIVITY = accounts.VIEW, account_activity.VIEW
ORDERS = dataclasses.replace(accounts.VIEW, name="orders_view", subscribes=("order", "account"))


def test_each_stream_type_and_entry_goes_to_the_views_that_still_need_it():
    todo = [("accounts", 1), ("account_activity", 1), ("accounts", 2), ("orders_view", 2)]
    got = sorted(routes(todo, [ACCOUNTS, ACTIVITY, ORDERS]))
    assert got == [("account", 1, "account_activity,accounts"), ("account", 2, "accounts,orders_view"),
                   ("order", 2, "orders_view")]


def test_nothing_to_route_when_no_view_has_work():
    assert routes([], [ACCOUNTS, ACTIVITY]) == []
    assert routes([("gone_view", 1)], [ACCOUNTS]) == []  # a view not in the pass gets nothing
