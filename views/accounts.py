"""View `accounts`: one row per bank account with its balance and status.

Stream type `account`; the stream id is the account id.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from pipelines.view import Alerts, Event, Reject, Table, Thresholds, View, between, in_set, not_null, unique
from views.design import LATE_BY_DESIGN
from views.money import amount_of

ACCOUNTS = Table(
    "accounts",
    columns={
        "account_id": "VARCHAR",
        "owner": "VARCHAR",
        "balance": "DECIMAL(18,2)",
        "status": "VARCHAR",
        "version": "BIGINT",
        "event_count": "BIGINT",
    },
    primary_key=("account_id",),
    kind="keyed",
    stream_key="account_id",
    descriptions={
        "account_id": "the account (its stream id)",
        "owner": "who opened the account",
        "balance": "deposits minus withdrawals, in the account's currency",
        "status": "open or closed",
        "version": "seq of the newest message applied",
        "event_count": "messages applied (ignored ones not counted)",
    },
)


def _open_account(event: Event, tables) -> dict:
    row = tables.accounts.get(event.stream_id)
    if row is None or row["status"] != "open":
        raise Reject("account not open")
    return row


def _applied(row: dict, event: Event) -> dict:
    row["version"] = event.seq
    row["event_count"] += 1
    return row


def account_opened(event: Event, tables) -> None:
    payload = event.payload
    owner = payload.get("owner") if isinstance(payload, dict) else None
    if not isinstance(owner, str) or not owner.strip():
        raise Reject("owner is missing or empty")
    if tables.accounts.get(event.stream_id) is not None:
        raise Reject("account already exists")
    tables.accounts.put({"account_id": event.stream_id, "owner": owner, "balance": Decimal("0.00"),
                         "status": "open", "version": event.seq, "event_count": 1})


def deposited(event: Event, tables) -> None:
    amount = amount_of(event)
    row = _open_account(event, tables)
    row["balance"] += amount
    tables.accounts.put(_applied(row, event))


def withdrawn(event: Event, tables) -> None:
    amount = amount_of(event)
    row = _open_account(event, tables)
    if amount > row["balance"]:
        raise Reject("insufficient funds")
    row["balance"] -= amount
    tables.accounts.put(_applied(row, event))


def account_closed(event: Event, tables) -> None:
    row = _open_account(event, tables)
    if row["balance"] != 0:
        raise Reject(f"balance is {row['balance']}, not 0")
    row["status"] = "closed"
    tables.accounts.put(_applied(row, event))


VIEW = View(
    name="accounts",
    tables=(ACCOUNTS,),
    subscribes=("account",),
    owners=("team:payments",),
    tags={"domain": "bank", "tier": "gold"},
    fresh_within=timedelta(minutes=30),
    # refusals are this view's business: a stream whose AccountOpened was lost refuses every later message
    # ("account not open"), a lost or late deposit makes withdrawals "insufficient funds". By the demo's
    # design that is 3 % of a day's messages and 15 % of the run that brings its late batch.
    alerts=Alerts(reject_rate=Thresholds(warn=0.20, error=0.30), late_rate=LATE_BY_DESIGN),
    handlers={
        "AccountOpened": account_opened,
        "Deposited": deposited,
        "Withdrawn": withdrawn,
        "AccountClosed": account_closed,
    },
    expectations=(
        *not_null("accounts", "account_id", "owner", "balance", "status", "version", "event_count"),
        unique("accounts", "account_id"),
        between("accounts", "balance", min_value=0),
        between("accounts", "event_count", min_value=1),
        between("accounts", "version", min_value=1),
        in_set("accounts", "status", ("open", "closed")),
    ),
)
