"""The shop's events as its feed sends them (demos/shop.py writes them): one class per event type,
named as the `type` of its messages. The types of the fields say what the shop takes. A payload that
does not fit (not a JSON object, a field missing or of another type, a failed constraint) is refused
(`Reject`, naming the field) before any handler runs. Fields the shop does not know are left alone.

What the types cannot say is checked in `fields`:
- a Decimal field also decodes from a JSON string ("12.50"), but the shop takes money and weights
  as JSON numbers only (`fields.numbers_as_sent`);
- a weight is a whole number of quarter kilograms (`fields.quarter_kilos`);
- `paid_at` and `shipped_on` stay text, read as Python reads ISO 8601, a time with no offset being
  UTC (`fields.moment`, `fields.day`). msgspec's RFC 3339 accepts fewer forms and keeps naive times.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal, get_args

import msgspec
from msgspec import Meta

from inorder import Check

MAX_UNIT_PRICE = Decimal("99999.99")
MAX_TOTAL = Decimal("9999999999.99")  # DECIMAL(12,2)
MAX_QUANTITY = 1000
MAX_UNIT_WEIGHT_KG = 1000

Text = Annotated[str, Meta(pattern=r"\S")]  # not blank: something besides whitespace
Tier = Literal["bronze", "silver", "gold"]
TIERS = get_args(Tier)
# something before the first @, and a dot inside the rest (not only at its ends)
EmailAddress = Annotated[str, Meta(pattern=r"(?s)^[^@]+@.*[^.].*\..*[^.]")]


class _Numbers(msgspec.Struct, frozen=True):
    """An event with Decimal fields. A Decimal also decodes from the JSON string "NaN", which `Check` cannot
    compare: it is refused here, before the checks run (and `fields.numbers_as_sent` refuses every string)."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, Decimal) and not value.is_finite():
                raise ValueError(f"`{name}` must be a JSON number, got {value}")


class CustomerRegistered(msgspec.Struct, frozen=True):
    name: Text
    email: EmailAddress
    tier: Tier


class TierChanged(msgspec.Struct, frozen=True):
    tier: Tier


class OptedIn(msgspec.Struct, frozen=True):
    """Agreed to marketing mail (no fields, but the payload is still an object)."""


class OptedOut(msgspec.Struct, frozen=True):
    """Withdrew the agreement."""


class OrderPlaced(msgspec.Struct, frozen=True):
    customer_id: Text
    gift: bool = False


class ItemAdded(_Numbers, frozen=True):
    sku: Text
    quantity: Annotated[int, Meta(ge=1, le=MAX_QUANTITY)]
    unit_price: Annotated[Decimal, Check(gt=0, le=MAX_UNIT_PRICE, places=2)]
    weight_kg: Annotated[Decimal, Check(ge=0, le=MAX_UNIT_WEIGHT_KG)]  # of one unit


class OrderPaid(_Numbers, frozen=True):
    amount: Annotated[Decimal, Check(gt=0, le=MAX_TOTAL, places=2)]
    paid_at: str  # an ISO 8601 time (fields.moment)


class OrderShipped(msgspec.Struct, frozen=True):
    shipped_on: str  # an ISO 8601 date (fields.day)


class OrderCancelled(msgspec.Struct, frozen=True):
    reason: Text
