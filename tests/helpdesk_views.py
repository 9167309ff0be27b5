"""A user's own view module, of a domain that is neither the bank nor the shop: help-desk tickets.

Tests load it as `tests.helpdesk_views`, and copy it outside the repository as `helpdesk_views` (on
PYTHONPATH, named in INORDER_VIEWS) for the CLI. Every column type is written, read back by a later
event and computed with, so a value that came back from the store with another Python type than
it went in with breaks a handler (a bug: the stream parks) or changes a result.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Protocol

from pipelines.view import (AggregateTable, AppendTable, Event, KeyedTable, Reject, Table, View, between, in_set,
                            not_null, unique)

TICKETS = Table("tickets", columns={
    "ticket_id": "VARCHAR", "title": "VARCHAR", "status": "VARCHAR", "opened_on": "DATE", "opened_at": "TIMESTAMPTZ",
    "priority": "INTEGER", "replies": "BIGINT", "urgent": "BOOLEAN", "effort_hours": "DOUBLE",
    "cost": "DECIMAL(10,2)", "days_open": "INTEGER", "hours_to_reply": "DOUBLE", "last_on": "DATE",
}, primary_key=("ticket_id",), kind="keyed", stream_key="ticket_id")
TICKET_LOG = Table("ticket_log", columns={
    "ticket_id": "VARCHAR", "n": "BIGINT", "at": "TIMESTAMPTZ", "on_day": "DATE", "kind": "VARCHAR",
    "same_day": "BOOLEAN", "gap_hours": "DOUBLE", "cost_so_far": "DECIMAL(12,2)",
}, primary_key=("ticket_id", "n"), kind="append", stream_key="ticket_id")
TICKET_DAYS = Table("ticket_days", columns={
    "day": "DATE", "opened": "BIGINT", "effort_hours": "DOUBLE", "cost": "DECIMAL(12,2)", "urgent": "INTEGER",
}, primary_key=("day",), kind="aggregate")


class HelpdeskTables(Protocol):
    tickets: KeyedTable
    ticket_log: AppendTable
    ticket_days: AggregateTable


HELPDESK = View(
    name="helpdesk",
    tables=(TICKETS, TICKET_LOG, TICKET_DAYS),
    subscribes=("ticket",),
    on_error="park",
    expectations=(
        *not_null("tickets", "ticket_id", "status", "opened_on", "opened_at", "cost"),
        unique("tickets", "ticket_id"),
        in_set("tickets", "status", ("open", "closed")),
        between("tickets", "priority", min_value=1, max_value=5),
        unique("ticket_log", "ticket_id", "n"),
        between("ticket_days", "opened", min_value=0),
    ),
)


def _moment(event: Event) -> datetime:
    try:
        return datetime.fromisoformat(event.occurred_at.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (AttributeError, ValueError):
        raise Reject(f"occurred_at {event.occurred_at!r} is not an ISO 8601 time") from None


def _ticket(event: Event, tables: HelpdeskTables) -> dict:
    row = tables.tickets.get(event.stream_id)
    if row is None:
        raise Reject("no such ticket")
    # the types a handler relies on, in every run however the messages were split
    assert type(row["opened_on"]) is date and type(row["opened_at"]) is datetime
    assert row["opened_at"].tzinfo is timezone.utc and type(row["cost"]) is Decimal
    assert type(row["urgent"]) is bool and type(row["effort_hours"]) is float and type(row["priority"]) is int
    return row


def _log(event: Event, tables: HelpdeskTables, row: dict, kind: str) -> None:
    at = _moment(event)
    last = tables.ticket_log.last()
    if last is not None:
        assert type(last["at"]) is datetime and type(last["on_day"]) is date and type(last["same_day"]) is bool
        assert type(last["cost_so_far"]) is Decimal and type(last["gap_hours"]) is float
    tables.ticket_log.append({
        "ticket_id": event.stream_id, "n": 1 if last is None else last["n"] + 1, "at": at, "on_day": at.date(),
        "kind": kind, "same_day": last is not None and last["on_day"] == at.date(),
        "gap_hours": 0.0 if last is None else (at - last["at"]).total_seconds() / 3600,
        "cost_so_far": row["cost"]})


@HELPDESK.on("TicketOpened")
def opened(event: Event, tables: HelpdeskTables) -> None:
    p = event.payload
    priority, urgent, cost = p.get("priority"), p.get("urgent"), p.get("cost")
    if type(priority) is not int or not 1 <= priority <= 5:
        raise Reject(f"priority must be 1..5, got {priority!r}")
    if type(urgent) is not bool or type(cost) not in (int, Decimal):
        raise Reject("urgent must be a boolean and cost a number")
    at = _moment(event)
    row = {"ticket_id": event.stream_id, "title": str(p.get("title", "")), "status": "open", "opened_on": at.date(),
           "opened_at": at, "priority": priority, "replies": 0, "urgent": urgent, "effort_hours": 0.0,
           "cost": cost, "days_open": 0, "hours_to_reply": None, "last_on": at.date()}
    tables.tickets.put(row)
    _log(event, tables, tables.tickets.get(event.stream_id), "opened")
    tables.ticket_days.add({"day": at.date()}, opened=1, urgent=1 if urgent else 0, cost=cost)


@HELPDESK.on("Replied")
def replied(event: Event, tables: HelpdeskTables) -> None:
    row, at = _ticket(event, tables), _moment(event)
    if row["hours_to_reply"] is None:
        row["hours_to_reply"] = (at - row["opened_at"]).total_seconds() / 3600
    row["replies"] += 1
    row["days_open"], row["last_on"] = (at.date() - row["opened_on"]).days, at.date()
    tables.tickets.put(row)
    _log(event, tables, row, "replied")


@HELPDESK.on("EffortLogged")
def effort(event: Event, tables: HelpdeskTables) -> None:
    row, hours = _ticket(event, tables), event.payload.get("hours")
    rate = event.payload.get("rate", 0)
    if type(hours) not in (int, Decimal) or hours <= 0 or type(rate) not in (int, Decimal):
        raise Reject(f"hours must be a positive number, got {hours!r}")
    row["effort_hours"] += float(hours)  # quarter hours: exact in binary, so sums never depend on order
    row["cost"] += Decimal(hours) * rate
    if row["cost"] >= Decimal("100000000"):
        raise Reject("cost over the ticket limit")
    tables.tickets.put(row)
    _log(event, tables, tables.tickets.get(event.stream_id), "effort")
    tables.ticket_days.add({"day": row["opened_on"]}, effort_hours=float(hours), cost=Decimal(hours) * rate)


@HELPDESK.on("Closed", "Reopened")
def closed_or_reopened(event: Event, tables: HelpdeskTables) -> None:
    row, at = _ticket(event, tables), _moment(event)
    row["status"] = "closed" if event.event_type == "Closed" else "open"
    row["days_open"], row["last_on"] = (at.date() - row["opened_on"]).days, at.date()
    row["urgent"] = row["urgent"] and event.event_type == "Reopened"
    tables.tickets.put(row)
    _log(event, tables, row, event.event_type.lower())
