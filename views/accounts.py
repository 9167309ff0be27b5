"""View `accounts`: one row per bank account with its balance and status.

Stream type `account`; the stream id is the account id.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from inorder import DECIMAL, Alerts, Column, Event, Reject, Table, Tables, Thresholds, View
from views.design import LATE_BY_DESIGN
from views.events import AccountOpened, Deposited, Withdrawn

ACCOUNTS = Table.per_stream("accounts", key="account_id", columns={
    "account_id": Column(str, not_null=True, unique=True, doc="the account (its stream id)"),
    "owner": Column(str, not_null=True, doc="who opened the account"),
    "balance": Column(DECIMAL(18, 2), not_null=True, min=0,
                      doc="deposits minus withdrawals, in the account's currency"),
    "status": Column(str, not_null=True, one_of=("open", "closed"), doc="open or closed"),
    "version": Column(int, not_null=True, min=1, doc="seq of the newest message applied"),
    "event_count": Column(int, not_null=True, min=1, doc="messages applied (ignored ones not counted)"),
})

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
)


def _open_account(tables: Tables) -> dict:
    row = tables[ACCOUNTS].row
    if row is None or row["status"] != "open":
        raise Reject("account not open")
    return row


def _save_applied(tables: Tables, row: dict, event: Event, **changes) -> None:
    tables[ACCOUNTS].save(**changes, version=event.seq, event_count=row["event_count"] + 1)


@VIEW.on(AccountOpened)
def account_opened(opened: AccountOpened, tables: Tables, event: Event) -> None:
    if tables[ACCOUNTS].row is not None:
        raise Reject("account already exists")
    tables[ACCOUNTS].save(owner=opened.owner, balance=Decimal("0.00"), status="open", version=event.seq,
                         event_count=1)


@VIEW.on(Deposited)
def deposited(deposit: Deposited, tables: Tables, event: Event) -> None:
    row = _open_account(tables)
    _save_applied(tables, row, event, balance=row["balance"] + deposit.amount)


@VIEW.on(Withdrawn)
def withdrawn(withdrawal: Withdrawn, tables: Tables, event: Event) -> None:
    row = _open_account(tables)
    if withdrawal.amount > row["balance"]:
        raise Reject("insufficient funds")
    _save_applied(tables, row, event, balance=row["balance"] - withdrawal.amount)


@VIEW.on("AccountClosed")  # its payload is not read: any payload closes the account
def account_closed(event: Event, tables: Tables) -> None:
    row = _open_account(tables)
    if row["balance"] != 0:
        raise Reject(f"balance is {row['balance']}, not 0")
    _save_applied(tables, row, event, status="closed")
