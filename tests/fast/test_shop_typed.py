"""The shop's views in the typed style (shop/views/: msgspec event classes, constraints on the types)
project and refuse exactly what the views did before the rewrite (tests/shop_classic/, frozen, with the
hand-written payload readers): the same tables, the same error rows, the same watermarks, on histories
whose payloads are good or bad in every way a typed decode and a hand reader might judge apart.

msgspec, unlike the readers, takes a JSON string for a Decimal ("12.50", "NaN"), extra fields, RFC 3339
times and dates (naive ones too) and blank strings; JSON numbers reach it in any form (7E+1, 12.50,
-0.0, 1E+400). The histories are written as JSON lines so that each of these reaches both views as is.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inorder import replay
from shop.views.customers import CUSTOMERS
from shop.views.order_items import ORDER_ITEMS
from shop.views.orders import ORDERS
from shop.views.shop_daily import SHOP_DAILY
from tests.profiles import examples
from tests.shop_strategies import START, _render  # instants written with Z, an offset or none

with warnings.catch_warnings():  # the frozen views are declared the older way, which warns
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.shop_classic.customers import CUSTOMERS as CLASSIC_CUSTOMERS
    from tests.shop_classic.order_items import ORDER_ITEMS as CLASSIC_ORDER_ITEMS
    from tests.shop_classic.orders import ORDERS as CLASSIC_ORDERS
    from tests.shop_classic.shop_daily import SHOP_DAILY as CLASSIC_SHOP_DAILY

UTC = timezone.utc


class _Absent:
    """A field dropped (its repr names it, so that test ids are the same in every process)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
PAIRS = ((ORDERS, CLASSIC_ORDERS), (ORDER_ITEMS, CLASSIC_ORDER_ITEMS), (CUSTOMERS, CLASSIC_CUSTOMERS),
         (SHOP_DAILY, CLASSIC_SHOP_DAILY))
NOW = datetime(2030, 1, 1, tzinfo=UTC)
# Decimals go out as the JSON numbers they are, in their own form (7E+1 stays 7E+1)
LINE = msgspec.json.Encoder(decimal_format="number")

# -- values: every field may get any of them -------------------------------------------------------

