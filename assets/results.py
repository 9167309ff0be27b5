"""Each step's typed result as one JSON metadata entry, RESULT, beside the keys the UI shows: `inorder`
decodes that entry (`decoded`) and never rebuilds a result from the UI's keys."""

from __future__ import annotations

from dataclasses import asdict
from typing import Mapping, TypeVar, get_origin, get_type_hints

import dagster as dg

from pipelines.engine.ingest import IngestResult
from pipelines.engine.stats import ProjectionStats
from pipelines.facade import Reingested
from pipelines.serve.publish import Publication
from pipelines.store.versions import RemovedView

RESULT = "inorder/result"
# the records a step writes, each with its fields that hold other records (one, or a list of them)
RECORDS: dict[type, dict[str, type]] = {
    IngestResult: {}, Publication: {}, RemovedView: {}, ProjectionStats: {"publications": Publication},
    Reingested: {"entries": IngestResult, "projection": ProjectionStats}}
Record = TypeVar("Record")


def result_metadata(record: object) -> dict[str, dg.MetadataValue]:
    return {RESULT: dg.MetadataValue.json(asdict(record))}


def decoded(record_type: type[Record], metadata: Mapping[str, dg.MetadataValue]) -> Record | None:
    """The result of type `record_type` that the metadata (a materialisation's, an output's…) carries, if any."""
    entry = metadata.get(RESULT)
    return None if entry is None else _record(record_type, entry.value)


def _record(record_type: type[Record], data: dict) -> Record:
    nested, hints = RECORDS[record_type], get_type_hints(record_type)

    def value(name: str, value: object) -> object:
        if name not in nested:  # JSON has no tuple: a tuple comes back a list
            return tuple(value) if get_origin(hints[name]) is tuple else value
        return [_record(nested[name], v) for v in value] if isinstance(value, list) else _record(nested[name], value)

    return record_type(**{name: value(name, v) for name, v in data.items()})
