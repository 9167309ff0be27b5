"""The shop demo (shop/): its views as INORDER_VIEWS=shop.views loads them, run through the reference
model (no Spark): hand-written histories against plain-Python expectations, refusals and parking,
conservation and batch-split invariance on Hypothesis scenarios, and the batch generator."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.domains import SHOP_VIEWS
from pipelines.testing import replay
from demos.shop import GeneratorConfig, generate, poison_changes, poisoned
from shop.views.orders import ORDERS
from tests.builders import T0
from tests.reference_model import Entry, Model, run_model
from tests.shop_strategies import resplit, shop_scenarios
from tests.fast.test_reference_model import assert_conserved
from tests.profiles import examples

SHOP_TABLES = tuple(t.name for v in SHOP_VIEWS for t in v.tables)
UTC = timezone.utc


def record(stream_id: str, seq: int, event_type: str, at: str, **payload) -> dict:
    stream_type = "order" if stream_id.startswith("ord") else "customer"
    return {"stream_id": stream_id, "stream_type": stream_type, "seq": seq, "type": event_type,
            "payload": payload, "occurred_at": at, "event_id": f"{stream_id}-{seq}"}


def utc_day(text: str) -> date:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).date()


def batches(*groups: list[dict]) -> list[Entry]:
    return [Entry("batch", f"b{i}", T0 + i, lines=[json.dumps(r) for r in group]) for i, group in enumerate(groups, 1)]


def project(entries: list[Entry]) -> Model:
    model = Model(SHOP_VIEWS)
    for entry in entries:
        model.process(entry)
    return model


def table(model: Model, name: str) -> list[dict]:
    """A table's rows with their typed values, in primary key order."""
    return [dict(row) for _, row in sorted(model.store[name].items())]


def violations(model: Model) -> list[str]:
    """The declared rules of every shop view that the model's tables break."""
    broken = []
    for view in SHOP_VIEWS:
        for e in view.rules:
            rows = table(model, e.table)
            values = [tuple(r[c] for c in e.columns) for r in rows]
            if e.rule == "not_null":
                ok = all(v[0] is not None for v in values)
            elif e.rule == "unique":
                ok = len(set(values)) == len(values)
            elif e.rule == "in_set":
                ok = all(v[0] is None or v[0] in e.value_set for v in values)
            else:
                ok = all(v[0] is None or ((e.min_value is None or v[0] >= e.min_value)
                                          and (e.max_value is None or v[0] <= e.max_value)) for v in values)
            if not ok:
                broken.append(f"{view.name}: {e.rule} {e.table}.{','.join(e.columns)}")
    return broken


def reject_errors(model: Model, view: str) -> list[tuple[str, int]]:
    return [(e["stream_id"], e["seq"]) for e in model.errors
            if e["view"] == view and e["kind"] == "handler_error" and e["error_class"] == "reject"]


# ----------------------------------------------------------------------------- the views

