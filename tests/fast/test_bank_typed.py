"""The bank's views in the typed style (views/, issue 26) against the same views as they were before
(tests/bank_classic_views.py, frozen): on any batch, good payloads and every kind of bad one, both give
the same tables, the same refusals and bugs (only a reason's words may differ) and the same counts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.bank_classic_views as classic
from demos.bank import GeneratorConfig, generate
from inorder import View, replay
from tests.profiles import examples
from views import account_activity, accounts, daily_totals

NOW = datetime(2026, 11, 3, tzinfo=timezone.utc)
PAIRS = [(classic.ACCOUNTS_VIEW, accounts.VIEW), (classic.ACTIVITY_VIEW, account_activity.VIEW),
         (classic.DAILY_VIEW, daily_totals.VIEW)]
EVENT_TYPES = ("AccountOpened", "Deposited", "Withdrawn", "AccountClosed", "Renamed")

# JSON texts, as a feed may write them: numbers in every notation the wire allows, and what is not a number
_NUMBER_TEXTS = ("1", "25.5", "0.01", "100.00", "1.000", "1E+2", "1.5e1", "2500E-2", "9999999999999999.99",
                 "0", "-0", "0.00", "-5", "-0.01", "1.005", "0.001", "1e-3", "1E-999999999", "1e400",
                 "10000000000000000", "9999999999999999.991", "1" + "0" * 40, "0." + "1" * 40)
_NOT_NUMBER_TEXTS = ('"12.50"', '"5"', '"abc"', '""', '"NaN"', '"-sNaN"', '"Infinity"', '"-Infinity"', '"1e2"',
                     "true", "false", "null", "[]", "[1]", "{}", '{"amount": 1}')
_OWNER_TEXTS = ('"Ada"', '" Ada "', '""', '" "', '"\\t\\n"', '"\\u00a0"', '"\\u2003x"', '"\\u001c"', '"😀"',
                "5", "null", "true", "[]", '["Ada"]', '{"name": "Ada"}')
_OCCURRED_AT = ("2026-11-01T23:30:00-02:00", "2026-11-01T10:00:00Z", "2026-11-01T10:00:00", "2026-11-01",
                "yesterday", "", None)


# a JSON number's text is what `str` writes of an int or a finite Decimal ("1E+2", "-0", "0.00100")
json_numbers = st.one_of(st.sampled_from(_NUMBER_TEXTS), st.integers(-10**20, 10**20).map(str),
                         st.decimals(allow_nan=False, allow_infinity=False).map(str),
                         st.decimals(min_value=Decimal("0.01"), max_value=Decimal("100000"), places=2).map(str))
quoted_numbers = st.one_of(json_numbers, st.decimals().map(str)).map(json.dumps)  # "12.50", "NaN"…
# any JSON value, to sit in a field the views do not read, or to stand for a whole payload
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
              st.decimals(allow_nan=False, allow_infinity=False)).map(
        lambda v: str(v) if isinstance(v, (int, Decimal)) and not isinstance(v, bool) else json.dumps(v)),
    lambda children: st.one_of(st.lists(children, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
                               st.dictionaries(st.text(max_size=5), children, max_size=3).map(
                                   lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")),
    max_leaves=6)
field_values = {"amount": st.one_of(json_numbers, quoted_numbers, st.sampled_from(_NOT_NUMBER_TEXTS), json_values),
                "owner": st.one_of(st.sampled_from(_OWNER_TEXTS), st.text(max_size=4).map(json.dumps), json_values)}


@st.composite
def payloads(draw, event_type: str) -> str | None:
    """A payload's JSON text (None: the record has no payload): mostly an object with the field the event
    type needs, good or bad, sometimes without it, with extra fields, or not an object at all."""
    shape = draw(st.sampled_from(["fitting", "fitting", "fitting", "extra", "missing", "other", "absent"]))
    if shape == "other":
        return draw(st.one_of(st.sampled_from(["null", "[]", "5", '"x"', "true"]), json_values))
    if shape == "absent":
        return None
    fields = {}
    if shape != "missing":
        read = "owner" if event_type == "AccountOpened" else "amount"
        fields[read] = draw(field_values[read])
    if shape in ("extra", "missing"):
        for name in draw(st.lists(st.sampled_from(["note", "currency", "owner", "amount"]), max_size=2, unique=True)):
            fields.setdefault(name, draw(json_values))
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"


def record(stream_id: str, seq: int, event_type: str, payload: str | None, occurred_at: str | None) -> str:
    """One record's JSON line (`payload` a JSON text; None: the record has no such field)."""
    line = f'{{"stream_id":{json.dumps(stream_id)},"seq":{seq},"type":{json.dumps(event_type)}'
    if payload is not None:
        line += f',"payload":{payload}'
    if occurred_at is not None:
        line += f',"occurred_at":{json.dumps(occurred_at)}'
    return line + "}"


