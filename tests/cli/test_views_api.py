"""The view author's API of issue 26, in memory (no Spark): typed events decoded once and refused by field,
a stream's own row, columns that carry their rules, one registration style with the older ones refused,
and a fingerprint that sees the view's own helper modules."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import textwrap
import warnings
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Annotated, Optional

import duckdb
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inorder import DECIMAL, INTEGER, Check, Column, Event, Reject, Table, View, replay
from pipelines.registry import load_views
from pipelines.store.versions import code_parts, compare, fingerprint, table_declarations
from pipelines.view import HandlerRegistrationClosed, between, in_set, not_null, unique


class Opened(msgspec.Struct):
    owner: Annotated[str, msgspec.Meta(min_length=1)]
    opened_on: date


class Paid(msgspec.Struct):
    amount: Annotated[Decimal, Check(gt=0, places=2)]
    at: datetime


class Renamed(msgspec.Struct):
    __event_type__ = "owner-renamed"  # the feed's spelling
    owner: str


ACCOUNTS = Table.per_stream("accounts", key="account_id", columns={
    "owner": Column(str, not_null=True, doc="who opened it"),
    "opened_on": Column(date),
    "balance": Column(DECIMAL(12, 2), not_null=True, min=0),
    "last_paid_at": Column(datetime),
    "payments": Column(INTEGER, min=0),
    "status": Column(str, one_of=("open", "closed")),
})


def _bank() -> View:
    bank = View(name="bank_api", tables=(ACCOUNTS,), subscribes=("account",))

    @bank.on(Opened)
    def opened(e: Opened, tables) -> None:
        if tables.accounts.row is not None:
            raise Reject("already open")
        tables.accounts.save(owner=e.owner, opened_on=e.opened_on, balance=Decimal("0.00"), payments=0,
                             status="open")

    @bank.on(Paid)
    def paid(e: Paid, tables, event: Event) -> None:  # the envelope as a third parameter
        row = tables[ACCOUNTS].row
        if row is None:
            raise Reject(f"{event.stream_id} is not open")
        tables[ACCOUNTS].save(balance=row["balance"] + e.amount, last_paid_at=e.at, payments=row["payments"] + 1)

    @bank.on(Renamed)
    def renamed(e: Renamed, tables) -> None:
        tables.accounts.save(owner=e.owner)

    @bank.on("Closed")  # an untyped payload: the handler gets the Event
    def closed(event: Event, tables) -> None:
        assert isinstance(event, Event)
        tables.accounts.delete()

    return bank


def _record(stream: str, seq: int, event_type: str, payload) -> dict:
    return {"stream_id": stream, "stream_type": "account", "seq": seq, "type": event_type, "payload": payload}


def test_a_typed_handler_gets_its_payload_decoded_with_exact_types():
    result = replay(_bank(), [
        _record("a1", 1, "Opened", {"owner": "ann", "opened_on": "2026-11-02"}),
        _record("a1", 2, "Paid", {"amount": 0.1, "at": "2026-11-03T10:00:00Z"}),
        _record("a1", 3, "Paid", {"amount": 0.2, "at": "2026-11-04T10:00:00+01:00"}),
        _record("a1", 4, "owner-renamed", {"owner": "anne"}),
    ])
    assert result.errors == []
    (row,) = result.tables["accounts"]
    assert row["balance"] == Decimal("0.30") and type(row["balance"]) is Decimal  # exact: 0.1 + 0.2
    assert row["opened_on"] == date(2026, 11, 2)
    assert row["last_paid_at"] == datetime(2026, 11, 4, 9, 0, tzinfo=timezone.utc)
    assert (row["account_id"], row["owner"], row["payments"], row["status"]) == ("a1", "anne", 2, "open")


@pytest.mark.parametrize("payload, field, words", [
    ({"owner": "ann"}, "opened_on", "missing required field"),
    ({"owner": "", "opened_on": "2026-11-02"}, "owner", "length"),
    ({"owner": 5, "opened_on": "2026-11-02"}, "owner", "Expected `str`"),
    ({"owner": "ann", "opened_on": "not a day"}, "opened_on", "Invalid"),
])
def test_an_opening_that_does_not_fit_its_type_is_a_reject_naming_the_field(payload, field, words):
    result = replay(_bank(), [_record("a1", 1, "Opened", payload)])
    (error,) = result.errors
    assert (error["kind"], error["error_class"], error["exception_type"]) == ("handler_error", "reject", "Reject")
    assert error["message"].startswith("Opened: ") and field in error["message"] and words in error["message"]
    assert result.tables["accounts"] == []


@pytest.mark.parametrize("amount, problem", [
    (0, "`amount` must be > 0, got 0"),
    (-5, "`amount` must be > 0, got -5"),
    (1.005, "`amount` must have at most 2 decimal places, got 1.005"),
    ("ten", "Invalid decimal string - at `$.amount`"),
    (None, "Expected `decimal`, got `null` - at `$.amount`"),
    ("NaN", "`amount` must be a finite number, got NaN"),  # a Decimal field reads numbers in strings too
    ("-Infinity", "`amount` must be a finite number, got -Infinity"),
    ("1E+400", None),  # finite, positive, no places: accepted, and then too large for DECIMAL(12,2)
])
def test_a_payment_check_refuses_by_field(amount, problem):
    result = replay(_bank(), [_record("a1", 1, "Opened", {"owner": "ann", "opened_on": "2026-11-02"}),
                              _record("a1", 2, "Paid", {"amount": amount, "at": "2026-11-03T10:00:00Z"})])
    (error,) = result.errors
    assert error["error_class"] == "reject"
    assert error["message"] == f"Paid: {problem}" if problem else "accounts.balance" in error["message"]
    assert result.tables["accounts"][0]["balance"] == Decimal("0.00")


def test_a_payload_that_is_not_an_object_is_a_reject_not_a_bug():
    result = replay(_bank(), [_record("a1", 1, "Opened", [1, 2]), _record("a2", 1, "Opened", None)])
    assert [(e["stream_id"], e["error_class"]) for e in result.errors] == [("a1", "reject"), ("a2", "reject")]


@given(st.decimals(min_value=Decimal("-1000"), max_value=Decimal("1000"), places=3, allow_nan=False))
@settings(max_examples=60, deadline=None)
def test_check_accepts_exactly_positive_amounts_with_two_places(amount):
    paid = ('{"stream_id": "a1", "stream_type": "account", "seq": 2, "type": "Paid", '
            f'"payload": {{"amount": {amount}, "at": "2026-11-03T10:00:00Z"}}}}')  # the JSON number as written
    result = replay(_bank(), [_record("a1", 1, "Opened", {"owner": "ann", "opened_on": "2026-11-02"}), paid])
    fits = amount > 0 and amount == amount.quantize(Decimal("0.01"))
    assert (result.errors == []) is fits
    assert result.tables["accounts"][0]["balance"] == (amount if fits else Decimal("0.00"))


def test_the_stream_row_is_saved_with_its_key_and_deleted():
    result = replay(_bank(), [_record("a1", 1, "Opened", {"owner": "ann", "opened_on": "2026-11-02"}),
                              _record("a2", 1, "Opened", {"owner": "bob", "opened_on": "2026-11-02"}),
                              _record("a2", 2, "Closed", {})])
    assert [r["account_id"] for r in result.tables["accounts"]] == ["a1"]


def test_row_and_save_are_refused_on_a_table_not_keyed_by_the_stream_alone():
    lines = Table.keyed("lines", columns={"order_id": Column(str), "line": Column(int), "sku": Column(str)},
                        key=("order_id", "line"), stream_key="order_id")
    view = View(name="lines_api", tables=(lines,), subscribes=("order",))

    @view.on("Added")
    def added(event: Event, tables) -> None:
        tables.lines.save(sku="x")

    result = replay(view, [{"stream_id": "o1", "stream_type": "order", "seq": 1, "type": "Added", "payload": {}}])
    (error,) = result.errors
    assert error["error_class"] == "bug" and error["exception_type"] == "TypeError"
    assert "Table.per_stream" in error["message"] and "get(*key) and put(row)" in error["message"]


def test_columns_carry_their_types_rules_and_docs():
    assert ACCOUNTS.sql_types == {"account_id": "VARCHAR", "owner": "VARCHAR", "opened_on": "DATE",
                                "balance": "DECIMAL(12,2)", "last_paid_at": "TIMESTAMPTZ", "payments": "INTEGER",
                                "status": "VARCHAR"}
    assert ACCOUNTS.primary_key == ("account_id",) and ACCOUNTS.stream_key == "account_id"
    assert {c: column.doc for c, column in ACCOUNTS.columns.items() if column.doc} == \
        {"account_id": "the stream id", "owner": "who opened it"}
    older = [*not_null("accounts", "account_id", "owner", "balance"), between("accounts", "balance", 0),
             between("accounts", "payments", 0), in_set("accounts", "status", ("open", "closed"))]
    assert sorted(ACCOUNTS.rules, key=repr) == sorted(older, key=repr)
    pair = Table.keyed("pairs", columns={"a": Column(str), "b": Column(int, unique=True)}, key=("a", "b"),
                       stream_key="a", unique=(("a", "b"),))
    assert set(pair.rules) == {unique("pairs", "b"), unique("pairs", "a", "b")}
    assert _bank().rules == ACCOUNTS.rules


def test_replace_keeps_the_columns_declarations():
    renamed = dataclasses.replace(ACCOUNTS, name="accounts_copy")
    assert renamed.columns == ACCOUNTS.columns
    assert [dataclasses.replace(r, table="accounts") for r in renamed.rules] == list(ACCOUNTS.rules)


def test_the_expectations_suite_is_built_from_the_columns():
    from tests.expectations_reference import validate_view_on_pandas

    con = duckdb.connect()
    con.execute(ACCOUNTS.ddl())
    con.execute("INSERT INTO accounts VALUES ('a1', 'ann', NULL, 5, NULL, 1, 'open'), "
                "('a2', 'bob', NULL, -1, NULL, 0, 'frozen')")
    evaluated, failures = validate_view_on_pandas(con, _bank())
    assert evaluated == len(ACCOUNTS.rules)
    failed = sorted(str(f) for f in failures)
    assert len(failed) == 2 and any("balance" in f for f in failed) and any("status" in f for f in failed)


# each rule of docs/VIEWS.md's table declared alone: (columns, the table's unique groups, the one rule it makes, rows
# it keeps, a row that breaks it); values at an inclusive bound keep it, a bound not declared holds nothing back
RULES_ALONE = {
    "not_null": ({"n": Column(int, not_null=True)}, (), not_null("rules_alone", "n")[0], [(1,), (-5,)], (None,)),
    "unique": ({"n": Column(int, unique=True)}, (), unique("rules_alone", "n"), [(1,), (2,)], (1,)),
    "min alone": ({"n": Column(int, min=0)}, (), between("rules_alone", "n", 0), [(0,), (10 ** 12,)], (-1,)),
    "max alone": ({"n": Column(int, max=10)}, (), between("rules_alone", "n", None, 10), [(10,), (-10 ** 12,)],
                  (11,)),
    "one_of": ({"n": Column(str, one_of=("a", "b"))}, (), in_set("rules_alone", "n", ("a", "b")), [("a",), ("b",)],
               ("c",)),
    "unique together": ({"n": Column(int), "m": Column(int)}, (("n", "m"),), unique("rules_alone", "n", "m"),
                        [(1, 1), (1, 2)], (1, 1)),
}


@pytest.mark.parametrize("rule", sorted(RULES_ALONE))
def test_every_documented_rule_works_alone(rule):
    """docs/VIEWS.md's rules, each declared with none of the others (`Column(…, max=…)` with no `min`: "either
    end"): the view's rules are that one rule, and the `expectations` check passes on rows that keep it and
    fails on exactly that rule, one row unexpected, once a row breaks it."""
    from pipelines.observe.checks import expectations

    columns, groups, expected, kept, breaking = RULES_ALONE[rule]
    table = Table.keyed("rules_alone", columns={"k": Column(str), **columns}, key=("k",), stream_key="k",
                        unique=groups)
    view = View(name="rules_alone", tables=(table,), subscribes=("thing",))
    assert view.rules == (expected,)
    con = duckdb.connect()
    con.execute(table.ddl())
    con.executemany(f"INSERT INTO rules_alone VALUES (?{', ?' * len(columns)})",
                    [(f"k{i}", *row) for i, row in enumerate(kept)])
    outcome = expectations(con, view)
    assert (outcome.passed, outcome.metadata["expectations"]) == (True, 1), outcome.metadata["failures"]
    con.execute(f"INSERT INTO rules_alone VALUES ('bad'{', ?' * len(columns)})", list(breaking))
    outcome = expectations(con, view)
    (failure,) = outcome.metadata["failures"]
    assert not outcome.passed and failure["unexpected_count"] == (2 if expected.rule == "unique" else 1), failure


@pytest.mark.parametrize("declare, replacement", [
    (lambda: Table("t", columns={"k": "VARCHAR"}, primary_key=("k",), stream_key="k"), "Column(str)"),
    (lambda: Table("t", columns={"k": Column("VARCHAR")}, primary_key=("k",), stream_key="k"), "Column(str)"),
    (lambda: Table("t", columns={"k": Column(str), "n": Column("DECIMAL(18,2)")}, primary_key=("k",), stream_key="k"),
     "Column(DECIMAL(18, 2))"),
    (lambda: View(name="v", tables=(ACCOUNTS,), subscribes=("a",), handlers={"X": lambda e, t: None}),
     "@VIEW.on(EventClass)"),
])
def test_an_older_declaration_is_refused_naming_its_replacement(declare, replacement):
    with pytest.raises(TypeError) as refused:
        declare()
    assert replacement in str(refused.value)


def test_the_new_declarations_warn_of_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _bank()


def test_on_takes_event_classes_or_names_only_and_not_after_the_view_is_sealed():
    view = View(name="sealed_api", tables=(ACCOUNTS,), subscribes=("account",))
    with pytest.raises(TypeError, match="msgspec Struct or dataclass"):
        view.on(dict)
    with pytest.raises(ValueError, match="needs at least one event type"):
        view.on()
    view.handlers.seal()
    with pytest.raises(HandlerRegistrationClosed):
        view.on(Opened)(lambda e, tables: None)


def test_a_dataclass_is_an_event_type_too():
    @dataclasses.dataclass
    class Noted:
        owner: str

    view = View(name="dc_api", tables=(ACCOUNTS,), subscribes=("account",))

    @view.on(Noted)
    def noted(e: Noted, tables) -> None:
        tables.accounts.save(owner=e.owner, balance=Decimal(0))

    result = replay(view, [_record("a1", 1, "Noted", {"owner": "cy"}), _record("a2", 1, "Noted", {"owner": 1})])
    assert [r["owner"] for r in result.tables["accounts"]] == ["cy"]
    assert [e["error_class"] for e in result.errors] == ["reject"]


# -- the fingerprint sees the view's own modules ------------------------------------------------------------

VIEW_MODULE = '''
from decimal import Decimal
import msgspec
from inorder import Column, DECIMAL, Table, View
from {package}.rules import fee_of

FEES = Table.per_stream("fees_fp", key="account_id", columns={{"fee": Column(DECIMAL(12, 2))}})
VIEW = View(name="fees_fp", tables=(FEES,), subscribes=("account",))


class Charged(msgspec.Struct):
    amount: Decimal


@VIEW.on(Charged)
def charged(e: Charged, tables) -> None:
    from {package}.rounding import rounded  # imported only when a message comes: it counts all the same
    tables.fees_fp.save(fee=rounded(fee_of(e.amount)))
'''


def _import_package(root, package: str, files: dict[str, str], module: str):
    """Write `package` under `root` (its `__init__.py` and `files`, name -> source), import `package.module` anew and
    return its VIEW."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
    (root / package).mkdir(exist_ok=True)
    for name, source in {"__init__": "", **files}.items():
        (root / package / f"{name}.py").write_text(source)
    importlib.invalidate_caches()
    return importlib.import_module(f"{package}.{module}").VIEW


