"""View `customers`: one row per registered customer, with tier and marketing consent.

Stream type `customer`; the stream id is the customer id. Refusals (an unknown tier, a second
registration, a change to a customer never registered) are logged and skipped (the default).
"""

from __future__ import annotations

from typing import Protocol

from pipelines.view import Event, KeyedTable, Reject, Table, View, between, in_set, not_null, unique
from tests.shop_classic.fields import TIERS, accept_registration, payload_of, tier_of

CUSTOMERS_TABLE = Table(
    "customers",
    columns={
        "customer_id": "VARCHAR",
        "name": "VARCHAR",
        "email": "VARCHAR",
        "tier": "VARCHAR",
        "joined_on": "DATE",
        "marketing_opt_in": "BOOLEAN",
        "version": "BIGINT",
    },
    primary_key=("customer_id",),
    kind="keyed",
    stream_key="customer_id",
    descriptions={
        "customer_id": "the customer (its stream id)",
        "name": "name given at registration",
        "email": "contact address",
        "tier": "bronze, silver or gold",
        "joined_on": "UTC day of registration",
        "marketing_opt_in": "agreed to marketing mail",
        "version": "seq of the newest message applied",
    },
)


class CustomerTables(Protocol):
    customers: KeyedTable


def _registered(event: Event, tables: CustomerTables) -> dict:
    row = tables.customers.get(event.stream_id)
    if row is None:
        raise Reject(f"{event.event_type}: customer {event.stream_id} was never registered")
    row["version"] = event.seq
    return row


def registered(event: Event, tables: CustomerTables) -> None:
    registration = accept_registration(event, tables.customers.get(event.stream_id))
    tables.customers.put({
        "customer_id": event.stream_id,
        "name": registration.name,
        "email": registration.email,
        "tier": registration.tier,
        "joined_on": registration.joined_on,
        "marketing_opt_in": False,
        "version": event.seq,
    })


def tier_changed(event: Event, tables: CustomerTables) -> None:
    tier = tier_of(payload_of(event))
    row = _registered(event, tables)
    row["tier"] = tier
    tables.customers.put(row)


CUSTOMERS = View(
    name="customers",
    tables=(CUSTOMERS_TABLE,),
    subscribes=("customer",),
    handlers={"CustomerRegistered": registered, "TierChanged": tier_changed},
    expectations=(
        *not_null("customers", "customer_id", "name", "email", "tier", "joined_on", "marketing_opt_in", "version"),
        unique("customers", "customer_id"),
        unique("customers", "email"),
        in_set("customers", "tier", TIERS),
        between("customers", "version", min_value=1),
    ),
)


@CUSTOMERS.on("OptedIn", "OptedOut")
def consent(event: Event, tables: CustomerTables) -> None:
    payload_of(event)  # no fields, but it must still be an object
    row = _registered(event, tables)
    row["marketing_opt_in"] = event.event_type == "OptedIn"
    tables.customers.put(row)
