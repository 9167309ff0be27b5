"""Typed payloads against an independent statement of their rules: `Check`'s bounds, places and JSON numbers,
the refusal a handler's caller gets, which payloads the views share, and which declarations are refused.

Each example declares its event class inside the test, so the decoder, the generated checker and the
sharing rule are built by the code under test every time (nothing is built once at import)."""

from __future__ import annotations

import dataclasses
import re
import types
from decimal import Decimal
from typing import Annotated, Optional

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inorder import Check, Event, Reject
from pipelines.events import PayloadDecoder, TypedHandler, payload_checker
from pipelines.message import Message
from tests.profiles import examples

OPERATORS = {"gt": (">", lambda v, b: v > b), "ge": (">=", lambda v, b: v >= b),
             "lt": ("<", lambda v, b: v < b), "le": ("<=", lambda v, b: v <= b)}
NUMBERS = st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False)
BOUNDS = st.integers(-10_000, 10_000).map(lambda n: Decimal(n).scaleb(-1))
BOUND_SAID = re.compile(r"(must be [<>]=? )(\S+)(, got )")


def same_bound_spelling(said: str | None, want: str | None) -> bool:
    """`said == want`, but for how the bound is spelled: typing caches `Annotated[Decimal, Check(gt=…)]` by
    equality, so a class declared with gt=0.0 may carry an earlier class's equal Check(gt=0)."""
    if said is None or want is None:
        return said == want
    a, b = BOUND_SAID.search(said), BOUND_SAID.search(want)
    if not (a and b):
        return said == want
    return Decimal(a[2]) == Decimal(b[2]) and BOUND_SAID.sub(r"\1_\3", said) == BOUND_SAID.sub(r"\1_\3", want)


def expected_problem(value: Decimal, bounds: dict[str, Decimal], places: int | None) -> str | None:
    """The rule as docs/VIEWS.md states it: a finite number, each bound in the order gt, ge, lt, le, then at
    most `places` digits after the point that count (1.500 has one)."""
    if not value.is_finite():
        return f"must be a finite number, got {value}"
    for name in ("gt", "ge", "lt", "le"):
        if name in bounds:
            word, holds = OPERATORS[name]
            if not holds(value, bounds[name]):
                return f"must be {word} {bounds[name]}, got {value}"
    after_point = max(0, -value.normalize().as_tuple().exponent) if value else 0
    if places is not None and after_point > places:
        return f"must have at most {places} decimal places, got {value}"
    return None


def event(event_type: str, payload: str, seq: int = 1) -> Event:
    return Event("s-1", Message(seq=seq, entry_idx=1, line=seq, batch_id="b1", event_type=event_type, payload=payload,
                                occurred_at=None, event_id=None, stream_type="thing"))


def refusal(handler: TypedHandler, payload: str, event_type: str) -> str | None:
    """The Reject's text the handler's caller gets for this payload, or None when the handler ran."""
    try:
        handler(event(event_type, payload), tables=None)
    except Reject as exc:
        return str(exc)
    return None


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounds=st.dictionaries(st.sampled_from(list(OPERATORS)), BOUNDS, max_size=4),
       places=st.none() | st.integers(0, 3), value=NUMBERS | st.sampled_from([Decimal("NaN"), Decimal("Infinity")]),
       optional=st.booleans(), as_string=st.booleans())
def test_a_checked_decimal_is_refused_exactly_when_its_rule_says(bounds, places, value, optional, as_string):
    rule = Check(places=places, **bounds)
    field_type = Annotated[Decimal, rule] | None if optional else Annotated[Decimal, rule]
    paid = msgspec.defstruct("Paid", [("amount", field_type), ("note", str, "")])
    ran = []
    handler = TypedHandler(lambda payload, tables: ran.append(payload.amount), paid)
    sent = f'"{value}"' if as_string or not value.is_finite() else str(value)
    problem = expected_problem(value, bounds, places)
    said = refusal(handler, f'{{"amount": {sent}}}', "Paid")
    assert same_bound_spelling(said, None if problem is None else f"Paid: `amount` {problem}"), (said, problem)
    assert ran == ([] if problem else [value])
    if optional:
        assert refusal(handler, '{"amount": null}', "Paid") is None and ran[-1] is None  # a null keeps its rule


