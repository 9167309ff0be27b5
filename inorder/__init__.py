"""inorder: exact read-store projections from events that arrive late, out of order, twice or never.

What a view author imports (docs/VIEWS.md):

    from inorder import View, Table, Column, Event, Reject, replay
"""

from pipelines.engine.normalise import SourceMapping
from pipelines.events import Check, event_type_of
from pipelines.message import Event, Reject
from pipelines.scenario import Scenario, Stream, scenario, stream
from pipelines.testing import Replay, ReplayResult, Row, replay, replay_runs
from pipelines.view import (DECIMAL, INTEGER, AggregateTable, Alerts, AppendTable, Column, KeyedTable, StreamTable,
                            Table, Tables, Thresholds, View, add_column)

__all__ = ["AggregateTable", "Alerts", "AppendTable", "Check", "Column", "DECIMAL", "Event", "INTEGER", "KeyedTable",
           "Replay", "ReplayResult", "Reject", "Row", "Scenario", "SourceMapping", "Stream", "StreamTable", "Table",
           "Tables", "Thresholds", "View", "add_column", "event_type_of", "replay", "replay_runs", "scenario", "stream"]
