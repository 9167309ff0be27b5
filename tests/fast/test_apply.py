"""The table API a handler gets (pipelines/engine/apply.py), misused: each misuse is a handler error of class
`bug` that names what was wrong, and whatever the handler wrote before it is rolled back. Through
`pipelines.testing.replay`, the engine's own walk and apply, with no Spark."""

from __future__ import annotations

import re
from datetime import date
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.testing import replay
from pipelines.view import DECIMAL, Column, Reject, Table, View

KEYED = Table("things", {"thing_id": Column(str), "n": Column(int)}, ("thing_id",), stream_key="thing_id")
LOG = Table("log", {"thing_id": Column(str), "pos": Column(int), "what": Column(str)}, ("thing_id", "pos"),
            kind="append", stream_key="thing_id")
TOTALS = Table("totals", {"day": Column(str), "n": Column(int)}, ("day",), kind="aggregate")


def misusing(name: str, handler) -> View:
    view = View(name=name, tables=(KEYED, LOG, TOTALS), subscribes=("thing",), on_bug="skip")

    @view.on("Made")
    def made(event, tables) -> None:
        tables.things.put({"thing_id": event.stream_id, "n": 1})
        tables.log.append({"thing_id": event.stream_id, "pos": 1, "what": "made"})
        tables.totals.add({"day": "d"}, n=1)

    view.on("Used")(handler)
    return view


def run(view: View) -> tuple[dict, list[dict]]:
    records = [{"stream_id": "t1", "stream_type": "thing", "seq": 1, "type": "Made"},
               {"stream_id": "t1", "stream_type": "thing", "seq": 2, "type": "Used"}]
    result = replay(view, records)
    return result.tables, [e for e in result.errors if e["kind"] == "handler_error"]


def aggregate_with_a_wrong_key(event, tables) -> None:
    tables.totals.add({"day": "d", "hour": 1}, n=1)


def aggregate_an_unknown_column(event, tables) -> None:
    tables.totals.add({"day": "d"}, m=1)


def append_with_a_missing_column(event, tables) -> None:
    tables.log.append({"thing_id": event.stream_id, "pos": 2})


def append_the_same_key_again(event, tables) -> None:
    tables.log.append({"thing_id": event.stream_id, "pos": 1, "what": "again"})


def append_another_streams_row(event, tables) -> None:
    tables.log.append({"thing_id": "t2", "pos": 2, "what": "theirs"})


def get_with_two_values_for_one(event, tables) -> None:
    tables.things.get(event.stream_id, 2)


def put_another_streams_row(event, tables) -> None:
    tables.things.put({"thing_id": "t2", "n": 1})


def aggregate_a_text(event, tables) -> None:
    tables.totals.add({"day": "d"}, n="5")


@pytest.mark.parametrize("handler, words", [
    (aggregate_with_a_wrong_key, "totals: key must have exactly ['day']"),
    (aggregate_a_text, "totals.n: increment must be a number, got '5'"),
    (get_with_two_values_for_one, "things: the primary key is ['thing_id'], got 2 values"),
    (put_another_streams_row, "things: a handler may only write rows of its own stream"),
    (aggregate_an_unknown_column, "totals: unknown column 'm'"),
    (append_with_a_missing_column, "log: a row needs exactly the columns ['thing_id', 'pos', 'what']"),
    (append_the_same_key_again, "log: appended rows need increasing primary keys"),
    (append_another_streams_row, "log: a handler may only write rows of its own stream"),
])
def test_a_misuse_is_a_bug_that_names_what_was_wrong(handler, words):
    tables, (error,) = run(misusing(handler.__name__, handler))
    assert error["error_class"] == "bug" and error["seq"] == 2 and words in error["message"], error
    assert tables["log"] == [{"thing_id": "t1", "pos": 1, "what": "made"}]  # nothing of the failed call stayed
    assert tables["totals"] == [{"day": "d", "n": 1}]


def delete_add_append_then_refuse(event, tables) -> None:
    tables.things.delete(event.stream_id)
    tables.totals.add({"day": "d"}, n=5)
    tables.log.append({"thing_id": event.stream_id, "pos": 2, "what": "used"})
    raise Reject("not today")


def test_a_refused_message_leaves_every_table_as_it_was():
    tables, (error,) = run(misusing("refusing", delete_add_append_then_refuse))
    assert error["error_class"] == "reject" and error["message"] == "not today"
    assert tables["things"] == [{"thing_id": "t1", "n": 1}]  # the delete was rolled back
    assert tables["totals"] == [{"day": "d", "n": 1}]
    assert tables["log"] == [{"thing_id": "t1", "pos": 1, "what": "made"}]


