"""The shop's events as its feed sends them (demos/shop.py writes them): one class per event type,
named as the `type` of its messages. The types of the fields say what the shop takes. A payload that
does not fit (not a JSON object, a field missing or of another type, a failed constraint) is refused
(`Reject`, naming the field) before any handler runs. Fields the shop does not know are left alone.

Money and weights come as JSON numbers only (`Check(json_number=True)`: a Decimal field also decodes
from a JSON string, "12.50" or "NaN"). What the types cannot say is checked in `fields`:
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


class ItemAdded(msgspec.Struct, frozen=True):
    sku: Text
    quantity: Annotated[int, Meta(ge=1, le=MAX_QUANTITY)]
    unit_price: Annotated[Decimal, Check(gt=0, le=MAX_UNIT_PRICE, places=2, json_number=True)]
    weight_kg: Annotated[Decimal, Check(ge=0, le=MAX_UNIT_WEIGHT_KG, json_number=True)]  # of one unit


class OrderPaid(msgspec.Struct, frozen=True):
    amount: Annotated[Decimal, Check(gt=0, le=MAX_TOTAL, places=2, json_number=True)]
    paid_at: str  # an ISO 8601 time (fields.moment)


class OrderShipped(msgspec.Struct, frozen=True):
    shipped_on: str  # an ISO 8601 date (fields.day)


class OrderCancelled(msgspec.Struct, frozen=True):
    reason: Text
