"""A user's own view module, of a domain that is neither the bank nor the shop: help-desk tickets.

Tests load it as `tests.helpdesk_views`, and copy it outside the repository as `helpdesk_views` (on
PYTHONPATH, named in INORDER_VIEWS) for the CLI. Every column type is written, read back by a later
event and computed with, so a value that came back from the store with another Python type than
it went in with breaks a handler (a bug: the stream parks) or changes a result."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Annotated

import msgspec

from inorder import DECIMAL, INTEGER, Check, Column, Event, Reject, Table, View


class TicketOpened(msgspec.Struct, frozen=True):
    priority: Annotated[int, msgspec.Meta(ge=1, le=5)]
    urgent: bool
    cost: Decimal
    title: str = ""


class Replied(msgspec.Struct, frozen=True):
    pass


class EffortLogged(msgspec.Struct, frozen=True):
    hours: Annotated[Decimal, Check(gt=0)]
    rate: Decimal = Decimal(0)


class Closed(msgspec.Struct, frozen=True):
    pass


class Reopened(msgspec.Struct, frozen=True):
    pass


TICKETS = Table.per_stream("tickets", key="ticket_id", columns={
    "ticket_id": Column(str, not_null=True, unique=True), "title": Column(str),
    "status": Column(str, not_null=True, one_of=("open", "closed")), "opened_on": Column(date, not_null=True),
    "opened_at": Column(datetime, not_null=True), "priority": Column(INTEGER, min=1, max=5),
    "replies": Column(int), "urgent": Column(bool), "effort_hours": Column(float),
    "cost": Column(DECIMAL(10, 2), not_null=True), "days_open": Column(INTEGER), "hours_to_reply": Column(float),
    "last_on": Column(date),
})
TICKET_LOG = Table.append("ticket_log", key=("ticket_id", "n"), stream_key="ticket_id", unique=(("ticket_id", "n"),),
                          columns={
    "ticket_id": Column(str), "n": Column(int), "at": Column(datetime), "on_day": Column(date), "kind": Column(str),
    "same_day": Column(bool), "gap_hours": Column(float), "cost_so_far": Column(DECIMAL(12, 2)),
})
TICKET_DAYS = Table.aggregate("ticket_days", key=("day",), columns={
    "day": Column(date), "opened": Column(int, min=0), "effort_hours": Column(float), "cost": Column(DECIMAL(12, 2)),
    "urgent": Column(INTEGER),
})

HELPDESK = View(name="helpdesk", tables=(TICKETS, TICKET_LOG, TICKET_DAYS), subscribes=("ticket",),
                on_error="park")


def _moment(event: Event) -> datetime:
    try:
        return datetime.fromisoformat(event.occurred_at.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (AttributeError, ValueError):
        raise Reject(f"occurred_at {event.occurred_at!r} is not an ISO 8601 time") from None


def _ticket(tables) -> dict:
    row = tables.tickets.row
    if row is None:
        raise Reject("no such ticket")
    # the types a handler relies on, in every run however the messages were split
    assert type(row["opened_on"]) is date and type(row["opened_at"]) is datetime
    assert row["opened_at"].tzinfo is timezone.utc and type(row["cost"]) is Decimal
    assert type(row["urgent"]) is bool and type(row["effort_hours"]) is float and type(row["priority"]) is int
    return row


def _log(event: Event, tables, row: dict, kind: str) -> None:
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


@HELPDESK.on(TicketOpened)
def opened(e: TicketOpened, tables, event: Event) -> None:
    at = _moment(event)
    tables.tickets.save(title=e.title, status="open", opened_on=at.date(), opened_at=at, priority=e.priority,
                        replies=0, urgent=e.urgent, effort_hours=0.0, cost=e.cost, days_open=0, hours_to_reply=None,
                        last_on=at.date())
    _log(event, tables, tables.tickets.row, "opened")
    tables.ticket_days.add({"day": at.date()}, opened=1, urgent=1 if e.urgent else 0, cost=e.cost)


@HELPDESK.on(Replied)
def replied(e: Replied, tables, event: Event) -> None:
    row, at = _ticket(tables), _moment(event)
    tables.tickets.save(replies=row["replies"] + 1, days_open=(at.date() - row["opened_on"]).days, last_on=at.date(),
                        hours_to_reply=(at - row["opened_at"]).total_seconds() / 3600
                        if row["hours_to_reply"] is None else row["hours_to_reply"])
    _log(event, tables, tables.tickets.row, "replied")


@HELPDESK.on(EffortLogged)
def effort(e: EffortLogged, tables, event: Event) -> None:
    row = _ticket(tables)
    cost = row["cost"] + e.hours * e.rate
    if cost >= Decimal("100000000"):
        raise Reject("cost over the ticket limit")
    # quarter hours: exact in binary, so sums never depend on order
    tables.tickets.save(effort_hours=row["effort_hours"] + float(e.hours), cost=cost)
    _log(event, tables, tables.tickets.row, "effort")
    tables.ticket_days.add({"day": row["opened_on"]}, effort_hours=float(e.hours), cost=e.hours * e.rate)


@HELPDESK.on(Closed, Reopened)
def closed_or_reopened(e: Closed | Reopened, tables, event: Event) -> None:
    row, at = _ticket(tables), _moment(event)
    reopened = isinstance(e, Reopened)
    tables.tickets.save(status="open" if reopened else "closed", days_open=(at.date() - row["opened_on"]).days,
                        last_on=at.date(), urgent=row["urgent"] and reopened)
    _log(event, tables, tables.tickets.row, event.event_type.lower())