def _load(root, package: str, rule: str):
    return _import_package(root, package, {
        "rules": textwrap.dedent(f'''
            from decimal import Decimal
            def fee_of(amount):
                return {rule}
        '''),
        "rounding": "def rounded(value):\n    return round(value, 2)\n",
        "fees": VIEW_MODULE.format(package=package)}, "fees")


def test_a_changed_rule_in_a_helper_module_changes_the_fingerprint(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    def parts(rule: str) -> dict[str, str]:  # taken at once: a fingerprint reads the modules loaded now
        return code_parts(_load(tmp_path, "fp_views", rule))

    before, same = parts("amount * Decimal('0.01')"), parts("amount * Decimal('0.01')")
    # a different length too: Python's bytecode cache and linecache tell files apart by size and mtime,
    # and the files are written within one second
    changed = parts("amount * Decimal('0.025')")
    assert before == same
    moved = [name for name, digest in changed.items() if before.get(name) != digest]
    assert moved == ["module fp_views.rules"]  # the handler and the view's module are as they were
    assert {"module fp_views.fees", "module fp_views.rounding"} <= set(changed)  # the lazy import too
    assert not any(part.startswith(("module pipelines", "module inorder")) for part in changed)



def test_a_loaded_views_code_is_what_it_was_loaded_with_though_its_files_change_after(tmp_path, monkeypatch):
    """A command runs the code it imported: a helper edited while it runs (a run of minutes) changes neither
    the fingerprint it records nor what it says of the code; loaded anew, the view is its new code."""
    monkeypatch.syspath_prepend(str(tmp_path))
    _load(tmp_path, "fp_loaded", "amount * Decimal('0.01')")
    (view,) = load_views("fp_loaded.fees")
    loaded = fingerprint(view)
    (tmp_path / "fp_loaded" / "rules.py").write_text("from decimal import Decimal\ndef fee_of(amount):\n"
                                                    "    return amount * Decimal('0.025')\n")
    importlib.invalidate_caches()
    assert fingerprint(view) == loaded
    assert fingerprint(load_views("fp_loaded.fees")[0]) == loaded  # the same process: the same modules
    _load(tmp_path, "fp_loaded", "amount * Decimal('0.025')")  # imported anew, as the next command does
    (fresh,) = load_views("fp_loaded.fees")
    assert fingerprint(fresh) != loaded

# each form of import, in the view's module (of its helper) and in the helper (of a module two deep): the import
# lines and the name they bind, as (view imports helper, view calls, helper imports deep, helper reads)
IMPORT_FORMS = {
    "import pkg.helper": ("import {p}.helper", "{p}.helper.fee", "import {p}.deep", "{p}.deep.RATE"),
    "import pkg.helper as alias": ("import {p}.helper as h", "h.fee", "import {p}.deep as d", "d.RATE"),
    "from pkg import helper": ("from {p} import helper", "helper.fee", "from {p} import deep", "deep.RATE"),
    "from pkg.helper import name": ("from {p}.helper import fee", "fee", "from {p}.deep import RATE", "RATE"),
    "from .helper import name": ("from .helper import fee", "fee", "from .deep import RATE", "RATE"),
    "from . import helper": ("from . import helper", "helper.fee", "from . import deep", "deep.RATE"),
}

FORM_VIEW = '''
{imports_helper}
from inorder import Column, DECIMAL, Table, View

VIEW = View(name="{p}", tables=(Table.per_stream("{p}", key="account_id", columns={{"fee": Column(DECIMAL(12, 2))}}),),
            subscribes=("account",))


@VIEW.on("Charged")
def charged(event, tables) -> None:
    tables.{p}.save(fee={calls}(event.payload["amount"]))
'''


@pytest.mark.parametrize("form", sorted(IMPORT_FORMS))
def test_the_fingerprint_sees_every_form_of_import_and_a_helper_two_modules_deep(form, tmp_path, monkeypatch):
    """The view's module imports its helper, and the helper a module of its own, in the same form: editing the
    helper, or the module it imports, changes that module's part of the fingerprint and nothing else, and the
    store's record of the view before the edit compares as a change of code."""
    monkeypatch.syspath_prepend(str(tmp_path))
    package = "fp_" + "".join(c if c.isalnum() else "_" for c in form)
    imports_helper, calls, imports_deep, reads = (text.format(p=package) for text in IMPORT_FORMS[form])
    helper = f"{imports_deep}\n\n\ndef fee(amount):\n    return amount * {reads}\n"
    view = _import_package(tmp_path, package, {
        "helper": helper, "deep": "RATE = 2\n",
        "view": FORM_VIEW.format(p=package, imports_helper=imports_helper, calls=calls)}, "view")
    before = code_parts(view)
    assert {f"module {package}.{m}" for m in ("view", "helper", "deep")} <= set(before)
    stored = (fingerprint(view), json.dumps(table_declarations(view.tables)), json.dumps(before), None, None, None)
    for module, edited in (("helper", helper.replace("amount *", "amount * 3 *")), ("deep", "RATE = 20\n")):
        original = (tmp_path / package / f"{module}.py").read_text()
        (tmp_path / package / f"{module}.py").write_text(edited)
        after = code_parts(view)
        assert [name for name, digest in after.items() if before.get(name) != digest] == [f"module {package}.{module}"]
        version = compare(view, stored)
        assert (version.change, version.what) == ("code", f"module {package}.{module} changed")
        (tmp_path / package / f"{module}.py").write_text(original)
    assert code_parts(view) == before


class _Checked(msgspec.Struct):
    value: object


@given(value=st.one_of(st.decimals(), st.floats(), st.integers(), st.none(),
                       st.sampled_from([Decimal("1E+1000"), Decimal("-1E-1000"), Decimal("1.500"), Decimal("0E-9")])),
       bounds=st.dictionaries(st.sampled_from(["gt", "ge", "lt", "le"]), st.decimals(-100, 100, allow_nan=False)),
       places=st.none() | st.integers(0, 4))
@settings(max_examples=500, deadline=None)
def test_the_generated_payload_check_says_what_check_problem_says(value, bounds, places):
    from pipelines.events import payload_checker

    check = Check(**bounds, places=places)
    problem = check.problem(value)
    assert payload_checker((("value", check),))(_Checked(value)) == (None if problem is None else ("value", problem))


def test_a_frozen_payload_is_decoded_once_for_every_view_and_a_thawed_one_for_each():
    class Frozen(msgspec.Struct, frozen=True):
        amount: Annotated[Decimal, Check(gt=0)]

    class Thawed(msgspec.Struct):
        amount: Decimal

    seen: dict[str, list] = {"Frozen": [], "Thawed": []}
    views = []
    for n in range(3):
        view = View(name=f"share_{n}", tables=(Table.per_stream(f"share_{n}", key="k", columns={}),),
                    subscribes=("account",))
        view.on(Frozen)(lambda e, tables: seen["Frozen"].append(e))
        view.on(Thawed)(lambda e, tables: seen["Thawed"].append(e))
        views.append(view)
    records = [_record("a1", 1, "Frozen", {"amount": 5}), _record("a1", 2, "Thawed", {"amount": 5}),
               _record("a1", 3, "Frozen", {"amount": -1})]
    results = [replay(view, records) for view in views]
    frozen, thawed = seen["Frozen"], seen["Thawed"]
    assert len(frozen) == len(thawed) == 3 and all(e == Frozen(Decimal(5)) for e in frozen)
    assert frozen[0] is frozen[1] is frozen[2]  # one decode, shared
    assert len({id(e) for e in thawed}) == 3  # each view its own, to change as it likes
    assert all([e["seq"] for e in r.errors] == [3] for r in results)  # a refusal is never memoised away


def test_json_number_refuses_a_number_sent_as_a_string():
    class Charged(msgspec.Struct, frozen=True):
        fee: Annotated[Decimal, Check(ge=0, json_number=True)]
        note: str = ""

    view = View(name="charges_api", tables=(Table.per_stream("charges_api", key="k", columns={
        "fee": Column(DECIMAL(8, 2))}),), subscribes=("account",))
    view.on(Charged)(lambda e, tables: tables.charges_api.save(fee=e.fee))
    result = replay(view, [_record("a1", 1, "Charged", {"fee": 12.5}), _record("a2", 1, "Charged", {"fee": "12.5"}),
                           _record("a3", 1, "Charged", {"fee": "NaN"}), _record("a4", 1, "Charged", {"fee": 0})])
    assert [(r["k"], r["fee"]) for r in result.tables["charges_api"]] == [("a1", Decimal("12.50")),
                                                                          ("a4", Decimal("0.00"))]
    assert [(e["stream_id"], e["message"]) for e in result.errors] == [
        ("a2", "Charged: `fee` must be a JSON number, got a string"),
        ("a3", "Charged: `fee` must be a finite number, got NaN")]


class Line(msgspec.Struct, frozen=True):
    price: Annotated[Decimal, Check(gt=0)]


class Basket(msgspec.Struct, frozen=True):  # Line's check would not run when a Basket is decoded
    line: Line


class Prices(msgspec.Struct, frozen=True):
    prices: tuple[Annotated[Decimal, Check(gt=0)], ...]


def test_a_check_on_an_optional_field_runs_and_one_no_decoder_would_run_is_refused_at_registration():
    class Tipped(msgspec.Struct, frozen=True):
        tip: Optional[Annotated[Decimal, Check(ge=0)]] = None
        fee: Annotated[Decimal, Check(ge=0)] | None = None

    view = View(name="tips_api", tables=(Table.per_stream("tips_api", key="k", columns={}),), subscribes=("account",))
    view.on(Tipped)(lambda e, tables: None)
    result = replay(view, [_record("a1", 1, "Tipped", {"tip": -1}), _record("a2", 1, "Tipped", {"fee": -2}),
                           _record("a3", 1, "Tipped", {"tip": None, "fee": 1})])
    assert [(e["stream_id"], e["message"]) for e in result.errors] == [
        ("a1", "Tipped: `tip` must be >= 0, got -1"), ("a2", "Tipped: `fee` must be >= 0, got -2")]

    for hidden in (Basket, Prices):
        with pytest.raises(TypeError, match="is never run"):
            view.on(hidden)(lambda e, tables: None)
    with pytest.raises(TypeError, match="must be a number"):
        Check(gt="0")


class Tagged(msgspec.Struct, frozen=True):
    tags: list[str]


class Where(msgspec.Struct, frozen=True):
    city: str


class Labelled(msgspec.Struct, frozen=True):
    tags: tuple[str, ...]
    where: Where


def test_a_frozen_payload_that_holds_a_list_is_not_shared_between_views():
    from pipelines.events import payload_decoder

    text = '{"tags": ["x"], "where": {"city": "Oslo"}}'
    tagged = payload_decoder(Tagged)
    assert tagged.decode(text) == tagged.decode(text) and tagged.decode(text) is not tagged.decode(text)
    labelled = payload_decoder(Labelled)  # tuples and a frozen nested class: nothing a handler can change
    assert labelled.decode(text) is labelled.decode(text)


def test_a_flat_view_module_counts_the_rule_module_beside_it_and_nothing_installed(tmp_path, monkeypatch):
    """The README tutorial's layout: `carrier_views.py` on the path, its rules in a module beside it."""
    from pipelines.store.versions import own_modules

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "flat_rules_api.py").write_text("LIMIT = 5\n")
    (tmp_path / "flat_views_api.py").write_text(textwrap.dedent('''
        import json
        import msgspec
        from inorder import Column, Table, View
        from flat_rules_api import LIMIT

        VIEW = View(name="flat_api", tables=(Table.per_stream("flat_api", key="k", columns={"n": Column(int)}),),
                    subscribes=("x",))

        @VIEW.on("E")
        def e(event, tables):
            tables.flat_api.save(n=LIMIT)
    '''))
    importlib.invalidate_caches()
    view = importlib.import_module("flat_views_api").VIEW
    assert list(own_modules(view)) == ["flat_rules_api", "flat_views_api"]  # not json, msgspec or inorder


def test_save_never_writes_another_streams_key_and_a_per_stream_key_is_text():
    view = View(name="keys_api", tables=(Table.per_stream("keys_api", key="k", columns={"n": Column(int)}),),
                subscribes=("account",))
    view.on("Moved")(lambda event, tables: tables.keys_api.save(k="elsewhere", n=1))
    view.on("Noted")(lambda event, tables: tables.keys_api.save(n=0))
    for first_seq in (1, 2):  # the first save of the stream, and one after a row was saved
        records = [_record("a1", 1, "Noted", {})] if first_seq == 2 else []
        result = replay(view, [*records, _record("a1", first_seq, "Moved", {})])
        assert [(e["error_class"], e["exception_type"]) for e in result.errors] == [("bug", "ValueError")]
    with pytest.raises(ValueError, match="a str column"):
        Table.per_stream("counters_api", key="n", columns={"n": Column(int)})
