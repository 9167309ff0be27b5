"""Typed events: a handler registered for an event class gets the payload decoded into that class.

An event class is a `msgspec.Struct` or a dataclass. Its name on the wire (the message's `event_type`) is
the class name, or its `__event_type__` when the feed spells it otherwise:

    class OrderPaid(msgspec.Struct):
        amount: Annotated[Decimal, Check(gt=0, places=2)]
        paid_at: datetime

The payload is decoded once, by msgspec, straight from the message's JSON: a JSON number becomes an exact
`Decimal`, an ISO string a `date` or `datetime`. A payload that does not fit the class (a missing field, a
string where a number belongs, a failed constraint) is refused with a `Reject` naming the field: it is
data, never a bug in the view. Constraints are msgspec's own `Meta` (on `int`, `float`, `str`…) and
`Check`, which also holds for `Decimal` (msgspec's `Meta` cannot bound one).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import inspect
import math
import operator
import types
import typing
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable

import msgspec

from pipelines.message import Event, Reject

_WIRE = msgspec.json.Encoder(decimal_format="number")  # a Decimal goes out as the JSON number it is


def event_type_of(event_class: type) -> str:
    """The `event_type` messages of this class carry: `__event_type__` if the class sets it, else its name."""
    return vars(event_class).get("__event_type__") or event_class.__name__


def is_event_class(value: Any) -> bool:
    return isinstance(value, type) and (issubclass(value, msgspec.Struct) or dataclasses.is_dataclass(value))


def payload_json(event: Any) -> bytes:
    """A typed event as the payload JSON a producer would send (numbers as numbers, times as ISO 8601)."""
    return _WIRE.encode(event)


@dataclass(frozen=True)
class Check:
    """Bounds on a number field, checked after decoding: `Annotated[Decimal, Check(gt=0, places=2)]`.

    gt, ge, lt, le: bounds; places: at most this many digits after the point (a Decimal); json_number: the
    value must come as a JSON number (a Decimal field otherwise also reads one from a string, "12.50")."""

    gt: Any = None
    ge: Any = None
    lt: Any = None
    le: Any = None
    places: int | None = None
    json_number: bool = False
    # the bounds given, as (operator, bound): a payload's field is checked on every message
    _bounds: tuple[tuple[str, Any], ...] = field(default=(), init=False, repr=False, compare=False)
    _quantum: Decimal | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
        for word, bound in given:
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float, Decimal))):
                raise TypeError(f"Check: the bound {word} {bound!r} must be a number")
        object.__setattr__(self, "_bounds", tuple(b for b in given if b[1] is not None))
        object.__setattr__(self, "_quantum", None if self.places is None else Decimal(1).scaleb(-self.places))

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks the rule, or None. A number that is not finite (a Decimal field takes the JSON
        string "NaN" or "Infinity") is refused, never compared."""
        if value is None:
            return None
        exact = isinstance(value, Decimal)
        if not (value.is_finite() if exact else not isinstance(value, float) or math.isfinite(value)):
            return f"must be a finite number, got {value}"
        for word, bound in self._bounds:
            if not _HOLDS[word](value, bound):
                return f"must be {word} {bound}, got {value}"
        if exact and self.places is not None and _places(value) > self.places:
            return f"must have at most {self.places} decimal places, got {value}"
        return None

    def may_fail(self, v: str, names: dict[str, Any]) -> str:
        """A Python expression, true when the value in variable `v` may break the rule (then `problem` tells):
        what a payload's checker runs on every message, so the common case costs a few comparisons.
        `names` receives the values it refers to."""
        key = f"_check{len(names)}"
        tests = [f"not ({v}.is_finite() if isinstance({v}, _Decimal) else not isinstance({v}, float) "
                 f"or _isfinite({v}))"]
        for n, (word, bound) in enumerate(self._bounds):
            names[f"{key}_{n}"] = bound
            tests.append(f"not {v} {word} {key}_{n}")
        if self.places is not None:
            # rounding to the places tells at once, for any number that rounding cannot make too long
            names[f"{key}_q"] = self._quantum
            tests.append(f"(isinstance({v}, _Decimal) and ({v}.adjusted() >= {_QUICK_DIGITS - self.places} or "
                         f"{v} != {v}.quantize({key}_q, context=_ROUNDING)))")
        return " or ".join(tests)