@settings(max_examples=examples(200), deadline=None)
@given(bound=st.integers(-50, 50), value=st.integers(-100, 100), as_float=st.booleans())
def test_int_and_float_fields_take_their_bounds_and_a_non_finite_float_is_refused(bound, value, as_float):
    kind = float if as_float else int
    reading = msgspec.defstruct("Reading", [("level", Annotated[kind, Check(ge=bound)])])
    handler = TypedHandler(lambda payload, tables: None, reading)
    sent = f"{value}.0" if as_float else str(value)
    want = None if value >= bound else f"Reading: `level` must be >= {bound}, got {kind(value)}"
    assert refusal(handler, f'{{"level": {sent}}}', "Reading") == want


@pytest.mark.parametrize("sent, refused", [("12.50", False), ('"12.50"', True), ("null", False)])
def test_json_number_refuses_a_string_only_where_it_is_asked(sent, refused):
    strict = msgspec.defstruct("Strict", [("amount", Optional[Annotated[Decimal, Check(json_number=True)]])])
    lenient = msgspec.defstruct("Lenient", [("amount", Optional[Annotated[Decimal, Check()]])])
    assert refusal(TypedHandler(lambda p, t: None, strict), f'{{"amount": {sent}}}', "Strict") == \
        ("Strict: `amount` must be a JSON number, got a string" if refused else None)
    assert refusal(TypedHandler(lambda p, t: None, lenient), f'{{"amount": {sent}}}', "Lenient") is None


def test_a_payload_that_does_not_fit_names_the_class_and_the_wire_name_when_they_differ():
    opened = msgspec.defstruct("Opened", [("owner", str)])
    handler = TypedHandler(lambda p, t: None, opened)
    assert refusal(handler, "{}", "Opened") == "Opened: Object missing required field `owner`"
    assert refusal(handler, '{"owner": 3}', "AccountOpened") == \
        "AccountOpened (Opened): Expected `str`, got `int` - at `$.owner`"
    assert refusal(handler, "not json", "Opened").startswith("Opened: JSON is malformed")


def test_the_envelope_is_passed_to_a_handler_that_takes_a_third_parameter():
    ping = msgspec.defstruct("Ping", [("n", int)])
    got = []
    TypedHandler(lambda payload, tables, envelope: got.append((payload.n, envelope.seq)), ping)(
        event("Ping", '{"n": 4}', seq=9), None)
    TypedHandler(lambda *args: got.append(len(args)), ping)(event("Ping", '{"n": 4}'), None)
    TypedHandler(lambda payload, tables: got.append(payload.n), ping)(event("Ping", '{"n": 5}'), None)
    assert got == [(4, 9), 3, 5]


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("field_type, sent, immutable", [
    (str, '"a"', True), (Decimal, "1.5", True), (tuple[int, ...], "[1]", True), (Optional[int], "1", True),
    (frozenset[str], '["a"]', True), (Annotated[int, Check(ge=0)], "1", True), (list[int], "[1]", False),
    (dict[str, int], '{"a": 1}', False), (tuple[list[int], ...], "[[1]]", False),
])
def test_only_a_frozen_class_of_immutable_fields_is_decoded_once_and_shared(frozen, field_type, sent, immutable):
    item = msgspec.defstruct("Item", [("value", field_type)], frozen=frozen)
    decoder, text = PayloadDecoder(item), f'{{"value": {sent}}}'
    first, second = decoder.decode(text), decoder.decode(text)
    assert first == second
    assert (first is second) == (frozen and immutable)


