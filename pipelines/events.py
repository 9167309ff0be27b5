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
import inspect
import math
import typing
from dataclasses import dataclass
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

    gt, ge, lt, le: bounds; places: at most this many digits after the point (a Decimal)."""

    gt: Any = None
    ge: Any = None
    lt: Any = None
    le: Any = None
    places: int | None = None

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks the rule, or None. A number that is not finite (a Decimal field takes the JSON
        string "NaN" or "Infinity") is refused, never compared."""
        if value is None:
            return None
        if not _finite(value):
            return f"must be a finite number, got {value}"
        if self.gt is not None and not value > self.gt:
            return f"must be > {self.gt}, got {value}"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {self.ge}, got {value}"
        if self.lt is not None and not value < self.lt:
            return f"must be < {self.lt}, got {value}"
        if self.le is not None and not value <= self.le:
            return f"must be <= {self.le}, got {value}"
        if self.places is not None and isinstance(value, Decimal) and _places(value) > self.places:
            return f"must have at most {self.places} decimal places, got {value}"
        return None


def _finite(value: Any) -> bool:
    return value.is_finite() if isinstance(value, Decimal) else not isinstance(value, float) or math.isfinite(value)


def _places(value: Decimal) -> int:
    """Digits after the point that count (1.500 has one): read off the digits, so that no size of number
    can make the arithmetic context round or raise."""
    _, digits, exponent = value.as_tuple()
    significant = "".join(map(str, digits)).rstrip("0")
    if not significant:
        return 0
    return max(0, -(exponent + len(digits) - len(significant)))


def _checks(event_class: type) -> tuple[tuple[str, Check], ...]:
    hints = typing.get_type_hints(event_class, include_extras=True)
    return tuple((name, meta) for name, hint in hints.items() if typing.get_origin(hint) is typing.Annotated
                 for meta in hint.__metadata__ if isinstance(meta, Check))


class TypedHandler:
    """A handler of one event class, as the engine calls every handler: `(event, tables)`. It decodes the
    payload into the class and calls `function(payload, tables)`, or `function(payload, tables, event)`
    when the function takes a third parameter (the envelope: stream id, seq, occurred_at…)."""

    __slots__ = ("function", "event_class", "_decode", "_checks", "_with_envelope", "__wrapped__")

    def __init__(self, function: Callable[..., None], event_class: type) -> None:
        self.function = self.__wrapped__ = function
        self.event_class = event_class
        self._decode = msgspec.json.Decoder(event_class).decode
        self._checks = _checks(event_class)
        parameters = inspect.signature(function).parameters.values()
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._with_envelope = len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)

    def decode(self, event: Event) -> Any:
        """The payload as an instance of the event class, or `Reject` naming the field that does not fit."""
        try:
            payload = self._decode(event.payload_json)
        except msgspec.ValidationError as exc:
            raise Reject(f"{self._what(event)}: {exc}") from None
        for field_name, check in self._checks:
            problem = check.problem(getattr(payload, field_name))
            if problem is not None:
                raise Reject(f"{self._what(event)}: `{field_name}` {problem}")
        return payload

    def _what(self, event: Event) -> str:
        name = self.event_class.__name__
        return name if event.event_type == name else f"{event.event_type} ({name})"

    def __call__(self, event: Event, tables: Any) -> None:
        if self._with_envelope:
            self.function(self.decode(event), tables, event)
        else:
            self.function(self.decode(event), tables)

    def __reduce__(self):
        return TypedHandler, (self.function, self.event_class)

    def __repr__(self) -> str:
        return f"TypedHandler({self.function.__qualname__}, {self.event_class.__name__})"
