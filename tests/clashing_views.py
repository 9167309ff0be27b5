"""A view whose columns are named like the engine's own (`stream_id`, `view`, `seq`, `kind`, `data`,
`entry_idx`, `batch_id`, `name`, `n`, `line`, `payload`, `event_type`, `state`), in keyed, append and
aggregate tables, in primary keys and out of them: DESIGN §5 says column names are the user's.
`tests/cli/test_column_names.py` runs it through the CLI (INORDER_VIEWS=tests.clashing_views)."""

from __future__ import annotations

from decimal import Decimal

from pipelines.view import DECIMAL, Column, Table, View

NOTES = Table.keyed(  # stream key `view`, `kind` in the key, `stream_id` a plain column
    "notes", {"view": Column(str), "kind": Column(str), "stream_id": Column(str), "seq": Column(int),
              "data": Column(str), "state": Column(DECIMAL(18, 2)), "n": Column(int)},
    key=("view", "kind"), stream_key="view")
LOG = Table.append(  # stream key `name`, `stream_id` in the key (the engine's window over it once failed)
    "log", {"name": Column(str), "stream_id": Column(str), "entry_idx": Column(int), "line": Column(int),
            "payload": Column(str), "event_type": Column(str), "batch_id": Column(str), "view": Column(str)},
    key=("name", "stream_id"), stream_key="name")
TOTALS = Table.aggregate(  # `stream_id` and `kind` are its key
    "totals", {"stream_id": Column(str), "kind": Column(str), "n": Column(int), "seq": Column(int)},
    key=("stream_id", "kind"))

CLASHING = View(name="clashing", tables=(NOTES, LOG, TOTALS), subscribes=("thing",))


@CLASHING.on("Noted", "Amended")
def noted(event, tables) -> None:
    category, amount = event.payload["category"], Decimal(event.payload["amount"])
    before = tables.notes.get(event.stream_id, event.event_type)
    tables.notes.put({"view": event.stream_id, "kind": event.event_type, "stream_id": category, "seq": event.seq,
                      "data": event.payload["text"], "state": amount + (before["state"] if before else 0),
                      "n": 1 + (before["n"] if before else 0)})
    last = tables.log.last()
    tables.log.append({"name": event.stream_id, "stream_id": f"{event.seq:05d}", "entry_idx": event.seq,
                       "line": 1 + (last["line"] if last else 0), "payload": event.payload["text"],
                       "event_type": event.event_type, "batch_id": event.batch_id, "view": category})
    tables.totals.add({"stream_id": category, "kind": event.event_type}, n=1, seq=event.seq)