BLANKS = ["", " ", "\t\n", "\u00a0", "\u3000", "\u2028", "\x1c"]  # whitespace to str.strip and to `\S`
NOT_BLANK = ["\u200b", "x", " x ", "é"]  # a zero-width space is no whitespace
NUMBERS_AS_TEXT = ["12.50", "0.25", "5", "NaN", "sNaN", "Infinity", "-Infinity", " 5 ", "1_000", "1e2"]
TIMES = ["2024-03-02T04:30:00Z", "2024-03-02T04:30:00", "2024-03-02 04:30", "2024-03-02T04:30:00+09:00",
         "2024-03-02", "20240302T043000", "2024-03-02T04:30:00.123456789Z", "2024-03-02T04:30Z",
         "9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "soon", "yesterday", "2024-13-01T00:00:00Z"]
DATES = ["2024-03-05", "20240305", "2024-W10-2", "2024-065", "2024-03-05T00:00:00", "2024-3-5", "someday",
         "2024-02-30", "0001-01-01", "9999-12-31"]
TIER_WORDS = ["bronze", "silver", "gold", "Gold", "platinum", " gold"]
EMAILS = ["ada@example.com", "@example.com", "ada@", "ada@example", "ada@.com", "ada@com.", "ada@.example.",
          "a@b.c", "a@@b.c", "a@.b.", "a@..", "a b@c d.e", "x@y.z\n", "\n@a.b", "a@\n.\n", "nobody", ".@x.y"]
DECIMALS = [Decimal(text) for text in (
    "0", "-0.0", "0.00", "0.001", "0.005", "0.01", "0.1", "0.25", "0.3", "0.75", "1", "1.0", "1.000", "12.5",
    "12.50", "12.505", "1E+1", "2.5E+1", "7E+1", "99999.99", "99999.990", "100000.00", "1000", "1000.00",
    "1000.25", "0.2500000000000000000000000000001", "0.25000000000000000000000000000000001", "1E+400",
    "1E-400", "-1", "-0.01", "9999999999.99", "10000000000.00", "3.14159")]
INTEGERS = [0, 1, 2, 3, -1, 999, 1000, 1001, 2 ** 63, Decimal(10 ** 30)]  # the last: a JSON integer too big for int64
OTHERS = [None, True, False, [], [1], {}, {"amount": 1}, 1.5]
ANY_VALUE = st.one_of(*(st.sampled_from(pool) for pool in (
    BLANKS + NOT_BLANK, NUMBERS_AS_TEXT, TIMES, DATES, TIER_WORDS + EMAILS, DECIMALS, INTEGERS, OTHERS)),
    st.text(max_size=4))


def _money(draw, cents: int) -> Decimal | int:
    """An amount of cents as a JSON number in one of its forms: 70.00, 7E+1, 70, 70.0000, or now and then
    a tenth of a cent off (70.001)."""
    value = Decimal(cents).scaleb(-2)
    form = draw(st.sampled_from(["plain", "normalised", "whole", "padded"] * 4 + ["off"]))
    if form == "off":
        return value + Decimal("0.001")
    if form == "normalised":
        return value.normalize()
    if form == "whole" and cents % 100 == 0:
        return cents // 100
    return value.quantize(Decimal("0.0001")) if form == "padded" else value


def _text(draw) -> str:
    """Mostly a plain word; one time in sixteen something odd: blank or not, any characters."""
    if draw(st.integers(0, 15)):
        return draw(st.sampled_from(["ada", "MUG", "changed my mind"]))
    return draw(st.sampled_from(BLANKS + NOT_BLANK) | st.text(max_size=3))


def _tier(draw) -> str:
    return draw(st.sampled_from(TIER_WORDS[:3] * 12 + TIER_WORDS[3:]))


def _email(draw) -> str:
    """Mostly a plain address; one time in four an odd one."""
    if draw(st.integers(0, 3)):
        return f"{draw(st.sampled_from(['ada', 'bob']))}@example.com"
    return draw(st.sampled_from(EMAILS) | st.text(alphabet="a.@ \n", max_size=6))


class _Stream:
    """One stream's records in seq order. In a stream that spoils its records (one in two), each may be
    spoiled: a field changed, dropped or added, the payload not an object, occurred_at missing or odd."""

    def __init__(self, draw, stream_id: str, stream_type: str) -> None:
        self.draw, self.stream_id, self.stream_type = draw, stream_id, stream_type
        self.spoils = draw(st.booleans())
        self.now = START + timedelta(minutes=draw(st.integers(0, 600)))
        self.records: list[dict] = []

    def add(self, event_type: str, payload: dict) -> bool:
        """Add the next record; whether its payload and time are still as given (extra fields aside)."""
        draw = self.draw
        self.now += timedelta(minutes=draw(st.sampled_from([1, 30, 240, 1440])))
        record = {"stream_id": self.stream_id, "stream_type": self.stream_type, "seq": len(self.records) + 1,
                  "type": event_type, "payload": dict(payload), "occurred_at": _render(draw, self.now)}
        self.records.append(record)
        return not self.spoils or self._spoil(record)

    def _spoil(self, record: dict) -> bool:
        """Spoil the record perhaps; whether its payload and time are still as given (extra fields aside)."""
        draw, given, payload = self.draw, dict(record["payload"]), record["payload"]
        for name in list(payload):
            spoil = draw(st.integers(0, 11))
            if spoil == 0:
                payload[name] = draw(ANY_VALUE)
            elif spoil == 1:
                del payload[name]
            elif spoil == 2 and type(payload[name]) in (int, Decimal):
                payload[name] = str(payload[name])  # the number as a JSON string
        if draw(st.integers(0, 9)) == 0:
            payload[draw(st.sampled_from(["note", "amount", "tier", "resent"]))] = draw(ANY_VALUE)
        shape = draw(st.integers(0, 29))
        if shape == 0:
            record["payload"] = draw(st.sampled_from([None, [], ["not", "an", "object"], "x", 5, True]))
        elif shape == 1:
            del record["payload"]  # arrives as {}
        elif shape == 2:
            del record["occurred_at"]
        elif shape == 3:
            record["occurred_at"] = draw(st.sampled_from(TIMES + ["", " ", "2024-03-02T04:30:00+25:00"]))
        return shape > 3 and all(payload.get(name, ABSENT) == value for name, value in given.items())


def _customer(draw, customer_id: str, length: int) -> list[dict]:
    stream = _Stream(draw, customer_id, "customer")
    stream.add("CustomerRegistered", {"name": _text(draw), "email": _email(draw), "tier": _tier(draw)})
    for _ in range(length - 1):
        event_type = draw(st.sampled_from(["TierChanged", "OptedIn", "OptedOut"] * 3 + ["CustomerRegistered"]))
        payload = {"tier": _tier(draw)} if event_type == "TierChanged" else {}
        if event_type == "CustomerRegistered":  # a second registration
            payload = {"name": _text(draw), "email": _email(draw), "tier": "gold"}
        stream.add(event_type, payload)
    return stream.records


ORDER_EVENTS = ("OrderPlaced", "ItemAdded", "OrderPaid", "OrderShipped", "OrderCancelled", "Gift")
# what an order does next in each status, mostly; now and then anything (refused, or an unknown type)
NEXT = {"new": ("OrderPlaced",), "placed": ("ItemAdded", "ItemAdded", "OrderPaid", "OrderCancelled"),
        "paid": ("OrderShipped", "OrderShipped", "OrderCancelled"), "done": ORDER_EVENTS}


def _order(draw, order_id: str, length: int) -> list[dict]:
    stream = _Stream(draw, order_id, "order")
    status, cents, item_cents = "new", 0, 0
    for _ in range(length):
        usual = NEXT[status] if status != "placed" or cents else ("ItemAdded",)
        event_type = draw(st.sampled_from(usual if draw(st.integers(0, 9)) else ORDER_EVENTS))
        if event_type == "OrderPlaced":
            payload = {"customer_id": _text(draw)}
            if draw(st.booleans()):
                payload["gift"] = draw(st.booleans())
            status = "placed" if status == "new" else status
        elif event_type == "ItemAdded":
            unit, quantity = draw(st.integers(1, 20_000)), draw(st.integers(1, 5))
            weight = Decimal(draw(st.integers(0, 40))) / 4 if draw(st.integers(0, 7)) else \
                Decimal(draw(st.integers(0, 4000))) / 1000  # mostly whole quarters
            payload = {"sku": _text(draw), "quantity": quantity, "unit_price": _money(draw, unit),
                       "weight_kg": weight}
            item_cents = quantity * unit
        elif event_type == "OrderPaid":
            paid_at = stream.now + timedelta(minutes=draw(st.sampled_from([-60 * 24 * 3, 1, 1, 1])))
            payload = {"amount": _money(draw, cents or 1), "paid_at": _render(draw, paid_at)}
            status = "paid" if status == "placed" and cents else status
        elif event_type == "OrderShipped":
            shipped_on = stream.now + timedelta(days=draw(st.integers(-3, 3)))
            payload = {"shipped_on": shipped_on.date().isoformat()}
            status = "done" if status == "paid" else status
        elif event_type == "OrderCancelled":
            payload = {"reason": _text(draw)}
            status = "done" if status in ("placed", "paid") else status
        else:
            payload = {"note": "an event type no view handles"}
        if stream.add(event_type, payload) and event_type == "ItemAdded" and status == "placed":
            cents += item_cents  # the payment that matches counts only the items sent as drawn
    return stream.records


@st.composite
def shop_lines(draw) -> list[bytes]:
    """Two customers' and three orders' records, as JSON lines."""
    records = []
    for i in range(2):
        records += _customer(draw, f"cus-{i + 1}", draw(st.integers(1, 4)))
    for i in range(3):
        records += _order(draw, f"ord-{i + 1}", draw(st.integers(1, 8)))
    return [LINE.encode(record) for record in records]


def outcome(view, lines: list[bytes]) -> dict:
    """What a replay of the lines leaves: tables, error rows, watermarks and outcome counts."""
    result = replay(view, lines, now=NOW)
    errors = [(e["stream_id"], e["seq"], e["kind"], e.get("error_class")) for e in result.errors]
    return {"tables": result.tables, "errors": errors, "watermarks": result.watermarks, "counts": result.counts}


def assert_same(lines: list[bytes]) -> None:
    for typed, classic in PAIRS:
        assert outcome(typed, lines) == outcome(classic, lines), typed.name


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shop_lines())
def test_the_typed_views_project_and_refuse_what_the_classic_ones_did(lines):
    assert_same(lines)


