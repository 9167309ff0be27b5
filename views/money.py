"""What the bank views check beyond their event classes (views/events.py): that an amount was sent as a
JSON number, and the UTC day of an event's envelope."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import msgspec

from inorder import Event, Reject
from views.events import MAX_AMOUNT

CENT = Decimal("0.01")


class _AmountAsSent(msgspec.Struct):
    amount: int | float


_AMOUNT_AS_SENT = msgspec.json.Decoder(_AmountAsSent).decode


def refuse_quoted_amount(event: Event) -> None:
    """Refuse a Deposited or Withdrawn whose `amount` is a JSON string ("12.50"): money is sent as a JSON
    number, and msgspec, which decoded the event, reads a `Decimal` field from a string too."""
    try:
        _AMOUNT_AS_SENT(event.payload_json)
    except msgspec.ValidationError as exc:
        raise Reject(f"{event.event_type}: {exc}") from None


def amount_of(event: Event) -> Decimal:
    """The `amount` of an untyped Deposited or Withdrawn, for a handler registered by event type name (the
    tests' views; the bank's own read `Deposited.amount`): a JSON number > 0 with at most two decimals."""
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
