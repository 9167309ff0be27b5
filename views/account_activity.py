"""View `account_activity`: one row per applied deposit or withdrawal, with a running total.

Other event types of the `account` stream are ignored (they still move the watermark).
"""

from __future__ import annotations

from decimal import Decimal

from inorder import DECIMAL, Alerts, Column, Event, Table, Tables, View
from views.design import LATE_BY_DESIGN
from views.events import Deposited, Withdrawn

ACCOUNT_ACTIVITY = Table.append("account_activity", key=("account_id", "position"), stream_key="account_id",
                                unique=(("account_id", "position"), ("account_id", "seq")), columns={
    "account_id": Column(str, not_null=True, doc="the account (its stream id)"),
    "position": Column(int, not_null=True, min=1, doc="1, 2, … per account, in seq order"),
    "seq": Column(int, not_null=True, doc="the message's seq in its account stream"),
    "event_type": Column(str, not_null=True, one_of=("Deposited", "Withdrawn"), doc="Deposited or Withdrawn"),
    "amount": Column(DECIMAL(18, 2), not_null=True, min=0.01, doc="the amount moved (always positive)"),
    "running_total": Column(DECIMAL(18, 2), not_null=True, doc="the balance after this movement"),
})

VIEW = View(
    name="account_activity",
    tables=(ACCOUNT_ACTIVITY,),
    subscribes=("account",),
    # its refusals are the demo's poison (bad amounts, 0.3 %): the default thresholds fit
    alerts=Alerts(late_rate=LATE_BY_DESIGN),
)


def _record(tables: Tables, event: Event, signed_amount: Decimal, amount: Decimal) -> None:
    last = tables[ACCOUNT_ACTIVITY].last()
    position, total = (1, Decimal("0.00")) if last is None else (last["position"] + 1, last["running_total"])
    tables[ACCOUNT_ACTIVITY].append({
        "account_id": event.stream_id,
        "position": position,
        "seq": event.seq,
        "event_type": event.event_type,
        "amount": amount,
        "running_total": total + signed_amount,
    })


@VIEW.on(Deposited)
def deposited(deposit: Deposited, tables: Tables, event: Event) -> None:
    _record(tables, event, deposit.amount, deposit.amount)


@VIEW.on(Withdrawn)
def withdrawn(withdrawal: Withdrawn, tables: Tables, event: Event) -> None:
    _record(tables, event, -withdrawal.amount, withdrawal.amount)
