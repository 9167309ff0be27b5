"""A lender's view for tests/cli/test_home_safety.py: `loan` streams in the lender's own record shape."""

from pipelines.view import Column, Table, View

LOANS = Table.per_stream("loans", key="loan_id", columns={"loan_id": Column(str), "owed": Column(int),
                                                          "events": Column(int)})
LOAN_BOOK = View(name="loan_book", tables=(LOANS,), subscribes=("loan",))


@LOAN_BOOK.on("Opened")
def opened(event, tables):
    tables.loans.put({"loan_id": event.stream_id, "owed": event.payload["amount"], "events": 1})


@LOAN_BOOK.on("Repaid")
def repaid(event, tables):
    row = tables.loans.get(event.stream_id)
    row["owed"] -= event.payload["amount"]
    row["events"] += 1
    tables.loans.put(row)
