"""The bank's views as they were before the typed-event rewrite (issue 26), frozen: views/money.py,
accounts.py, account_activity.py and daily_totals.py at commit ef828cf in one module, with only the names
changed that the four would share here (each `VIEW` and its handlers take its view's name) and the imports.
tests/fast/test_bank_typed.py replays random payloads through these and through views/ and asserts the same
tables and refusals. Never edit them to follow the bank: they are the reference its behaviour is held to.
(They are declared in the older style, so importing this module gives ViewDeprecation warnings.)"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from pipelines.view import Alerts, Event, Reject, Table, Thresholds, View, between, in_set, not_null, unique
from views.design import LATE_BY_DESIGN

# -- views/money.py ------------------------------------------------------------------------------------------

CENT = Decimal("0.01")
MAX_AMOUNT = Decimal("9999999999999999.99")  # DECIMAL(18,2)


def amount_of(event: Event) -> Decimal:
    """The event's `amount`: a JSON number > 0 with at most two decimals (money is DECIMAL(18,2))."""
    payload = event.payload
    amount = payload.get("amount") if type(payload) is dict else None
    kind = type(amount)
    if kind is int:
        amount = Decimal(amount)
    elif kind is not Decimal:  # bool, str, None, objects: not a JSON number
        raise Reject(f"amount must be a JSON number, got {amount!r}")
    if not amount > 0:
        raise Reject(f"amount must be > 0, got {amount}")
    if amount > MAX_AMOUNT:
        raise Reject(f"amount {amount} does not fit DECIMAL(18,2)")
    cents = amount.quantize(CENT)
    if cents != amount:
        raise Reject(f"amount {amount} has more than two decimals")
    return cents


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


# -- views/accounts.py ---------------------------------------------------------------------------------------

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


def accounts_account_opened(event: Event, tables) -> None:
    payload = event.payload
    owner = payload.get("owner") if isinstance(payload, dict) else None
    if not isinstance(owner, str) or not owner.strip():
        raise Reject("owner is missing or empty")
    if tables.accounts.get(event.stream_id) is not None:
        raise Reject("account already exists")
    tables.accounts.put({"account_id": event.stream_id, "owner": owner, "balance": Decimal("0.00"),
                         "status": "open", "version": event.seq, "event_count": 1})


def accounts_deposited(event: Event, tables) -> None:
    amount = amount_of(event)
    row = _open_account(event, tables)
    row["balance"] += amount
    tables.accounts.put(_applied(row, event))


def accounts_withdrawn(event: Event, tables) -> None:
    amount = amount_of(event)
    row = _open_account(event, tables)
    if amount > row["balance"]:
        raise Reject("insufficient funds")
    row["balance"] -= amount
    tables.accounts.put(_applied(row, event))


def accounts_account_closed(event: Event, tables) -> None:
    row = _open_account(event, tables)
    if row["balance"] != 0:
        raise Reject(f"balance is {row['balance']}, not 0")
    row["status"] = "closed"
    tables.accounts.put(_applied(row, event))


ACCOUNTS_VIEW = View(
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
        "AccountOpened": accounts_account_opened,
        "Deposited": accounts_deposited,
        "Withdrawn": accounts_withdrawn,
        "AccountClosed": accounts_account_closed,
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

# -- views/account_activity.py -------------------------------------------------------------------------------

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


def activity_deposited(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, amount, amount)


def activity_withdrawn(event: Event, tables) -> None:
    amount = amount_of(event)
    _record(event, tables, -amount, amount)


ACTIVITY_VIEW = View(
    name="account_activity",
    tables=(ACCOUNT_ACTIVITY,),
    subscribes=("account",),
    handlers={"Deposited": activity_deposited, "Withdrawn": activity_withdrawn},
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

# -- views/daily_totals.py -----------------------------------------------------------------------------------

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


def daily_deposited(event: Event, tables) -> None:
    amount, day = amount_of(event), utc_day(event)
    tables.daily_totals.add({"day": day}, deposits=amount, deposit_count=1)


def daily_withdrawn(event: Event, tables) -> None:
    amount, day = amount_of(event), utc_day(event)
    tables.daily_totals.add({"day": day}, withdrawals=amount, withdrawal_count=1)


DAILY_VIEW = View(
    name="daily_totals",
    tables=(DAILY_TOTALS,),
    subscribes=("account",),
    handlers={"Deposited": daily_deposited, "Withdrawn": daily_withdrawn},
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
