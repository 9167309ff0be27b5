"""Scenarios for the test kit: a few streams' messages written as events, with seq numbered for you.

    from pipelines.testing import replay, scenario, stream

    order = stream("ord-1", type="order").then(OrderPlaced(customer_id="c-1"), OrderCancelled(reason="duplicate"))
    other = stream("ord-2", type="order").then(("OrderPlaced", {"customer_id": "c-2"}))
    replay(ORDERS, order)
    replay(ORDERS, scenario(order, other).shuffled(seed=7).duplicated("ord-1", 1).dropping("ord-2", 1))
    replay(ORDERS, order.dropping(2))                 # one stream's options make a scenario of it

An event is typed (a msgspec Struct or a dataclass: its `event_type` is its class's, its payload the JSON a
producer would send, numbers as numbers) or `(event_type, payload_dict)` for an untyped one. A stream numbers
its messages from `first_seq` on: `stream("ord-1", type="order", first_seq=3)` goes on where another left off.
The records are JSON Lines in the default record shape (the field names of `SourceMapping()`).

Everything here is a frozen value: `then`, `shuffled`, `duplicated` and `dropping` return a new one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Mapping

import msgspec

from pipelines.events import event_type_of, is_event_class, payload_json


@dataclass(frozen=True)
class Sent:
    """One message as its producer sends it."""

    stream_id: str
    stream_type: str | None  # None: the record has none (the stream type is the source's name)
    seq: int
    event_type: str
    payload: bytes  # its JSON
    occurred_at: str | None = None

    def line(self) -> bytes:
        """The message as one JSON Lines record."""
        record: dict[str, Any] = {"stream_id": self.stream_id, "seq": self.seq, "type": self.event_type,
                                  "payload": msgspec.Raw(self.payload)}
        if self.stream_type is not None:
            record["stream_type"] = self.stream_type
        if self.occurred_at is not None:
            record["occurred_at"] = self.occurred_at
        return msgspec.json.encode(record)


def _event(event: Any) -> tuple[str, bytes]:
    """(event_type, payload JSON) of a typed event or of an `(event_type, payload_dict)` pair."""
    if is_event_class(type(event)):
        return event_type_of(type(event)), payload_json(event)
    if isinstance(event, tuple) and len(event) == 2 and isinstance(event[0], str) and isinstance(event[1], Mapping):
        return event[0], payload_json(dict(event[1]))
    raise TypeError(f"{event!r} is not an event: give an instance of a msgspec Struct or dataclass, or "
                    "(event_type, payload_dict)")


@dataclass(frozen=True)
class Stream:
    """The messages of one stream, seq numbered from `first_seq` in the order `then` was given them."""

    stream_id: str
    stream_type: str | None = None
    first_seq: int = 1
    sent: tuple[Sent, ...] = ()

    def then(self, *events: Any, occurred_at: datetime | str | None = None) -> "Stream":
        """This stream with `events` after its messages (each occurred at `occurred_at`, when given)."""
        at = occurred_at.isoformat() if isinstance(occurred_at, datetime) else occurred_at
        seq = self.first_seq + len(self.sent)
        return replace(self, sent=self.sent + tuple(Sent(self.stream_id, self.stream_type, seq + i, *_event(e), at)
                                                    for i, e in enumerate(events)))

    def shuffled(self, seed: int) -> "Scenario":
        return scenario(self).shuffled(seed)

    def duplicated(self, *seqs: int) -> "Scenario":
        return scenario(self).duplicated(self.stream_id, *seqs)

    def dropping(self, *seqs: int) -> "Scenario":
        return scenario(self).dropping(self.stream_id, *seqs)

    def records(self) -> list[bytes]:
        return scenario(self).records()


def stream(stream_id: str, type: str | None = None, first_seq: int = 1) -> Stream:  # noqa: A002 - the record's word
    """A stream to write events into: `stream("ord-1", type="order").then(OrderPlaced(...), ...)`."""
    return Stream(stream_id, type, first_seq)


@dataclass(frozen=True)
class Scenario:
    """The messages of several streams as they are delivered: stream after stream, each in seq order, then
    the messages resent (duplicates), everything shuffled with `seed` when given (disorder); the messages
    dropped (gaps) are never sent, nor resent."""

    streams: tuple[Stream, ...]
    seed: int | None = None
    resent: tuple[tuple[str, int], ...] = ()  # (stream_id, seq), in the order they are sent again
    dropped: frozenset[tuple[str, int]] = frozenset()

    def shuffled(self, seed: int) -> "Scenario":
        """Delivered in a random order, the same for the same seed."""
        return replace(self, seed=seed)

    def duplicated(self, stream_id: str, *seqs: int) -> "Scenario":
        """These messages of the stream are sent a second time, after the others."""
        return replace(self, resent=self.resent + tuple(self._known(stream_id, seqs)))

    def dropping(self, stream_id: str, *seqs: int) -> "Scenario":
        """These messages of the stream are never sent: the stream has a gap there."""
        return replace(self, dropped=self.dropped | set(self._known(stream_id, seqs)))

    def _known(self, stream_id: str, seqs: tuple[int, ...]) -> list[tuple[str, int]]:
        sent = {(m.stream_id, m.seq) for s in self.streams for m in s.sent}
        unknown = [seq for seq in seqs if (stream_id, seq) not in sent]
        if unknown:
            raise ValueError(f"stream {stream_id!r} has no message at seq {unknown} in this scenario")
        return [(stream_id, seq) for seq in seqs]

    def messages(self) -> list[Sent]:
        """The messages in the order they are delivered."""
        by_id = {(m.stream_id, m.seq): m for s in self.streams for m in s.sent}
        delivered = [m for s in self.streams for m in s.sent] + [by_id[key] for key in self.resent]
        delivered = [m for m in delivered if (m.stream_id, m.seq) not in self.dropped]
        if self.seed is not None:
            random.Random(self.seed).shuffle(delivered)
        return delivered

    def records(self) -> list[bytes]:
        """The messages as the JSON Lines records of one batch, in the order they are delivered."""
        return [m.line() for m in self.messages()]


def scenario(*streams: Stream) -> Scenario:
    """Several streams delivered together: `scenario(a, b).shuffled(seed=1).duplicated("a", 2).dropping("b", 3)`."""
    return Scenario(tuple(streams))