_HOLDS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_QUICK_DIGITS = 900
_ROUNDING = decimal.Context(prec=_QUICK_DIGITS + 100)  # rounds any number under 1E+900 to a few places


def _places(value: Decimal) -> int:
    """Digits after the point that count (1.500 has one): read off the digits, so that no size of number
    can make the arithmetic context round or raise."""
    _, digits, exponent = value.as_tuple()
    significant = "".join(map(str, digits)).rstrip("0")
    if not significant:
        return 0
    return max(0, -(exponent + len(digits) - len(significant)))


def payload_checker(checks: tuple[tuple[str, Check], ...]) -> Callable[[Any], tuple[str, str] | None]:
    """One function over a decoded payload's checked fields: (field, problem) for the first that breaks its
    rule, or None. Generated, because it runs on every message: a field that keeps its rule costs the
    comparisons of `Check.may_fail`, and only a field that may not is worded by `Check.problem`."""
    names: dict[str, Any] = {"_Decimal": Decimal, "_isfinite": math.isfinite, "_ROUNDING": _ROUNDING}
    body = ["def check(payload):"]
    for n, (field_name, check) in enumerate(checks):
        names[f"_c{n}"] = check
        body += [f"    v{n} = payload.{field_name}",
                 f"    if v{n} is not None and ({check.may_fail(f'v{n}', names)}):",
                 f"        problem = _c{n}.problem(v{n})",
                 "        if problem is not None:",
                 f"            return {field_name!r}, problem"]
    body.append("    return None")
    exec("\n".join(body), names)  # noqa: S102 - built from the class's field names, which are identifiers
    return names["check"]


def _checks(event_class: type) -> tuple[tuple[str, Check], ...]:
    """Each field's `Check`: on the field (`Annotated[Decimal, Check(...)]`), or on an optional one
    (`Annotated[Decimal, Check(...)] | None`, which a null keeps). A `Check` anywhere deeper (in a list, a
    nested class's field seen from here) would never run: refused, so that no rule is silently skipped."""
    found = []
    for name, hint in typing.get_type_hints(event_class, include_extras=True).items():
        choices = typing.get_args(hint) if _is_union(hint) else (hint,)
        for choice in choices:
            if typing.get_origin(choice) is typing.Annotated:
                found += [(name, meta) for meta in choice.__metadata__ if isinstance(meta, Check)]
                choice = typing.get_args(choice)[0]
            if _holds_check(choice):
                raise TypeError(f"{event_class.__name__}.{name}: a Check inside {choice!r} is never run: put it on "
                                "the field itself (or on the nested class's own field, registered as its own type)")
    return tuple(found)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _holds_check(hint: Any, seen: frozenset = frozenset()) -> bool:
    """Does a Check hide in `hint`: in its arguments (list[Annotated[…, Check]]) or a nested class's fields?"""
    if typing.get_origin(hint) is typing.Annotated and any(isinstance(m, Check) for m in hint.__metadata__):
        return True
    if isinstance(hint, type) and is_event_class(hint) and hint not in seen:
        return any(_holds_check(h, seen | {hint}) for h in typing.get_type_hints(hint, include_extras=True).values())
    return any(_holds_check(arg, seen) for arg in typing.get_args(hint))


# the field types whose decoded values cannot be changed: a frozen class of only these is shared by the views
_IMMUTABLE = (str, int, float, bool, Decimal, datetime.date, datetime.datetime, datetime.time, bytes, type(None))


