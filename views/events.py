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
Amount = Annotated[Decimal, Check(gt=0, le=MAX_AMOUNT, places=2)]


class AccountOpened(msgspec.Struct):
    owner: Annotated[str, msgspec.Meta(pattern=r"\S")]  # who opened it: not empty, not only spaces


class _MoneyMoved(msgspec.Struct):
    amount: Amount

    def __post_init__(self) -> None:
        # msgspec also reads a Decimal from a JSON string, "NaN" included, which no bound can be compared
        # with: refused here, before the bounds are checked (any other string: `money.refuse_quoted_amount`)
        if not self.amount.is_finite():
            raise ValueError("`amount` must be a JSON number")


class Deposited(_MoneyMoved):
    """Money paid into the account."""


class Withdrawn(_MoneyMoved):
    """Money taken out of the account."""
