"""View `daily_totals`: deposits and withdrawals per UTC day, across all accounts.

An aggregate table: handlers only add increments, so the order between streams never matters.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

from inorder import DECIMAL, Alerts, Column, Event, Reject, Table, Tables, View
from views.design import LATE_BY_DESIGN
from views.events import Deposited, Withdrawn

DAILY_TOTALS = Table.aggregate("daily_totals", key=("day",), columns={
    "day": Column(date, not_null=True, unique=True, doc="the UTC day the money moved (from occurred_at)"),
    "deposits": Column(DECIMAL(18, 2), not_null=True, min=0, doc="sum of deposits that day, all accounts"),
    "withdrawals": Column(DECIMAL(18, 2), not_null=True, min=0, doc="sum of withdrawals that day, all accounts"),
    "deposit_count": Column(int, not_null=True, min=0, doc="deposits that day"),
    "withdrawal_count": Column(int, not_null=True, min=0, doc="withdrawals that day"),
})

VIEW = View(
    name="daily_totals",
    tables=(DAILY_TOTALS,),
    subscribes=("account",),
    # its refusals are the demo's poison (bad amounts and dates, 0.4 %): the default thresholds fit
    alerts=Alerts(late_rate=LATE_BY_DESIGN),
)


def utc_day(event: Event) -> date:
    """The UTC calendar date of `occurred_at` (ISO 8601; a naive time is taken as UTC)."""
    text = event.occurred_at
    if not isinstance(text, str) or not text:
        raise Reject("occurred_at is missing")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise Reject(f"occurred_at is not ISO 8601: {text[:64]!r}") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.date()


@VIEW.on(Deposited)
def deposited(deposit: Deposited, tables: Tables, event: Event) -> None:
    tables[DAILY_TOTALS].add({"day": utc_day(event)}, deposits=deposit.amount, deposit_count=1)


@VIEW.on(Withdrawn)
def withdrawn(withdrawal: Withdrawn, tables: Tables, event: Event) -> None:
    tables[DAILY_TOTALS].add({"day": utc_day(event)}, withdrawals=withdrawal.amount, withdrawal_count=1)