# -- the corners, one at a time, with what both views must decide ------------------------------------------

CUSTOMER = [
    {"type": "CustomerRegistered", "payload": {"name": "Ada", "email": "ada@example.com", "tier": "silver"}},
    {"type": "TierChanged", "payload": {"tier": "gold"}},
    {"type": "OptedIn", "payload": {}},
]
ORDER = [
    {"type": "OrderPlaced", "payload": {"customer_id": "cus-1", "gift": True}},
    {"type": "ItemAdded", "payload": {"sku": "MUG", "quantity": 2, "unit_price": Decimal("12.50"),
                                      "weight_kg": Decimal("0.75")}},
    {"type": "OrderPaid", "payload": {"amount": Decimal("25.00"), "paid_at": "2024-03-02T04:30:00Z"}},
    {"type": "OrderShipped", "payload": {"shipped_on": "2024-03-05"}},
]
# (event type, field, value (ABSENT: dropped), refused?)
CORNERS = [
    ("ItemAdded", "unit_price", "12.50", True), ("ItemAdded", "unit_price", "NaN", True),
    ("ItemAdded", "weight_kg", "0.75", True), ("ItemAdded", "weight_kg", "sNaN", True),
    ("OrderPaid", "amount", "25.00", True), ("OrderPaid", "amount", "Infinity", True),
    ("ItemAdded", "unit_price", Decimal("12.5"), False), ("ItemAdded", "unit_price", Decimal("1.25E+1"), False),
    ("ItemAdded", "unit_price", Decimal("12.505"), True), ("ItemAdded", "unit_price", -1, True),
    ("ItemAdded", "unit_price", Decimal("1E+400"), True), ("ItemAdded", "unit_price", Decimal("1E-400"), True),
    ("ItemAdded", "weight_kg", Decimal("0.3"), True), ("ItemAdded", "weight_kg", Decimal("-0.0"), False),
    ("ItemAdded", "weight_kg", Decimal("0.7500000000000000000000000000001"), False),  # 28 digits: rounds to quarters
    ("ItemAdded", "quantity", Decimal("2.0"), True), ("ItemAdded", "quantity", True, True),
    ("ItemAdded", "quantity", 1001, True), ("ItemAdded", "quantity", ABSENT, True),
    ("ItemAdded", "sku", "", True), ("ItemAdded", "sku", "\u00a0", True), ("ItemAdded", "sku", "\u200b", False),
    ("OrderPaid", "amount", 25, False), ("OrderPaid", "amount", Decimal("2.5E+1"), False),
    ("OrderPaid", "paid_at", "2024-03-02T04:30:00", False), ("OrderPaid", "paid_at", "2024-03-02 04:30", False),
    ("OrderPaid", "paid_at", "20240302T043000", False), ("OrderPaid", "paid_at", "2024-03-02", True),  # before placed
    ("OrderPaid", "paid_at", "9999-12-31T23:59:59-05:00", True), ("OrderPaid", "paid_at", "", True),
    ("OrderShipped", "shipped_on", "2024-W10-2", False), ("OrderShipped", "shipped_on", "20240305", False),
    ("OrderShipped", "shipped_on", "2024-03-05T00:00:00", True), ("OrderShipped", "shipped_on", 20240305, True),
    ("OrderPlaced", "gift", None, True), ("OrderPlaced", "gift", "yes", True), ("OrderPlaced", "gift", ABSENT, False),
    ("OrderPlaced", "customer_id", " \t", True), ("OrderPlaced", "customer_id", 42, True),
    ("OrderPlaced", "note", "an extra field", False),
    ("CustomerRegistered", "email", "a@b", True), ("CustomerRegistered", "email", "a@.b.", True),
    ("CustomerRegistered", "email", "a@b..", True), ("CustomerRegistered", "email", "a@b.c.", False),
    ("CustomerRegistered", "email", " @ . ", False),
    ("CustomerRegistered", "tier", "Gold", True), ("CustomerRegistered", "name", "\u3000", True),
    ("TierChanged", "tier", None, True), ("OptedIn", "resent", True, False),
]