def test_a_frozen_dataclass_of_a_shareable_class_is_shared_and_the_memo_starts_again_when_full():
    inner = dataclasses.make_dataclass("Inner", [("n", int)], frozen=True)
    outer = dataclasses.make_dataclass("Outer", [("inner", inner), ("when", Optional[str], None)], frozen=True)

    decoder = PayloadDecoder(outer)
    first = decoder.decode('{"inner": {"n": 1}}')
    assert decoder.decode('{"inner": {"n": 1}}') is first
    for n in range(PayloadDecoder.MEMO_SIZE):
        decoder.decode(f'{{"inner": {{"n": {n + 2}}}}}')
    again = decoder.decode('{"inner": {"n": 1}}')
    assert again == first and again is not first  # the memo was full once, and started again


@pytest.mark.parametrize("field_type", [
    list[Annotated[Decimal, Check(gt=0)]],
    Optional[list[Annotated[int, Check(ge=0)]]],
    dict[str, Annotated[Decimal, Check(places=2)]],
])
def test_a_check_that_would_never_run_is_refused_at_declaration(field_type):
    box = msgspec.defstruct("Box", [("values", field_type)])
    with pytest.raises(TypeError, match=r"Box\.values: a Check inside .* is never run"):
        PayloadDecoder(box)


def test_a_check_on_a_nested_class_is_refused_from_the_outer_class():
    inner = msgspec.defstruct("Inner", [("amount", Annotated[Decimal, Check(gt=0)])])
    outer = msgspec.defstruct("Outer", [("inner", inner)])
    with pytest.raises(TypeError, match=r"Outer\.inner: a Check inside"):
        PayloadDecoder(outer)
    assert PayloadDecoder(inner).decode('{"amount": 1}').amount == 1


@pytest.mark.parametrize("bound", ["1", True, None.__class__])
def test_a_bound_that_is_not_a_number_is_refused(bound):
    with pytest.raises(TypeError, match="must be a number"):
        Check(gt=bound)


@settings(max_examples=examples(400), deadline=None)
@given(bounds=st.dictionaries(st.sampled_from(list(OPERATORS)), BOUNDS, max_size=4),
       places=st.none() | st.integers(0, 3),
       value=NUMBERS | st.sampled_from([Decimal("NaN"), Decimal("-Infinity"), Decimal("1.500"), Decimal("100"),
                                        Decimal("0.10"), Decimal("0E-9"), Decimal("-0.0050")]))
def test_a_check_says_the_problem_of_a_value_and_its_generated_checker_agrees(bounds, places, value):
    """`Check` itself (built here, not taken from typing's cache of an earlier equal `Annotated`), and the
    generated checker of a class of two checked fields: the first field that breaks its rule is named."""
    rule = Check(places=places, **bounds)
    want = expected_problem(value, bounds, places)
    assert same_bound_spelling(rule.problem(value), want)
    assert rule.problem(None) is None
    check = payload_checker((("first", rule), ("second", Check(ge=Decimal(0)))))
    for second, second_breaks in ((Decimal(1), False), (Decimal(-1), True)):
        found = check(types.SimpleNamespace(first=value, second=second))
        if want is not None:
            assert found is not None and found[0] == "first" and same_bound_spelling(found[1], want)
        else:
            assert found == (("second", "must be >= 0, got -1") if second_breaks else None)


def test_every_checked_field_of_a_class_is_checked_and_an_annotation_that_is_not_a_check_is_no_rule():
    pair = msgspec.defstruct("Pair", [("low", Annotated[Decimal, Check(ge=0)]), ("high", Annotated[int, "a doc", Check(le=9)]),
                                      ("note", Annotated[str, "a doc"], "")])
    handler = TypedHandler(lambda p, t: None, pair)
    assert same_bound_spelling(refusal(handler, '{"low": -1, "high": 3}', "Pair"), "Pair: `low` must be >= 0, got -1")
    assert same_bound_spelling(refusal(handler, '{"low": 1, "high": 10}', "Pair"), "Pair: `high` must be <= 9, got 10")
    assert refusal(handler, '{"low": 1, "high": 9, "note": "x"}', "Pair") is None


