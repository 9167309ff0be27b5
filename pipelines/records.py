"""The records that cross the pass's boundaries, each declared once as a typed NamedTuple: a message (`Message`,
pipelines/message.py), a walked stream's watermark (`WatermarkRecord`, here), an error and a gap
(pipelines/engine/pass_data.py). Their fields' Python types give the Arrow types of the pass's files
(`arrow_columns`) and the SQL types of the store's tables (`ddl_columns`), and the engine's SQL names their
columns through `select` (tests/fast/test_architecture.py: no SQL in pipelines/ spells them by hand)."""

from __future__ import annotations

import typing
from typing import NamedTuple, NewType

import pyarrow as pa

Micros = NewType("Micros", int)  # a moment (TIMESTAMPTZ) as microseconds since the epoch, UTC
UTC_MICROS = pa.timestamp("us", tz="UTC")  # TIMESTAMPTZ: DuckDB's, Spark's (session time zone UTC) and Parquet's
_TYPES = {int: (pa.int64(), "BIGINT"), str: (pa.string(), "VARCHAR"), bool: (pa.bool_(), "BOOLEAN"),
          Micros: (UTC_MICROS, "TIMESTAMPTZ")}


class WatermarkRecord(NamedTuple):
    """A walked (view, stream)'s state after the pass; `entry_idx` is the last entry that walked it (the
    store's `updated_entry`)."""

    view: str
    stream_id: str
    entry_idx: int
    stream_type: str | None
    last_seq: int
    blocked_at: int | None
    blocked_since: Micros | None
    parked: bool
    pending_count: int
    attempts: int

    def state(self) -> dict:
        """The fields a stream's state starts from (`StreamState.loaded`), as the commit keeps them."""
        return {name: getattr(self, name) for name in WATERMARK_STATE}


WATERMARK_STATE = WatermarkRecord._fields[3:]  # what the store keeps of a stream's walk, beside its key
# what a pass loads of it: the walk counts the buffer it is given itself
LOADED_STATE = tuple(name for name in WATERMARK_STATE if name != "pending_count")
STORED_WATERMARK = {"entry_idx": "updated_entry"}  # the store's name of a watermark field, where it differs


def _columns(record: type, names: typing.Iterable[str], rename: dict[str, str] | None) -> list[tuple[str, tuple]]:
    """`record`'s fields `names`, each under its `rename`d name where given, with its (Arrow, SQL) types: its
    Python type's, `None` dropped from an optional one."""
    hints = typing.get_type_hints(record)
    return [((rename or {}).get(name, name),
             _TYPES[next(t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None))])
            for name in names]


def arrow_columns(record: type, names: typing.Iterable[str], rename: dict[str, str] | None = None
                  ) -> list[tuple[str, pa.DataType]]:
    """`record`'s fields `names` as Arrow columns, under their `rename`d names where given."""
    return [(name, arrow) for name, (arrow, _) in _columns(record, names, rename)]


def ddl_columns(record: type, names: typing.Iterable[str], clauses: dict[str, str],
                rename: dict[str, str] | None = None) -> list[str]:
    """`record`'s fields `names` as column definitions of a CREATE TABLE, each with its `clauses` (NOT NULL…)."""
    return [" ".join(filter(None, (name, sql, clauses.get(name, "")))) for name, (_, sql) in
            _columns(record, names, rename)]


def select(alias: str, names: typing.Iterable[str], source: dict[str, str] | None = None,
           target: dict[str, str] | None = None) -> str:
    """A SELECT list of the fields `names` from `alias`, whose columns bear their `source` names where given,
    each `AS` its `target` name where given."""
    columns = []
    for name in names:
        read, written = (source or {}).get(name, name), (target or {}).get(name, name)
        columns.append(f"{alias}.{read}" if read == written else f"{alias}.{read} AS {written}")
    return ", ".join(columns)
