"""A lender's view for tests/cli/test_home_safety.py: `loan` streams in the lender's own record shape."""

from pipelines.view import Table, View

LOANS = Table("loans", columns={"loan_id": "VARCHAR", "owed": "BIGINT", "events": "BIGINT"}, primary_key=("loan_id",),
              kind="keyed", stream_key="loan_id")


def opened(event, tables):
    tables.loans.put({"loan_id": event.stream_id, "owed": event.payload["amount"], "events": 1})


def repaid(event, tables):
    row = tables.loans.get(event.stream_id)
    row["owed"] -= event.payload["amount"]
    row["events"] += 1
    tables.loans.put(row)


LOAN_BOOK = View(name="loan_book", tables=(LOANS,), subscribes=("loan",), handlers={"Opened": opened, "Repaid": repaid})
