"""A test view beside the bank's (tests/cli/test_counts.py): two tables, so a view's rows are counted per table,
a handler with a bug, so a stream parks and every retry of it logs one more error row, and an expectation
a busy account fails. Its handlers run on Spark's Python workers, where this module is importable as
`tests.counts_views`."""

from __future__ import annotations

from pipelines.view import Column, Table, View
from tests.builders import amount_of

BUG_ABOVE = 1000  # a deposit over this reads a payload field that no message has: a KeyError, a bug
MOST_DEPOSITS = 3  # an expectation that an account with more deposits fails (`inorder checks` names its writer)

AUDIT = View(
    name="audit",
    tables=(Table.per_stream("audit_accounts", key="account_id",
                             columns={"account_id": Column(str), "deposits": Column(int, min=0, max=MOST_DEPOSITS)}),
            Table.aggregate("audit_types", {"event_type": Column(str), "n": Column(int)}, key=("event_type",))),
    subscribes=("account",))


@AUDIT.on("AccountOpened")
def opened(event, tables) -> None:
    tables.audit_accounts.put({"account_id": event.stream_id, "deposits": 0})
    tables.audit_types.add({"event_type": event.event_type}, n=1)


@AUDIT.on("Deposited")
def deposited(event, tables) -> None:
    if amount_of(event) > BUG_ABOVE:  # a refused amount is a Reject (amount_of)
        _ = event.payload["currency"]  # the bug
    row = tables.audit_accounts.get(event.stream_id)
    tables.audit_accounts.put({**row, "deposits": row["deposits"] + 1})
    tables.audit_types.add({"event_type": event.event_type}, n=1)