NUMBERED = Table("numbered", {"thing_id": Column(str), "k": Column(int), "on": Column(date), "n": Column(int)},
                 ("thing_id", "k"), stream_key="thing_id")
BY_DAY = Table("by_day", {"on": Column(date), "n": Column(int)}, ("on",), kind="aggregate")


def keyed_view(name: str, handler) -> View:
    """A composite key (stream, BIGINT) and an aggregate keyed by DATE: keys given in other types convert."""
    view = View(name=name, tables=(NUMBERED, BY_DAY), subscribes=("thing",), on_bug="skip")

    @view.on("Made")
    def made(event, tables) -> None:
        tables.numbered.put({"thing_id": event.stream_id, "k": 3, "on": "2024-03-01", "n": 1})
        tables.by_day.add({"on": "2024-03-01"}, n=1)

    view.on("Used")(handler)
    return view


def find_by_converted_keys(event, tables) -> None:
    from decimal import Decimal

    for k in (3, 3.0, Decimal(3)):
        row = tables.numbered.get(event.stream_id, k)
        assert row is not None and row["k"] == 3, k
    tables.numbered.put({**row, "n": row["n"] + 1})
    tables.by_day.add({"on": __import__("datetime").date(2024, 3, 1)}, n=1)  # a date, or its ISO text: one key
    tables.numbered.put({"thing_id": event.stream_id, "k": 4, "on": "2024-03-02", "n": 7})
    tables.numbered.delete(event.stream_id, 4.0)


def test_keys_in_other_types_find_the_same_row():
    result = replay(keyed_view("converting", find_by_converted_keys),
                    [{"stream_id": "t1", "stream_type": "thing", "seq": 1, "type": "Made"},
                     {"stream_id": "t1", "stream_type": "thing", "seq": 2, "type": "Used"}])
    assert result.errors == []
    assert [(r["k"], r["n"]) for r in result.tables["numbered"]] == [(3, 2)]
    assert [(str(r["on"]), r["n"]) for r in result.tables["by_day"]] == [("2024-03-01", 2)]


def get_with_one_value_for_two(event, tables) -> None:
    tables.numbered.get(event.stream_id)


def get_with_a_text_for_a_number(event, tables) -> None:
    tables.numbered.get(event.stream_id, "three")


def change_then_fail(event, tables) -> None:
    tables.numbered.put({"thing_id": event.stream_id, "k": 3, "on": "2024-03-01", "n": 99})  # changed
    tables.numbered.put({"thing_id": event.stream_id, "k": 5, "on": "2024-03-05", "n": 5})  # new
    tables.numbered.delete(event.stream_id, 3)
    tables.by_day.add({"on": "2024-03-01"}, n=10)
    tables.by_day.add({"on": "2024-03-09"}, n=10)
    raise KeyError("a bug after the writes")


@pytest.mark.parametrize("handler, words", [
    (get_with_one_value_for_two, "numbered: the primary key is ['thing_id', 'k'], got 1 values"),
    (get_with_a_text_for_a_number, "numbered.k is BIGINT: a handler cannot store str 'three'"),
    (change_then_fail, "'a bug after the writes'"),
])
def test_a_failed_handler_is_described_and_rolled_back_whole(handler, words):
    result = replay(keyed_view(handler.__name__, handler),
                    [{"stream_id": "t1", "stream_type": "thing", "seq": 1, "type": "Made"},
                     {"stream_id": "t1", "stream_type": "thing", "seq": 2, "type": "Used"}])
    (error,) = result.errors
    assert error["error_class"] == "bug" and words in error["message"], error
    assert error["reason"] == f"{error['exception_type']}: {error['message']}"
    assert "Traceback (most recent call last)" in error["traceback"] and f"in {handler.__name__}" in error["traceback"]
    assert [(r["k"], r["n"]) for r in result.tables["numbered"]] == [(3, 1)]
    assert [(str(r["on"]), r["n"]) for r in result.tables["by_day"]] == [("2024-03-01", 1)]


def append_then_fail(event, tables) -> None:
    tables.log.append({"thing_id": event.stream_id, "pos": 2, "what": "lost"})
    raise RuntimeError("x" * 9000)


def append_after_the_newest(event, tables) -> None:
    newest = tables.log.last()
    tables.log.append({"thing_id": event.stream_id, "pos": newest["pos"] + 1, "what": "used"})


