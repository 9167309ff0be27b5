"""The bank demo's views, unit-tested with the test kit (`pipelines.testing.replay`): no Spark, no store."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from pipelines.testing import replay
from views.account_activity import VIEW as ACTIVITY
from views.accounts import VIEW as ACCOUNTS
from views.daily_totals import VIEW as DAILY


def record(seq: int, event_type: str, stream_id: str = "acct-1", occurred_at: str = "2026-11-01T23:30:00-02:00",
           **payload) -> dict:
    return {"stream_id": stream_id, "seq": seq, "type": event_type, "payload": payload, "occurred_at": occurred_at}


def test_accounts_applies_in_seq_order_and_rejects_an_overdraft():
    result = replay(ACCOUNTS, [record(3, "Withdrawn", amount=30), record(1, "AccountOpened", owner="Ada"),
                               record(2, "Deposited", amount=25.5), record(4, "Deposited", amount=5)])
    assert result.tables["accounts"] == [{"account_id": "acct-1", "owner": "Ada", "balance": Decimal("30.50"),
                                          "status": "open", "version": 4, "event_count": 3}]
    (error,) = result.errors
    assert (error["kind"], error["seq"], error["error_class"], error["message"]) == \
        ("handler_error", 3, "reject", "insufficient funds")
    assert result.counts == {"selected": 4, "applied": 3, "handler_error": 1} and result.parked == []


def test_a_closed_account_refuses_deposits_and_a_duplicate_is_counted_once():
    result = replay(ACCOUNTS, [record(1, "AccountOpened", owner="Ada"), record(2, "AccountClosed"),
                               record(3, "Deposited", amount=1), record(3, "Deposited", amount=1)])
    assert result.tables["accounts"][0]["status"] == "closed"
    assert [e["message"] for e in result.errors] == ["account not open"]
    assert result.counts["duplicate"] == 1


def test_activity_keeps_a_running_total_and_ignores_other_event_types():
    result = replay(ACTIVITY, [record(1, "AccountOpened", owner="Ada"), record(2, "Deposited", amount=10),
                               record(3, "Withdrawn", amount=2.5), record(4, "Deposited", amount="abc")])
    assert [(r["position"], r["seq"], r["running_total"]) for r in result.tables["account_activity"]] == [
        (1, 2, Decimal("10.00")), (2, 3, Decimal("7.50"))]
    assert result.counts["ignored"] == 1
    assert result.errors[0]["message"] == "Deposited: Invalid decimal string - at `$.amount`"


def test_daily_totals_sum_per_utc_day_across_accounts():
    result = replay(DAILY, [record(2, "Deposited", amount=10),  # 2026-11-02 01:30 UTC
                            record(2, "Deposited", "acct-2", "2026-11-01T10:00:00Z", amount=1.25),
                            record(3, "Withdrawn", "acct-2", "2026-11-01T11:00:00Z", amount=1),
                            record(1, "AccountOpened", owner="Ada"),
                            record(1, "AccountOpened", "acct-2", owner="Bob")])
    assert result.tables["daily_totals"] == [
        {"day": date(2026, 11, 1), "deposits": Decimal("1.25"), "withdrawals": Decimal("1.00"),
         "deposit_count": 1, "withdrawal_count": 1},
        {"day": date(2026, 11, 2), "deposits": Decimal("10.00"), "withdrawals": Decimal("0.00"),
         "deposit_count": 1, "withdrawal_count": 0}]


def test_a_bad_line_is_a_malformed_error_and_a_gap_waits():
    result = replay(ACCOUNTS, ["{not json", record(1, "AccountOpened", owner="Ada"), record(3, "Deposited", amount=1)])
    assert result.errors[0]["kind"] == "malformed" and result.errors[0]["line"] == 1
    assert result.watermarks["acct-1"]["last_seq"] == 1 and result.watermarks["acct-1"]["pending_count"] == 1