def _immutable(hint: Any) -> bool:
    origin = typing.get_origin(hint)  # no Annotated: `_shareable` reads the hints without their extras
    if origin is typing.Literal or hint in _IMMUTABLE:
        return True
    if origin in (tuple, frozenset) or _is_union(hint):
        return all(_immutable(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)
    return isinstance(hint, type) and is_event_class(hint) and _shareable(hint)


def _shareable(event_class: type) -> bool:
    """Frozen, and every field of an immutable type: no handler can change a decoded payload, so one object can
    serve every view of a message."""
    config = getattr(event_class, "__struct_config__", None)
    frozen = bool(config.frozen) if config is not None else \
        dataclasses.is_dataclass(event_class) and event_class.__dataclass_params__.frozen
    return frozen and all(_immutable(hint) for hint in typing.get_type_hints(event_class).values())


_ANY_JSON = msgspec.json.Decoder().decode


class _Unfit(Exception):
    """A decoded payload's field broke its `Check`: (field, problem)."""


class PayloadDecoder:
    """Decodes payloads of one event class: msgspec's decoder, then the class's checks. The payloads of a
    frozen class of immutable fields are shared: the same text decodes to an equal value that no handler can
    change, so every view of a message takes the one object (the bank's three views of a deposit decode it
    once). The memo holds the process's recent texts, and starts again when full."""

    MEMO_SIZE = 4096

    def __init__(self, event_class: type) -> None:
        self._decode = msgspec.json.Decoder(event_class).decode
        checks = _checks(event_class)
        self._check = payload_checker(checks) if checks else None
        self._json_numbers = tuple(name for name, check in checks if check.json_number)
        self._memo: dict[str, Any] | None = {} if _shareable(event_class) else None

    def decode(self, text: str) -> Any:
        """The payload; raises msgspec.ValidationError (it does not fit the class) or `_Unfit`."""
        memo = self._memo
        if memo is not None:
            payload = memo.get(text)
            if payload is not None:
                return payload
        payload = self._decode(text)
        if self._check is not None:
            broken = self._check(payload)
            if broken is not None:
                raise _Unfit(*broken)
        if self._json_numbers:
            sent = _ANY_JSON(text)  # an object: the class decoded from it
            for name in self._json_numbers:
                if sent.get(name).__class__ is str:
                    raise _Unfit(name, "must be a JSON number, got a string")
        if memo is not None:
            if len(memo) >= self.MEMO_SIZE:
                memo.clear()
            memo[text] = payload
        return payload


@functools.lru_cache(maxsize=None)
def payload_decoder(event_class: type) -> PayloadDecoder:
    """The one decoder of an event class in this process, which every view's handler of it shares."""
    return PayloadDecoder(event_class)


class TypedHandler:
    """A handler of one event class, as the engine calls every handler: `(event, tables)`. It decodes the
    payload into the class and calls `function(payload, tables)`, or `function(payload, tables, event)`
    when the function takes a third parameter (the envelope: stream id, seq, occurred_at…)."""

    __slots__ = ("function", "event_class", "_decode", "_with_envelope", "__wrapped__")

    def __init__(self, function: Callable[..., None], event_class: type) -> None:
        self.function = self.__wrapped__ = function
        self.event_class = event_class
        self._decode = payload_decoder(event_class).decode
        parameters = inspect.signature(function).parameters.values()
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._with_envelope = len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)

    def _refusal(self, event: Event, exc: Exception) -> Reject:
        """A payload that does not fit the class is refused (data), naming the field, never a bug."""
        name = self.event_class.__name__
        what = name if event.event_type == name else f"{event.event_type} ({name})"
        return Reject(f"{what}: `{exc.args[0]}` {exc.args[1]}" if isinstance(exc, _Unfit) else f"{what}: {exc}")

    def __call__(self, event: Event, tables: Any) -> None:
        try:
            payload = self._decode(event.payload_json)
        except (msgspec.DecodeError, _Unfit) as exc:  # ValidationError is a DecodeError
            raise self._refusal(event, exc) from None
        if self._with_envelope:
            self.function(payload, tables, event)
        else:
            self.function(payload, tables)

    def __reduce__(self):
        return TypedHandler, (self.function, self.event_class)

    def __repr__(self) -> str:
        return f"TypedHandler({self.function.__qualname__}, {self.event_class.__name__})"