def test_a_failed_append_leaves_the_newest_row_as_it_was_and_a_long_message_is_cut():
    view = misusing("appending", append_after_the_newest)
    view.on("Broke")(append_then_fail)
    result = replay(view, [{"stream_id": "t1", "stream_type": "thing", "seq": seq, "type": kind}
                           for seq, kind in ((1, "Made"), (2, "Broke"), (3, "Used"))])
    (error,) = result.errors
    assert error["seq"] == 2 and error["message"] == "x" * 2000  # bounded: the error log is not a dump
    assert error["traceback"] == "x" * 7999 + "\n"  # its last 8,000 characters: where the exception is
    assert [(r["pos"], r["what"]) for r in result.tables["log"]] == [(1, "made"), (2, "used")]


BY_DAY_AND_KIND = Table("by_day_and_kind", {"day": Column(str), "kind": Column(str), "n": Column(int)}, ("day", "kind"),
                        kind="aggregate")


def test_an_aggregate_with_a_composite_key_sums_per_key():
    view = View(name="composite", tables=(BY_DAY_AND_KIND,), subscribes=("thing",))

    @view.on("Made")
    def made(event, tables) -> None:
        tables.by_day_and_kind.add({"day": "d", "kind": event.payload["kind"]}, n=event.seq)

    result = replay(view, [{"stream_id": f"t{seq}", "stream_type": "thing", "seq": 1, "type": "Made",
                            "payload": {"kind": kind}} for seq, kind in ((1, "a"), (2, "b"), (3, "a"))])
    assert result.errors == []
    assert [(r["kind"], r["n"]) for r in result.tables["by_day_and_kind"]] == [("a", 2), ("b", 1)]


def test_only_an_aggregates_sums_must_fit_their_column():
    """An integer increment is held as it is and its sum is checked: one beyond BIGINT is fine as long as
    the total it makes fits (and a total that does not fit is a refusal, whatever the increments)."""
    view = View(name="sums", tables=(TOTALS,), subscribes=("thing",))

    @view.on("Made")
    def made(event, tables) -> None:
        tables.totals.add({"day": "d"}, n=event.payload["n"])

    def run_with(*increments: int):
        return replay(view, [{"stream_id": "t1", "stream_type": "thing", "seq": seq, "type": "Made",
                              "payload": {"n": n}} for seq, n in enumerate(increments, 1)])

    result = run_with(-10, 2 ** 63)
    assert result.errors == [] and result.tables["totals"] == [{"day": "d", "n": 2 ** 63 - 10}]
    (error,) = run_with(10, 2 ** 63 - 1).errors
    assert error["seq"] == 2 and error["error_class"] == "reject" and "BIGINT" in error["message"]


DECIMALS = st.one_of(st.decimals(allow_nan=True, allow_infinity=True),
                     st.decimals(min_value=Decimal("-1e30"), max_value=Decimal("1e30"), places=12),
                     st.sampled_from([Decimal("1E+400"), Decimal("-1E-400"), Decimal("sNaN"), Decimal("9" * 28 + ".995")]))


@given(value=DECIMALS, sql_type=st.sampled_from(["DECIMAL(12,2)", "DECIMAL(18,0)", "DECIMAL(38,10)", "DECIMAL(5,5)"]))
@settings(max_examples=400, deadline=None)
def test_a_decimal_is_rounded_to_its_column_or_refused_as_the_reference_model_says(value, sql_type):
    """Any Decimal a handler writes (a typed payload takes "NaN", "1E+400" or 40 digits): the row normaliser's
    fast path and its converter agree with the reference model, and nothing but a `Reject` escapes them."""
    from pipelines.columns import decimal_precision_scale, row_normaliser
    from tests.reference_model import _norm_value

    normalise = row_normaliser("t", {"k": "VARCHAR", "v": sql_type}, ("k",))
    try:
        expected = _norm_value(sql_type, value)
    except Reject:
        expected = Reject
    try:
        got = normalise({"k": "x", "v": value})["v"]
    except Reject:
        got = Reject
    scale = decimal_precision_scale(sql_type)[1]
    assert got == expected and (got is Reject or (got.is_finite() and got.as_tuple().exponent == -scale))


@st.composite
def carries(draw) -> tuple[Decimal, str]:
    """(a value, a DECIMAL(p,s) type) whose rounding to s places carries: `lead` then nines, then a half (or a hair
    under or over it) past the column's last place, so that half-up rounding carries through the nines into the
    digit `places` above the last one kept, at every position up to one past the column's precision."""
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    lead, places = draw(st.integers(1, 9)), draw(st.integers(0, precision))
    past = draw(st.sampled_from(["5", "4999999999", "5000000001"]))
    sign = draw(st.sampled_from(["", "-"]))
    return Decimal(f"{sign}{lead * 10 ** places - 1}.{past}E-{scale}"), f"DECIMAL({precision},{scale})"


