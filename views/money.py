"""Validation shared by the bank views: amounts and event dates."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

from pipelines.view import Event, Reject

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