def test_shop_views_are_found_and_use_the_whole_api():
    assert {v.name for v in SHOP_VIEWS} == {"orders", "order_items", "customers", "shop_daily"}
    tables = [t for v in SHOP_VIEWS for t in v.tables]
    assert {t.kind for t in tables} == {"keyed", "append", "aggregate"}
    column_types = {re.sub(r"\(.*", "", sql_type) for t in tables for sql_type in t.sql_types.values()}
    assert column_types == {"VARCHAR", "BIGINT", "INTEGER", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMPTZ", "DECIMAL"}
    assert [v.name for v in SHOP_VIEWS if set(v.subscribes) == {"order", "customer"}] == ["shop_daily"]
    assert [v.name for v in SHOP_VIEWS if v.on_error == "park"] == ["orders"]
    assert all(v.rules for v in SHOP_VIEWS)
    assert ORDERS in SHOP_VIEWS and set(ORDERS.handlers) == {
        "OrderPlaced", "ItemAdded", "OrderPaid", "OrderShipped", "OrderCancelled"}


CUSTOMER = [
    record("cus-1", 1, "CustomerRegistered", "2024-03-01T23:30:00-05:00", name="Ada", email="ada@example.com",
           tier="silver"),
    record("cus-1", 2, "TierChanged", "2024-03-02T09:00:00Z", tier="gold"),
    record("cus-1", 3, "OptedIn", "2024-03-02T09:01:00Z"),
]
# placed at 22:00 in New York on 1 March: that is 2 March in UTC
SHIPPED = [
    record("ord-1", 1, "OrderPlaced", "2024-03-01T22:00:00-05:00", customer_id="cus-1", gift=True),
    record("ord-1", 2, "ItemAdded", "2024-03-02T03:10:00Z", sku="MUG", quantity=2, unit_price=12.5, weight_kg=0.75),
    record("ord-1", 3, "ItemAdded", "2024-03-02T03:20:00Z", sku="LAMP", quantity=1, unit_price=45, weight_kg=2.25),
    record("ord-1", 4, "OrderPaid", "2024-03-02T04:31:00Z", amount=70.00, paid_at="2024-03-02T04:30:00Z"),
    record("ord-1", 5, "OrderShipped", "2024-03-05T09:00:00Z", shipped_on="2024-03-05"),
]
CANCELLED = [
    record("ord-2", 1, "OrderPlaced", "2024-03-02T10:00:00Z", customer_id="cus-1"),
    record("ord-2", 2, "ItemAdded", "2024-03-02T10:05:00+09:00", sku="TEE", quantity=3, unit_price=19.99,
           weight_kg=0.25),
    record("ord-2", 3, "OrderCancelled", "2024-03-02T11:00:00Z", reason="changed my mind"),
]


def test_clean_histories_give_the_expected_tables():
    # the history in two batches, each order's messages split and reversed: the result is the in-order one
    entries = batches(CANCELLED[::-1] + SHIPPED[3:] + CUSTOMER[1:], SHIPPED[:3][::-1] + CUSTOMER[:1])
    model = project(entries)
    assert model.errors == [] and violations(model) == []
    placed_at = datetime(2024, 3, 2, 3, 0, tzinfo=UTC)
    assert table(model, "orders") == [
        {"order_id": "ord-1", "customer_id": "cus-1", "status": "shipped", "placed_on": date(2024, 3, 2),
         "placed_at": placed_at, "item_count": 3, "total": Decimal("70.00"), "weight_kg": 3.75, "gift": True,
         "paid_at": datetime(2024, 3, 2, 4, 30, tzinfo=UTC), "hours_to_pay": 1.5, "shipped_on": date(2024, 3, 5),
         "days_to_ship": 3, "cancel_reason": None, "version": 5},
        {"order_id": "ord-2", "customer_id": "cus-1", "status": "cancelled", "placed_on": date(2024, 3, 2),
         "placed_at": datetime(2024, 3, 2, 10, 0, tzinfo=UTC), "item_count": 3, "total": Decimal("59.97"),
         "weight_kg": 0.75, "gift": False, "paid_at": None, "hours_to_pay": None, "shipped_on": None,
         "days_to_ship": None, "cancel_reason": "changed my mind", "version": 3},
    ]
    items = table(model, "order_items")
    assert [(r["order_id"], r["line_no"], r["sku"], r["line_total"]) for r in items] == [
        ("ord-1", 1, "MUG", Decimal("25.00")), ("ord-1", 2, "LAMP", Decimal("45.00")),
        ("ord-2", 1, "TEE", Decimal("59.97"))]
    assert items[2]["added_at"] == datetime(2024, 3, 2, 1, 5, tzinfo=UTC)  # +09:00 -> UTC
    assert table(model, "customers") == [
        {"customer_id": "cus-1", "name": "Ada", "email": "ada@example.com", "tier": "gold",
         "joined_on": date(2024, 3, 2), "marketing_opt_in": True, "version": 3}]

    # shop_daily, computed here in plain Python: every counter on the UTC day its event happened
    expected: dict[date, Counter] = {}
    for r in SHIPPED + CANCELLED + CUSTOMER:
        p, event_type, day = r["payload"], r["type"], utc_day(r["occurred_at"])
        if event_type == "OrderPlaced":
            expected.setdefault(day, Counter()).update(orders_placed=1)
        elif event_type == "ItemAdded":
            expected.setdefault(day, Counter()).update(items=p["quantity"], weight_kg=p["quantity"] * p["weight_kg"])
        elif event_type == "OrderPaid":
            expected.setdefault(utc_day(p["paid_at"]), Counter()).update(orders_paid=1, revenue=Decimal(p["amount"]))
        elif event_type == "OrderShipped":
            expected.setdefault(date.fromisoformat(p["shipped_on"]), Counter()).update(orders_shipped=1)
        elif event_type == "OrderCancelled":
            expected.setdefault(day, Counter()).update(orders_cancelled=1)
        elif event_type == "CustomerRegistered":
            expected.setdefault(day, Counter()).update(signups=1)
    zero = {"orders_placed": 0, "items": 0, "weight_kg": 0.0, "orders_paid": 0, "revenue": Decimal("0.00"),
            "orders_shipped": 0, "orders_cancelled": 0, "signups": 0}
    assert sorted(expected) == [date(2024, 3, 2), date(2024, 3, 5)]  # nothing on 1 March in UTC
    assert table(model, "shop_daily") == [{"day": d, **zero, **expected[d]} for d in sorted(expected)]
    assert table(model, "daily_order_state") == [
        {"order_id": "ord-1", "placed_at": placed_at, "status": "shipped", "total": Decimal("70.00")},
        {"order_id": "ord-2", "placed_at": datetime(2024, 3, 2, 10, 0, tzinfo=UTC), "status": "cancelled",
         "total": Decimal("59.97")}]
    assert sum(r["line_total"] for r in items if r["order_id"] == "ord-1") == table(model, "orders")[0]["total"]


def test_the_engines_replay_kit_agrees_with_the_model_and_keeps_the_types():
    result = replay(ORDERS, SHIPPED, now=datetime(2024, 3, 6, tzinfo=UTC))
    assert result.errors == [] and result.counts["applied"] == 5
    (row,) = result.tables["orders"]
    assert row == table(project(batches(SHIPPED)), "orders")[0]
    assert [type(row[c]) for c in ("placed_on", "placed_at", "total", "weight_kg", "gift", "item_count",
                                   "hours_to_pay", "days_to_ship", "version")] == [
        date, datetime, Decimal, float, bool, int, float, int, int]
    assert row["placed_at"].tzinfo == UTC


def test_business_refusals_park_orders_and_skip_elsewhere():
    refused = [
        # paying a cancelled order: orders parks the stream (the shipment waits behind it)
        record("ord-3", 1, "OrderPlaced", "2024-03-02T10:00:00Z", customer_id="cus-1"),
        record("ord-3", 2, "ItemAdded", "2024-03-02T10:01:00Z", sku="MUG", quantity=1, unit_price=5, weight_kg=1),
        record("ord-3", 3, "OrderCancelled", "2024-03-02T10:02:00Z", reason="too slow"),
        record("ord-3", 4, "OrderPaid", "2024-03-02T10:03:00Z", amount=5, paid_at="2024-03-02T10:03:00Z"),
        record("ord-3", 5, "OrderShipped", "2024-03-02T10:04:00Z", shipped_on="2024-03-03"),
        # shipping an unpaid order
        record("ord-4", 1, "OrderPlaced", "2024-03-02T10:00:00Z", customer_id="cus-1"),
        record("ord-4", 2, "OrderShipped", "2024-03-02T10:04:00Z", shipped_on="2024-03-03"),
        # a payment that does not match the order's total
        record("ord-5", 1, "OrderPlaced", "2024-03-02T10:00:00Z", customer_id="cus-1"),
        record("ord-5", 2, "ItemAdded", "2024-03-02T10:01:00Z", sku="MUG", quantity=2, unit_price=5, weight_kg=1),
        record("ord-5", 3, "OrderPaid", "2024-03-02T10:03:00Z", amount=5, paid_at="2024-03-02T10:03:00Z"),
        # an unknown tier
        record("cus-2", 1, "CustomerRegistered", "2024-03-02T10:00:00Z", name="Bob", email="bob@example.com",
               tier="platinum"),
        record("cus-2", 2, "OptedIn", "2024-03-02T10:01:00Z"),
    ]
    model = project(batches(refused))
    assert sorted(reject_errors(model, "orders")) == [("ord-3", 4), ("ord-4", 2), ("ord-5", 3)]
    assert sorted(reject_errors(model, "shop_daily")) == [("cus-2", 1), ("ord-3", 4), ("ord-3", 5), ("ord-4", 2),
                                                          ("ord-5", 3)]
    assert sorted(reject_errors(model, "customers")) == [("cus-2", 1), ("cus-2", 2)]
    assert all(e["error_class"] != "bug" for e in model.errors)
    parked = {w["stream_id"]: (w["last_seq"], w["pending_count"]) for w in run_model(batches(refused), SHOP_VIEWS)[
        "watermarks"] if w["view"] == "orders" and w["parked"]}
    assert parked == {"ord-3": (3, 2), "ord-4": (1, 1), "ord-5": (2, 1)}
    assert [r["status"] for r in table(model, "orders")] == ["cancelled", "placed", "placed"]
    assert table(model, "customers") == [] and violations(model) == []


@pytest.mark.parametrize("event", [*SHIPPED, *CANCELLED, *CUSTOMER], ids=lambda r: f"{r['stream_id']}-{r['seq']}")
def test_every_poison_is_refused_never_a_bug(event):
    history = {"ord-1": SHIPPED, "ord-2": CANCELLED, "cus-1": CUSTOMER}[event["stream_id"]]
    for change in poison_changes(event["type"]):
        bad = [poisoned(r, change) if r is event else r for r in history]
        model = project(batches(bad))
        refusals = {(e["view"], e["seq"]) for e in model.errors if e["error_class"] == "reject"}
        assert refusals and all(e["error_class"] == "reject" for e in model.errors), change
        assert min(seq for _, seq in refusals) == event["seq"], change
        assert violations(model) == []


# ----------------------------------------------------------------------------- properties

@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shop_scenarios())
def test_conservation_and_no_bugs(entries):
    out = run_model(entries, SHOP_VIEWS)
    assert_conserved(out, SHOP_VIEWS)
    assert not [e for e in out["errors"] if e.get("error_class") == "bug"]
    for w in out["watermarks"]:
        assert (w["blocked_at"] is None) == (w["pending_count"] == 0 or w["parked"])


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.booleans())
def test_batch_split_invariance(data, conflicts):
    entries = data.draw(shop_scenarios(allow_timeouts=False, allow_conflicts=conflicts))
    # with conflicts, "keep the first received" makes arrival order matter, so only re-split then
    resplit_entries = data.draw(resplit(entries, shuffle=not conflicts))
    first, second = (projected(run_model(e, SHOP_VIEWS)) for e in (entries, resplit_entries))
    # shop_daily.weight_kg is compared exactly too: sums of quarter kilos do not depend on the order
    assert first == second and first["gaps"] == []