@given(case=carries())
@settings(max_examples=300, deadline=None)
def test_a_decimal_whose_rounding_carries_past_its_precision_is_a_reject_naming_the_column(case):
    """Python's `decimal` at the column's precision is the judge: quantizing to the scale with `precision` digits
    either gives the value the column holds or signals that it does not fit (99.995 -> 100.00 in DECIMAL(4,2)).
    The row normaliser (its fast path and its converter) and the converter of keys and increments agree, and what
    does not fit is a `Reject` naming the column, never another exception (a bug that parks the stream)."""
    from pipelines.columns import column_converter, decimal_precision_scale, row_normaliser

    value, sql_type = case
    precision, scale = decimal_precision_scale(sql_type)
    try:
        expected = value.quantize(Decimal(1).scaleb(-scale),
                                  context=Context(prec=precision, rounding=ROUND_HALF_UP, traps=[InvalidOperation]))
    except InvalidOperation:
        expected = None
    normalise = row_normaliser("t", {"k": "VARCHAR", "v": sql_type}, ("k",))
    for convert in (lambda v: normalise({"k": "x", "v": v})["v"], column_converter(sql_type, True, "t.v")):
        if expected is None:
            with pytest.raises(Reject, match=rf"^t\.v: .*{re.escape(sql_type)}$"):
                convert(value)
        else:
            got = convert(value)
            assert got == expected and got.as_tuple().exponent == -scale, (got, expected)


def test_a_payload_that_rounds_past_its_column_is_refused_and_the_stream_goes_on():
    """99.995 for a DECIMAL(4,2) column rounds to 100.00, which it cannot hold: the handler's save is a `Reject`
    naming the column, `on_error` skips it, the stream is not parked, and the next message (9.995 -> 10.00) applies."""
    fees = Table.per_stream("carry_fees", key="account_id", columns={"amount": Column(DECIMAL(4, 2))})
    view = View(name="carry_fees", tables=(fees,), subscribes=("account",))
    view.on("Charged")(lambda event, tables: tables.carry_fees.save(amount=event.payload["amount"]))
    result = replay(view, [{"stream_id": "a1", "stream_type": "account", "seq": seq, "type": "Charged",
                            "payload": {"amount": amount}} for seq, amount in enumerate((99.995, -99.995, 9.995), 1)])
    assert [(e["seq"], e["error_class"], e["message"]) for e in result.errors] == [
        (1, "reject", "carry_fees.amount: 99.995 is out of range for DECIMAL(4,2)"),
        (2, "reject", "carry_fees.amount: -99.995 is out of range for DECIMAL(4,2)")]
    assert result.parked == [] and result.watermarks["a1"]["last_seq"] == 3
    assert result.rows(fees) == [{"account_id": "a1", "amount": Decimal("10.00")}]


def test_a_table_is_found_by_its_declaration_an_executors_copy_of_it_its_name_and_as_an_attribute():
    import pickle

    copy, unknown = pickle.loads(pickle.dumps(KEYED)), Table("other", {"k": Column(str)}, ("k",), stream_key="k")
    view = View(name="lookups", tables=(KEYED, LOG, TOTALS), subscribes=("thing",), on_bug="skip")

    @view.on("Made")
    def made(event, tables) -> None:
        assert copy is not KEYED and tables[KEYED] is tables[copy] is tables["things"] is tables.things
        tables[copy].put({"thing_id": event.stream_id, "n": 7})

    @view.on("Used")
    def used(event, tables) -> None:
        tables[unknown].put({"k": event.stream_id})

    result_tables, errors = run(view)
    assert result_tables["things"] == [{"thing_id": "t1", "n": 7}]
    assert [(e["seq"], e["error_class"], e["message"]) for e in errors] == [(2, "bug", "'other'")]


def get_by_the_stream_id(event, tables) -> None:
    row = tables.things.get(event.stream_id)  # a one-column key of the class it holds: found as it is
    tables.things.put({**row, "n": row["n"] + 1})


def test_a_row_is_found_by_its_one_column_key():
    tables, errors = run(misusing("found", get_by_the_stream_id))
    assert errors == [] and [(r["thing_id"], r["n"]) for r in tables["things"]] == [("t1", 2)]
