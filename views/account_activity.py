"""View `account_activity`: one row per applied deposit or withdrawal, with a running total.

Other event types of the `account` stream are ignored (they still move the watermark).
"""

from __future__ import annotations

from decimal import Decimal

from pipelines.view import Alerts, Event, Table, View, between, in_set, not_null, unique
from views.design import LATE_BY_DESIGN
from views.money import amount_of

ACCOUNT_ACTIVITY = Table(
    "account_activity",
    columns={
        "account_id": "VARCHAR",
        "position": "BIGINT",
        "seq": "BIGINT",
        "event_type": "VARCHAR",
        "amount": "DECIMAL(18,2)",
        "running_total": "DECIMAL(18,2)",
    },
    primary_key=("account_id", "position"),
    kind="append",
    stream_key="account_id",
    descriptions={
        "account_id": "the account (its stream id)",
        "position": "1, 2, … per account, in seq order",
        "seq": "the message's seq in its account stream",
        "event_type": "Deposited or Withdrawn",
        "amount": "the amount moved (always positive)",
        "running_total": "the balance after this movement",
    },
)


def _record(event: Event, tables, signed_amount: Decimal, amount: Decimal) -> None:
    last = tables.account_activity.last()
    position, total = (1, Decimal("0.00")) if last is None else (last["position"] + 1, last["running_total"])
    tables.account_activity.append({
        "account_id": event.stream_id,
        "position": position,
        "seq": event.seq,
        "event_type": event.event_type,
        "amount": amount,
        "running_total": total + signed_amount,
    })


def deposited(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, amount, amount)


def withdrawn(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, -amount, amount)


VIEW = View(
    name="account_activity",
    tables=(ACCOUNT_ACTIVITY,),
    subscribes=("account",),
    handlers={"Deposited": deposited, "Withdrawn": withdrawn},
    # its refusals are the demo's poison (bad amounts, 0.3 %): the default thresholds fit
    alerts=Alerts(late_rate=LATE_BY_DESIGN),
    expectations=(
        *not_null("account_activity", "account_id", "position", "seq", "event_type", "amount", "running_total"),
        unique("account_activity", "account_id", "position"),
        unique("account_activity", "account_id", "seq"),
        between("account_activity", "position", min_value=1),
        between("account_activity", "amount", min_value=0.01),
        in_set("account_activity", "event_type", ("Deposited", "Withdrawn")),
    ),
)
