"""Stores of entries (batches, ticks, operators' actions), each at its own logical time, built by the ingest as the
ingest asset records them: the fast tier's models of planning (tests/fast/test_plan_model.py) and of the state
load (tests/fast/test_pass_inputs.py) run on them. No Spark."""

from __future__ import annotations

import json

from pipelines.engine.ingest import ingest_landing, record_entry
from pipelines.engine.normalise import SourceMapping
from pipelines.store.database import Home, Store
from tests.domains import BANK_VIEWS, SHOP_VIEWS

VIEWS = [*BANK_VIEWS, *SHOP_VIEWS]
SUBSCRIBES = {v.name: set(v.subscribes) for v in VIEWS}
T = 1_700_000_000_000_000


def record(stream_type: str, stream_id: str, seq: int) -> str:
    return json.dumps({"stream_id": stream_id, "stream_type": stream_type, "seq": seq, "type": "Noted"})


def build(home: Home, entries: list) -> Store:
    """Each entry at its own logical time, as the ingest asset records it; returns the open store."""
    store = Store.open(home, VIEWS)
    for n, (kind, what) in enumerate(entries):
        t = T + n * 1_000_000
        if kind == "batch":
            lines = [record(stream_type, stream_id, seq) for seq, (stream_type, stream_id) in enumerate(what, 1)]
            (home.landing / f"b{n:02d}.jsonl").write_text("\n".join(lines) + "\n")
            ingest_landing(store, home, SourceMapping(), t)
        elif kind == "tick":
            record_entry(store, "tick", t)
        else:
            view, (_, stream_id) = what
            record_entry(store, kind, t, view, stream_id)
    return store