def projected(out: dict) -> dict:
    """What must not depend on the batch split: the view tables, each stream's progress, the gaps."""
    progress = [(w["view"], w["stream_id"], w["last_seq"], w["pending_count"], w["parked"]) for w in out["watermarks"]]
    return {**{name: out[name] for name in SHOP_TABLES}, "progress": progress, "gaps": out["gaps"]}


# ----------------------------------------------------------------------------- the generator

TROUBLED = GeneratorConfig(events=3000, streams=120, batches=6, disorder=0.1, duplicates=0.05, gaps=0.01,
                           poison=0.03, seed=11)
CLEAN = GeneratorConfig(events=3000, streams=120, batches=6, disorder=0.2, duplicates=0, gaps=0, poison=0, seed=3)


def generated(tmp_path: Path, config: GeneratorConfig, name: str) -> list[Entry]:
    paths = generate(tmp_path / name, config)
    assert [p.name for p in paths] == [f"batch-{i:05d}.jsonl" for i in range(1, config.batches + 1)]
    return [Entry("batch", p.stem, T0 + i, lines=p.read_text()) for i, p in enumerate(paths)]


def test_generator_is_deterministic(tmp_path):
    first = generated(tmp_path, TROUBLED, "a")
    assert first == generated(tmp_path, TROUBLED, "b")
    other = generated(tmp_path, dataclasses.replace(TROUBLED, seed=12), "c")
    assert [e.lines for e in first] != [e.lines for e in other]


