"""View `customers`: one row per registered customer, with tier and marketing consent.

Stream type `customer`; the stream id is the customer id. Refusals (an unknown tier, a second
registration, a change to a customer never registered) are logged and skipped (the default).
"""

from __future__ import annotations

from datetime import date

from inorder import Column, Event, Reject, StreamTable, Table, Tables, View
from shop.views.events import TIERS, CustomerRegistered, OptedIn, OptedOut, TierChanged
from shop.views.fields import accept_registration

CUSTOMERS_TABLE = Table.per_stream("customers", key="customer_id", columns={
    "customer_id": Column(str, not_null=True, unique=True, doc="the customer (its stream id)"),
    "name": Column(str, not_null=True, doc="name given at registration"),
    "email": Column(str, not_null=True, unique=True, doc="contact address"),
    "tier": Column(str, not_null=True, one_of=TIERS, doc="bronze, silver or gold"),
    "joined_on": Column(date, not_null=True, doc="UTC day of registration"),
    "marketing_opt_in": Column(bool, not_null=True, doc="agreed to marketing mail"),
    "version": Column(int, not_null=True, min=1, doc="seq of the newest message applied"),
})

CUSTOMERS = View(name="customers", tables=(CUSTOMERS_TABLE,), subscribes=("customer",))


@CUSTOMERS.on(CustomerRegistered)
def registered(registration: CustomerRegistered, tables: Tables, event: Event) -> None:
    customers = tables[CUSTOMERS_TABLE]
    joined_on = accept_registration(event, customers.row)
    customers.save(name=registration.name, email=registration.email, tier=registration.tier, joined_on=joined_on,
                   marketing_opt_in=False, version=event.seq)


def _save_registered(customers: StreamTable, event: Event, **changes) -> None:
    """Save changes to the customer's row; a change to a customer never registered is refused."""
    if customers.row is None:
        raise Reject(f"{event.event_type}: customer {event.stream_id} was never registered")
    customers.save(**changes, version=event.seq)


@CUSTOMERS.on(TierChanged)
def tier_changed(change: TierChanged, tables: Tables, event: Event) -> None:
    _save_registered(tables[CUSTOMERS_TABLE], event, tier=change.tier)


@CUSTOMERS.on(OptedIn, OptedOut)
def consent(choice: OptedIn | OptedOut, tables: Tables, event: Event) -> None:
    _save_registered(tables[CUSTOMERS_TABLE], event, marketing_opt_in=isinstance(choice, OptedIn))