@pytest.mark.parametrize("field_type", [
    Annotated[list[Annotated[int, Check(ge=0)]], "a list of counts"],
    Optional[Annotated[list[Annotated[int, Check(ge=0)]], Check(ge=0)]],
])
def test_a_check_inside_an_annotated_field_is_refused_with_the_way_forward(field_type):
    box = msgspec.defstruct("Box", [("values", field_type)])
    with pytest.raises(TypeError) as raised:
        PayloadDecoder(box)
    assert str(raised.value).startswith("Box.values: a Check inside ") and str(raised.value).endswith(
        " is never run: put it on the field itself (or on the nested class's own field, registered as its own type)")


@pytest.mark.parametrize("checked", [False, True])
def test_a_class_that_refers_to_itself_is_decoded_and_a_check_its_children_would_skip_is_refused(checked):
    n_type = Annotated[int, Check(ge=0)] if checked else int
    node = msgspec.defstruct("Node", [("n", n_type), ("children", "list[Node]", [])], frozen=True)
    node.__annotations__["children"] = list[node]  # a class that refers to itself, resolved
    if checked:  # the children's `n` would be decoded and never checked
        with pytest.raises(TypeError, match=r"Node.children: a Check inside list\[.*Node\] is never run"):
            PayloadDecoder(node)
        return
    decoder = PayloadDecoder(node)
    assert decoder.decode('{"n": 1, "children": [{"n": 2, "children": [{"n": 3}]}]}').children[0].children[0].n == 3


@pytest.mark.parametrize("frozen_inner, shared", [(True, True), (False, False)])
def test_a_nested_class_is_shared_only_when_it_is_shareable_itself(frozen_inner, shared):
    inner = msgspec.defstruct("Inner", [("n", int)], frozen=frozen_inner)
    outer = msgspec.defstruct("Outer", [("inner", inner), ("tags", tuple[inner, ...], ())], frozen=True)
    decoder = PayloadDecoder(outer)
    assert (decoder.decode('{"inner": {"n": 1}}') is decoder.decode('{"inner": {"n": 1}}')) == shared


@pytest.mark.parametrize("frozen", [True, False])
def test_a_dataclass_is_shared_only_when_frozen(frozen):
    point = dataclasses.make_dataclass("Point", [("x", int), ("y", Optional[Decimal], None)], frozen=frozen)
    decoder = PayloadDecoder(point)
    assert (decoder.decode('{"x": 1}') is decoder.decode('{"x": 1}')) == frozen


@pytest.mark.parametrize("value, places, refused", [
    ("1.500", 1, False), ("1.500", 0, True), ("100", 0, False), ("0.10", 1, False), ("-0.0050", 3, False),
    ("-0.0050", 2, True), ("0E-9", 0, False), ("1E+3", 0, False), ("12.345", 2, True),
])
def test_places_count_the_digits_after_the_point_that_matter(value, places, refused):
    """1.500 has one place that counts, 100 none, 0E-9 none: trailing zeros never count."""
    problem = Check(places=places).problem(Decimal(value))
    assert (problem is not None) == refused
    if refused:
        assert problem == f"must have at most {places} decimal places, got {value}"


def test_a_float_that_is_not_finite_is_refused_and_an_int_is_compared():
    assert Check(ge=0).problem(float("inf")) == "must be a finite number, got inf"
    assert Check(ge=0).problem(float("nan")) == "must be a finite number, got nan"
    assert Check(ge=0).problem(5) is None and Check(ge=0).problem(-5) == "must be >= 0, got -5"
    reading = msgspec.defstruct("Level", [("level", Annotated[float, Check(ge=0)])])
    assert refusal(TypedHandler(lambda p, t: None, reading), '{"level": 1e999}', "Level") == \
        "Level: Number out of range - at `$.level`"  # msgspec refuses it before the check
