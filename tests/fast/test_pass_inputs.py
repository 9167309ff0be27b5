"""`load_inputs` (pipelines/engine/inputs.py, the state load) against a model written from its contract
(docs/STORE.md, "The pass"; CONCEPTS §2–§7), with no Spark: on a store built by the ingest (tests/
entry_stores.py) with watermarks, buffers, skipped ranges and keyed rows of its own, the planner's file holds

- a STATE row for each (view, stream) the pass walks that has a watermark or rows: the streams of the pass's
  messages, for each view that has their entry to do and subscribes to their type; an operator's target; and a
  buffered stream whose gap timer is due at the view's newest entry of the pass, or whose buffer is over
  `max_pending`, unless it is parked. Each with its watermark, its skipped ranges in order and its keyed rows in
  key order;
- every buffered message of those streams (PENDING);
- for each seq the pass resends at or below its stream's watermark, the copy walked at it (WALKED): the first the
  archive holds among the view's stream types.
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.engine.inputs import load_inputs
from pipelines.engine.pass_data import InputKind, row_column
from pipelines.engine.planning import plan_passes
from pipelines.store.database import Home
from tests.entry_stores import SUBSCRIBES, T, VIEWS, build
from tests.profiles import examples

VIEW = {v.name: v for v in VIEWS}
# few streams, so that the watermarks, the buffers and the batches meet: resends, walked copies, due timers
STREAMS = [("account", "a0"), ("account", "a1"), ("order", "o0"), ("customer", "c0"), ("parcel", "p0")]
ENTRY = st.one_of(
    st.tuples(st.just("batch"), st.lists(st.sampled_from(STREAMS), min_size=1, max_size=5)),
    st.tuples(st.just("tick"), st.just([])),
    st.tuples(st.sampled_from(["retry", "skip"]), st.tuples(st.sampled_from(sorted(SUBSCRIBES)),
                                                            st.sampled_from(STREAMS))),
)
PAIRS = st.tuples(st.sampled_from(sorted(SUBSCRIBES)), st.sampled_from([s for _, s in STREAMS]))
WATERMARK = st.fixed_dictionaries({
    "last_seq": st.integers(0, 4), "pending": st.integers(0, 3), "parked": st.booleans(),
    # blocked_since, in seconds from the first entry's time: the entries are a second apart, the timeout 600 s
    "blocked_after_s": st.one_of(st.none(), st.integers(-605, -596), st.integers(-700, 30)),
    "capacity": st.sampled_from(["under", "at", "over"]),  # the buffer's count against max_pending
    "gaps": st.lists(st.tuples(st.integers(1, 9), st.integers(0, 2)), max_size=3)})


def pending_count(view: str, w: dict) -> int:
    if not w["pending"] or w["capacity"] == "under":
        return w["pending"]
    return VIEW[view].max_pending + (w["capacity"] == "over")


def add_state(store, watermarks: dict, accounts: set[str]) -> None:
    """Watermarks, buffered messages and skipped ranges as a pass's commit leaves them, and `accounts`' rows."""
    con = store.con
    for (view, stream), w in watermarks.items():
        blocked = (None if w["blocked_after_s"] is None
                   else datetime.fromtimestamp(T / 1e6 + w["blocked_after_s"], timezone.utc))
        count = pending_count(view, w)
        con.execute("INSERT INTO inorder.watermarks (view, stream_id, updated_entry, stream_type, last_seq, "
                    "blocked_at, blocked_since, parked, pending_count, attempts, prev_last_seq) "
                    "VALUES (?, ?, 1, 'account', ?, ?, ?, ?, ?, 0, 0)",
                    [view, stream, w["last_seq"], w["last_seq"] + 1 if blocked else None, blocked, w["parked"], count])
        for n in range(w["pending"]):
            con.execute("INSERT INTO inorder.pending (view, stream_id, seq, entry_idx, line, batch_id, event_type, "
                        "payload, occurred_at, event_id, stream_type) VALUES (?, ?, ?, 1, ?, 'b00', 'Noted', '{}', "
                        "NULL, NULL, 'account')", [view, stream, w["last_seq"] + 2 + n, n + 1])
        for first, width in w["gaps"]:
            con.execute("INSERT INTO inorder.gaps (view, stream_id, first_missing, last_missing, reason, batch_id, "
                        "skipped_at, entry_idx, waited_seconds) VALUES (?, ?, ?, ?, 'timeout', 'b00', now(), 1, 0)",
                        [view, stream, first, first + width])
    for account in accounts:
        con.execute("INSERT INTO accounts VALUES (?, 'owner', 1.50, 'open', 1, 1)", [account])


def expected(entries: list, plan, watermarks: dict, accounts: set[str]) -> tuple[dict, set, set]:
    """The model: {(view, stream): state} for the STATE rows, the PENDING rows' (view, stream, seq), and the
    WALKED rows' (view, stream, seq, entry_idx, line)."""
    todo = set(plan.view_entries)
    newest = {view: max(e.t_us for e in planned) for view, planned in plan.by_view.items()}
    archived = [(idx, line, stream_type, stream, line) for idx, (kind, what) in enumerate(entries, 1) if kind == "batch"
                for line, (stream_type, stream) in enumerate(what, 1)]  # (entry, line, type, stream, seq)
    walks = {(view, s) for idx, _, t, s, _ in archived for view in newest
             if (view, idx) in todo and t in SUBSCRIBES[view]}
    walks |= {(what[0], what[1][1]) for idx, (kind, what) in enumerate(entries, 1)
              if kind in ("retry", "skip") and (what[0], idx) in todo}
    for (view, s), w in watermarks.items():
        if view not in newest or w["parked"] or not pending_count(view, w):
            continue
        timer_due = (w["blocked_after_s"] is None
                     or T + w["blocked_after_s"] * 10**6 + VIEW[view].gap_timeout_us <= newest[view])
        if timer_due or pending_count(view, w) > VIEW[view].max_pending:
            walks.add((view, s))
    states = {}
    for view, stream in walks:
        w = watermarks.get((view, stream))
        keyed = [stream] if view == "accounts" and stream in accounts else []
        if w is not None or keyed:
            states[(view, stream)] = (w and w["last_seq"], w and w["parked"],
                                      sorted((f, f + n) for f, n in w["gaps"]) if w else [], keyed)
    pending = {(v, s, w["last_seq"] + 2 + n) for (v, s), w in watermarks.items() if (v, s) in walks
               for n in range(w["pending"])}
    walked = set()
    for view, stream in walks:
        last = watermarks[(view, stream)]["last_seq"] if (view, stream) in watermarks else 0
        resent = {seq for idx, _, t, s, seq in archived
                  if s == stream and t in SUBSCRIBES[view] and (view, idx) in todo and seq <= last}
        for seq in resent:
            first = min((idx, line) for idx, line, t, s, q in archived
                        if s == stream and q == seq and t in SUBSCRIBES[view])
            walked.add((view, stream, seq, *first))
    return states, pending, walked


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(ENTRY, min_size=1, max_size=5),
       watermarks=st.dictionaries(PAIRS, WATERMARK, max_size=6), accounts=st.sets(st.sampled_from(["a0", "a1", "a2"])),
       committed=st.sets(st.tuples(st.sampled_from(sorted(SUBSCRIBES)), st.integers(1, 5)), max_size=6))
