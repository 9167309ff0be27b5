"""A message as it crosses a pass (`Message`), as a handler sees it (`Event`), and how a handler refuses it
(`Reject`)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, NamedTuple


class Message(NamedTuple):
    """One normalised message of a stream as it crosses the pass (the stream id travels beside it).

    Its fields are the columns a pass reads and writes for a message (pipelines/engine/inputs.py and
    executor.py build both from `Message._fields`)."""

    seq: int
    entry_idx: int  # the ingest-log entry (batch) that brought it
    line: int
    batch_id: str
    event_type: str
    payload: str  # canonical JSON
    occurred_at: str | None
    event_id: str | None
    stream_type: str

    @property
    def content(self) -> tuple:
        """What makes two copies of one seq the same message (CONCEPTS §2: else a conflict)."""
        return self[4:8]


class Event:
    """One message as a handler sees it. The payload is decoded on first use."""

    __slots__ = ("stream_id", "stream_type", "seq", "event_type", "payload_json", "occurred_at",
                 "event_id", "batch_id", "_payload")

    def __init__(self, stream_id: str, message: Message) -> None:
        self.stream_id = stream_id
        # one unpacking in Message's field order: this runs for every message a handler sees
        (self.seq, _, _, self.batch_id, self.event_type, self.payload_json, self.occurred_at, self.event_id,
         self.stream_type) = message
        self._payload: Any = None

    @property
    def payload(self) -> Any:
        if self._payload is None:
            self._payload = _decode_payload(self.payload_json)
        return self._payload


_PAYLOAD_DECODER = json.JSONDecoder(parse_float=Decimal)


def _decode_payload(text: str) -> Any:
    """Payloads are canonical JSON; numbers with a fraction become exact Decimals (money must not drift)."""
    return _PAYLOAD_DECODER.raw_decode(text)[0]


class Reject(Exception):
    """Raised by a handler to refuse a message for a business reason ("insufficient funds").

    The message becomes a `handler_error` row of class `reject` and the view's `on_error` policy
    applies. Any other exception escaping a handler is a bug in the view (class `bug`, policy `on_bug`)."""