def _history(stream_id: str, stream_type: str, steps: list[dict], at: str) -> list[dict]:
    start = datetime.fromisoformat(at)
    return [{"stream_id": stream_id, "stream_type": stream_type, "seq": seq, **copy.deepcopy(step),
             "occurred_at": (start + timedelta(hours=seq)).isoformat()} for seq, step in enumerate(steps, 1)]


def _spoiled(event_type: str, change) -> list[bytes]:
    """The clean customer and order histories, the one message of `event_type` changed by `change`."""
    records = (_history("cus-1", "customer", CUSTOMER, "2024-03-01T22:00:00-05:00")
               + _history("ord-1", "order", ORDER, "2024-03-02T00:00:00+00:00"))
    for record in records:
        if record["type"] == event_type:
            change(record)
    return [LINE.encode(record) for record in records]


def _refused(lines: list[bytes]) -> Counter:
    return Counter(e["kind"] for typed, _ in PAIRS for e in replay(typed, lines, now=NOW).errors)


def test_the_clean_histories_are_all_applied():
    assert _refused(_spoiled("none", lambda record: None)) == Counter()


@pytest.mark.parametrize("event_type, field, value, refused", CORNERS, ids=lambda v: repr(v)[:30])
def test_a_corner_is_decided_as_before(event_type, field, value, refused):
    def change(record: dict) -> None:
        if value is ABSENT:
            del record["payload"][field]
        else:
            record["payload"][field] = value

    lines = _spoiled(event_type, change)
    assert_same(lines)
    assert bool(_refused(lines)) == refused
    assert set(_refused(lines)) <= {"handler_error"}


@pytest.mark.parametrize("payload", [None, [], "x", 5, ABSENT], ids=repr)
@pytest.mark.parametrize("event_type", ["OrderPlaced", "OrderPaid", "CustomerRegistered", "OptedIn"])
def test_a_payload_that_is_no_object_is_decided_as_before(event_type, payload):
    def change(record: dict) -> None:
        if payload is ABSENT:
            del record["payload"]  # arrives as {}: fine for OptedIn only
        else:
            record["payload"] = payload

    lines = _spoiled(event_type, change)
    assert_same(lines)
    assert bool(_refused(lines)) == (payload is not ABSENT or event_type != "OptedIn")


@pytest.mark.parametrize("occurred_at", [None, "", "yesterday", "2024-03-02", "2024-03-02T04:30:00",
                                         "9999-12-31T23:59:59-05:00"])
def test_an_odd_occurred_at_is_decided_as_before(occurred_at):
    def change(record: dict) -> None:
        record["occurred_at"] = occurred_at

    for event_type in ("OrderPlaced", "ItemAdded", "CustomerRegistered", "TierChanged"):
        assert_same(_spoiled(event_type, change))