def test_generator_writes_the_promised_trouble(tmp_path):
    entries = generated(tmp_path, TROUBLED, "t")
    records, malformed = [], 0
    for entry in entries:
        for line in entry.lines.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                malformed += 1
    assert malformed > 0
    copies = Counter((r["stream_id"], r["seq"]) for r in records)
    contents: dict[tuple, set] = {}
    for r in records:
        contents.setdefault((r["stream_id"], r["seq"]), set()).add(json.dumps(r, sort_keys=True))
    assert sum(n > 1 for n in copies.values()) > 0  # duplicates
    assert sum(len(c) > 1 for c in contents.values()) > 0  # conflicts: a second copy that differs
    seqs: dict[str, list[int]] = {}
    for r in records:
        seqs.setdefault(r["stream_id"], []).append(r["seq"])
    assert any(set(s) != set(range(1, max(s) + 1)) for s in seqs.values())  # gaps
    assert any(b < a for s in seqs.values() for a, b in zip(s, s[1:]))  # disorder
    assert {r["stream_type"] for r in records} == {"order", "customer"}
    customers = {r["stream_id"] for r in records if r["stream_type"] == "customer"}
    placed_by = {r["payload"]["customer_id"] for r in records if r["type"] == "OrderPlaced"
                 and isinstance(r["payload"], dict) and isinstance(r["payload"].get("customer_id"), str)}
    assert placed_by and placed_by <= customers  # every order is placed by a generated customer
    model = project(entries + [Entry("tick", "late", T0 + 3600)])
    kinds = Counter((e["kind"], e.get("error_class")) for e in model.errors)
    assert kinds[("handler_error", "reject")] > 0 and kinds[("conflict", None)] > 0
    assert kinds[("malformed", None)] == malformed and kinds[("handler_error", "bug")] == 0
    assert model.gaps and any(w.parked for streams in model.streams.values() for w in streams.values())
    assert_conserved(model.result(), SHOP_VIEWS)


def test_generator_without_trouble_is_all_applied(tmp_path):
    model = project(generated(tmp_path, CLEAN, "clean"))
    assert model.errors == [] and model.gaps == []
    assert all(not s.pending for streams in model.streams.values() for s in streams.values())
    assert violations(model) == []
    orders, items = table(model, "orders"), table(model, "order_items")
    assert {r["status"] for r in orders} >= {"shipped", "cancelled"}
    for order in orders:
        lines = [r for r in items if r["order_id"] == order["order_id"]]
        assert sum(r["line_total"] for r in lines) == order["total"]
        assert sum(r["quantity"] for r in lines) == order["item_count"]
    daily = table(model, "shop_daily")
    assert sum(r["orders_placed"] for r in daily) == len(orders)
    assert sum(r["signups"] for r in daily) == len(table(model, "customers")) == CLEAN.streams // 5
    assert sum(r["revenue"] for r in daily) == sum(r["total"] for r in orders if r["paid_at"] is not None)
    assert sum(r["weight_kg"] for r in daily) == sum(r["weight_kg"] for r in orders)
