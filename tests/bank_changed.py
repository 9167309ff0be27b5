"""The bank's views with `account_activity` given a new column, `direction` ('in' or 'out'): a changed
table, refused until the view is rebuilt (the 1M-event rebuild under readers, tests/e2e/test_rebuild_readers.py).

INORDER_VIEWS=views.accounts,views.daily_totals,tests.bank_changed
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import views.account_activity as activity
from pipelines.view import Column, Event, Handlers
from tests.builders import amount_of

VIEWS = "views.accounts,views.daily_totals,tests.bank_changed"


def _record(event: Event, tables, signed_amount: Decimal, amount: Decimal, direction: str) -> None:
    last = tables.account_activity.last()
    position, total = (1, Decimal("0.00")) if last is None else (last["position"] + 1, last["running_total"])
    tables.account_activity.append({"account_id": event.stream_id, "position": position, "seq": event.seq,
                                    "event_type": event.event_type, "amount": amount,
                                    "running_total": total + signed_amount, "direction": direction})


def deposited(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, amount, amount, "in")


def withdrawn(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, -amount, amount, "out")


(_TABLE,) = activity.VIEW.tables
ACCOUNT_ACTIVITY = replace(activity.VIEW,
                           tables=(replace(_TABLE, columns={**_TABLE.columns, "direction": Column(str)}),),
                           handlers=Handlers(activity.VIEW.name, {"Deposited": deposited, "Withdrawn": withdrawn}))
