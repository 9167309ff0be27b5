"""A test view that deletes rows: a keyed table's `delete` and `all`, several rows per stream, and a
stream's last row deleted (each deposit is a hold; a withdrawal releases the oldest, or refuses when
there is none; closing the account releases them all). The fast model tests (tests/fast/test_model_vs_replay.py)
run it in memory; the engine-vs-model and PostgreSQL publication tests run it through Spark, the
commit and the publication, where its handlers run on Spark's Python workers (this module is
importable there, as `tests.holds_views`)."""

from __future__ import annotations

from pipelines.view import DECIMAL, Column, Reject, Table, View
from tests.builders import amount_of, batch, dep, msg, opened, wd

HOLDS = View(
    name="holds",
    tables=(Table.keyed("holds", {"account_id": Column(str), "seq": Column(int), "amount": Column(DECIMAL(18, 2))},
                        key=("account_id", "seq"), stream_key="account_id"),
            Table.aggregate("releases", {"account_id": Column(str), "n": Column(int)}, key=("account_id",))),
    subscribes=("account",), on_error="park")


@HOLDS.on("Deposited")
def hold(event, tables) -> None:
    tables.holds.put({"account_id": event.stream_id, "seq": event.seq, "amount": amount_of(event)})


@HOLDS.on("Withdrawn")
def release(event, tables) -> None:
    held = tables.holds.all()
    if not held:
        raise Reject("nothing is held")
    oldest = min(held, key=lambda row: row["seq"])
    tables.holds.delete(event.stream_id, oldest["seq"])
    tables.releases.add({"account_id": event.stream_id}, n=1)


@HOLDS.on("AccountClosed")
def close(event, tables) -> None:
    for row in tables.holds.all():
        tables.holds.delete(row["account_id"], row["seq"])
    if tables.holds.get(event.stream_id, 1) is not None:
        raise RuntimeError("a deleted row is still there")  # a bug: parks the stream


# Rows the store holds, deleted by later runs: acct-1's only hold at its withdrawal (the stream's last
# keyed row), acct-2's one left when the account closes; the views' tables end empty of holds
DELETES_STORED_ROWS = [
    batch(1, 0, opened("acct-1"), dep("acct-1", 2, 5), opened("acct-2"), dep("acct-2", 2, 7), dep("acct-2", 3, 1)),
    batch(2, 10, wd("acct-1", 3, 5), wd("acct-2", 4, 7)),
    batch(3, 20, msg("acct-2", 5, "AccountClosed")),
]