@st.composite
def records(draw, stream_id: str, length: int) -> list[str]:
    """A stream's records, half of them opened well (so that what follows is judged on an open account)."""
    lines = [record(stream_id, 1, "AccountOpened", '{"owner":"Ada"}', _OCCURRED_AT[0])] if draw(st.booleans()) else []
    for seq in range(len(lines) + 1, length + 1):
        event_type = draw(st.sampled_from(EVENT_TYPES))
        payload, occurred_at = draw(payloads(event_type)), draw(st.sampled_from(_OCCURRED_AT))
        lines.append(record(stream_id, seq, event_type, payload, occurred_at))
    return lines


@st.composite
def batches(draw) -> list[str]:
    lines = [line for i in range(draw(st.integers(1, 3)))
             for line in draw(records(f"acct-{i + 1}", draw(st.integers(1, 8))))]
    return draw(st.permutations(lines))


def outcome(view: View, lines: list[str]) -> tuple:
    """What a batch does to a view, but for the words of a refusal's reason."""
    result = replay(view, lines, now=NOW)
    errors = [(e["kind"], e["stream_id"], e["seq"], e.get("error_class"), e.get("exception_type"))
              for e in result.errors]
    return result.tables, errors, result.counts, result.watermarks


def assert_same_outcomes(lines: list[str]) -> None:
    for old, new in PAIRS:
        assert outcome(new, lines) == outcome(old, lines), (new.name, lines)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_typed_views_decide_every_payload_as_the_classic_ones(lines):
    assert_same_outcomes(lines)


_OTHER_PAYLOADS = ("null", "[]", '["Ada"]', "5", '"x"', "true", "{}", None)


@pytest.mark.parametrize("event_type, payload", [
    *((kind, f'{{"amount":{text}}}') for kind in ("Deposited", "Withdrawn")
      for text in _NUMBER_TEXTS + _NOT_NUMBER_TEXTS),
    *(("AccountOpened", f'{{"owner":{text}}}') for text in _OWNER_TEXTS),
    *((kind, payload) for kind in EVENT_TYPES for payload in _OTHER_PAYLOADS)])
def test_each_kind_of_payload_is_decided_as_before(event_type, payload):
    """On an account opened with 100 deposited, then emptied (so that it may close)."""
    day = "2026-11-01T10:00:00Z"
    before = [record("a", 1, "AccountOpened", '{"owner":"Ada"}', day),
              record("a", 2, "Deposited", '{"amount":100}', day)]
    emptied = [*before, record("a", 3, "Withdrawn", '{"amount":100}', day)]
    for lines in (before, emptied):
        assert_same_outcomes([*lines, record("a", len(lines) + 1, event_type, payload, day)])


def test_the_demo_feed_is_decided_as_before(tmp_path):
    """demos/bank.py's batches, poison included (bad amounts, missing owners, bad dates, broken lines)."""
    paths = generate(tmp_path, GeneratorConfig(events=3000, streams=30, batches=1, poison=0.05, seed=11))
    lines = paths[0].read_text().splitlines()
    assert_same_outcomes(lines)
    errors = outcome(accounts.VIEW, lines)[1]
    assert {e[3] for e in errors} == {None, "reject"}  # malformed lines and refusals, no bug


@pytest.mark.parametrize("old, new", PAIRS, ids=lambda v: v.name)
def test_the_typed_views_declare_the_same_tables_and_rules(old, new):
    declared = [(t.name, list(t.columns.items()), t.primary_key, t.kind, t.stream_key, t.descriptions)
                for t in new.tables]
    assert declared == [(t.name, list(t.columns.items()), t.primary_key, t.kind, t.stream_key, t.descriptions)
                        for t in old.tables]
    assert sorted(new.rules, key=repr) == sorted(old.rules, key=repr) and not new.expectations
    assert (new.subscribes, new.alerts, new.on_error, new.on_bug, set(new.handlers)) == \
        (old.subscribes, old.alerts, old.on_error, old.on_bug, set(old.handlers))
