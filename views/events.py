"""The bank's events, as its feed sends them (demos/bank.py writes them): the payload of each `account`
message, by its `event_type`. A payload that does not fit its class is refused (a `Reject` naming the field).

`AccountClosed` carries nothing the views read: its handler takes any payload (`@VIEW.on("AccountClosed")`),
where a class would refuse one that is not a JSON object.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import msgspec

from inorder import Check

MAX_AMOUNT = Decimal("9999999999999999.99")  # the largest DECIMAL(18,2)

# Money: more than zero, in cents, and within the columns it is summed into.
Amount = Annotated[Decimal, Check(gt=0, le=MAX_AMOUNT, places=2, json_number=True)]


class AccountOpened(msgspec.Struct, frozen=True):
    owner: Annotated[str, msgspec.Meta(pattern=r"\S")]  # who opened it: not empty, not only spaces


class _MoneyMoved(msgspec.Struct, frozen=True):
    amount: Amount  # a JSON number: "12.50" or "NaN", which a Decimal field would read, are refused


class Deposited(_MoneyMoved):
    """Money paid into the account."""


class Withdrawn(_MoneyMoved):
    """Money taken out of the account."""