def test_the_planners_file_holds_the_touched_state_the_buffers_and_the_walked_copies(entries, watermarks, accounts,
                                                                                     committed):
    with tempfile.TemporaryDirectory() as folder:
        home = Home(Path(folder) / "home").ensure()
        store = build(home, entries)
        try:
            for view, idx in committed:  # an entry some views have committed: the others still have it to do
                store.con.execute("INSERT INTO inorder.batches (batch_id, view, entry_idx, kind, received_at) "
                                  "SELECT batch_id, ?, entry_idx, kind, received_at FROM inorder.ingest_log "
                                  "WHERE entry_idx = ?", [view, idx])
            add_state(store, watermarks, accounts)
            plans = plan_passes(store, VIEWS)
            if not plans:
                return
            inputs, _ = load_inputs(store, home, VIEWS, plans[0])
        finally:
            store.close()
        rows = pq.read_table(inputs.path).to_pylist() if inputs is not None else []
    want_states, want_pending, want_walked = expected(entries, plans[0], watermarks, accounts)
    states = {(r["view"], r["stream_id"]): (r["last_seq"], r["parked"],
                                            [(g["first_missing"], g["last_missing"]) for g in r["skipped"] or []],
                                            [a["account_id"] for a in r.get(row_column("accounts", "accounts")) or []]
                                            if r["view"] == "accounts" else [])
              for r in rows if r["rec_type"] == InputKind.STATE}
    assert len(states) == sum(r["rec_type"] == InputKind.STATE for r in rows)
    assert states == want_states
    assert {(r["view"], r["stream_id"], r["seq"]) for r in rows if r["rec_type"] == InputKind.PENDING} == want_pending
    assert {(r["view"], r["stream_id"], r["seq"], r["entry_idx"], r["line"])
            for r in rows if r["rec_type"] == InputKind.WALKED} == want_walked
    assert inputs is None or inputs.rows == len(rows)
