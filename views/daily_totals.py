"""View `daily_totals`: deposits and withdrawals per UTC day, across all accounts.

An aggregate table: handlers only add increments, so the order between streams never matters.
"""

from __future__ import annotations

from pipelines.view import Alerts, Event, Table, View, between, not_null, unique
from views.design import LATE_BY_DESIGN
from views.money import amount_of, utc_day

DAILY_TOTALS = Table(
    "daily_totals",
    columns={
        "day": "DATE",
        "deposits": "DECIMAL(18,2)",
        "withdrawals": "DECIMAL(18,2)",
        "deposit_count": "BIGINT",
        "withdrawal_count": "BIGINT",
    },
    primary_key=("day",),
    kind="aggregate",
    descriptions={
        "day": "the UTC day the money moved (from occurred_at)",
        "deposits": "sum of deposits that day, all accounts",
        "withdrawals": "sum of withdrawals that day, all accounts",
        "deposit_count": "deposits that day",
        "withdrawal_count": "withdrawals that day",
    },
)


def deposited(event: Event, tables) -> None:
    amount, day = amount_of(event), utc_day(event)
    tables.daily_totals.add({"day": day}, deposits=amount, deposit_count=1)


def withdrawn(event: Event, tables) -> None:
    amount, day = amount_of(event), utc_day(event)
    tables.daily_totals.add({"day": day}, withdrawals=amount, withdrawal_count=1)


VIEW = View(
    name="daily_totals",
    tables=(DAILY_TOTALS,),
    subscribes=("account",),
    handlers={"Deposited": deposited, "Withdrawn": withdrawn},
    # its refusals are the demo's poison (bad amounts and dates, 0.4 %): the default thresholds fit
    alerts=Alerts(late_rate=LATE_BY_DESIGN),
    expectations=(
        *not_null("daily_totals", "day", "deposits", "withdrawals", "deposit_count", "withdrawal_count"),
        unique("daily_totals", "day"),
        between("daily_totals", "deposits", min_value=0),
        between("daily_totals", "withdrawals", min_value=0),
        between("daily_totals", "deposit_count", min_value=0),
        between("daily_totals", "withdrawal_count", min_value=0),
    ),
)
