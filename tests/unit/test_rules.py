"""Invariants of the floor rules and journey ordering (pure)."""

from datetime import UTC, datetime, time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.audience import dedupe_key, order_event_audience
from domain.rules import JOURNEY_STEPS, Defer, Send, Suppress, floor_decision, is_further, quiet_hours_end

BASE = {"lane": "normal", "channel": "email", "still_eligible": True, "opted_out_channels": (), "sent_today": 0,
        "daily_cap": 3, "tz": "Asia/Tokyo", "quiet_start": time(22), "quiet_end": time(7)}


def test_quiet_hours_defer_to_their_end_in_recipient_timezone():
    now = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)  # 23:30 in Tokyo
    d = floor_decision(now=now, **BASE)
    assert d == Defer(datetime(2026, 11, 29, 22, 0, tzinfo=UTC))  # 07:00 Tokyo next day


def test_critical_lane_ignores_quiet_hours():
    now = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)
    assert floor_decision(now=now, **{**BASE, "lane": "critical"}) == Send()


def test_daily_cap_suppresses_with_reason():
    now = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)  # noon in Tokyo
    assert floor_decision(now=now, **{**BASE, "sent_today": 3}) == Suppress("daily_cap")


def test_ineligible_and_opted_out_are_suppressed_with_reasons():
    now = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert floor_decision(now=now, **{**BASE, "still_eligible": False}) == Suppress("no_longer_eligible")
    assert floor_decision(now=now, **{**BASE, "opted_out_channels": ("email",)}) == Suppress("opted_out")


@given(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)))
def test_quiet_hours_end_is_in_the_future_and_within_a_day(now):
    end = quiet_hours_end(now, "Europe/Berlin", time(22), time(7))
    if end is not None:
        assert now < end and (end - now).total_seconds() <= 9 * 3600 + 1


def test_journey_order_is_list_position():
    assert is_further("credit_check_done", "initiated")
    assert not is_further("initiated", "credit_check_done")
    assert not is_further("initiated", "initiated")
    assert is_further(JOURNEY_STEPS[0], None)
    with pytest.raises(ValueError):
        is_further("teleported", None)


def test_approved_order_audience_is_webhook_high_and_email_normal():
    msgs = order_event_audience("order.approved", "cust-001", 42)
    assert [(m.channel, m.lane) for m in msgs] == [("webhook", "high"), ("email", "normal")]
    assert dedupe_key(42, "email", "cust-001", "t", "order-1-r2") == dedupe_key(42, "email", "cust-001", "t",
                                                                                 "order-1-r2")
