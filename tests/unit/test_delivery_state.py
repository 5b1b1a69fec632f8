"""Invariants of an owed row's state (pure, domain/delivery/state.py): "being sent now" is said only while a live
lease holds the row; otherwise the thing that actually holds it is said — a paused lane before a breaker, before
the balance, before quiet hours — then a retry or a schedule with its time, and a due row nothing holds says how
overdue it is. Every state has words a person can act on, with the times they need."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

from hypothesis import given
from hypothesis import strategies as st

from domain.delivery.state import OwedFacts, owed_state, span

NOW = datetime(2026, 11, 30, 8, 59, 30, tzinfo=UTC)
ROW = OwedFacts(id=1, lane="normal", channel="sms", next_attempt_at=NOW - timedelta(minutes=3), cost_cents=5)
PAUSED = {"lane_paused": True, "paused_since": datetime(2026, 11, 30, 8, 56, tzinfo=UTC), "paused_by": "operator:pat"}
BREAKER = {"channel": "webhook", "endpoint_id": 4, "breaker_open_until": NOW + timedelta(seconds=40),
           "failure_streak": 5, "cost_cents": 0}
BROKE = {"short_balance_cents": 0, "short_since": datetime(2026, 11, 30, 7, 12, tzinfo=UTC)}
# 08:59 UTC is 14:29 in Kolkata: inside 14:00-16:00, which ends at 16:00 local (10:30 UTC).
QUIET = {"timezone": "Asia/Kolkata", "quiet_start": time(14), "quiet_end": time(16)}
LEASED = {"leased_until": NOW + timedelta(seconds=20)}
FAILED = {"last_error_class": "server_error", "failed_attempt_no": 3, "failed_status_code": 503}


def test_a_paused_lane_says_since_when_and_by_whom_never_being_sent():
    s = owed_state(replace(ROW, lane="critical", **PAUSED), NOW)
    assert s.kind == "waiting_paused" and s.by == "pat"
    assert s.text.startswith("waiting: lane paused since 08:56 UTC by pat"), s.text
    assert "critical" in s.text and s.next_try == "when the lane is resumed"


def test_a_pause_of_another_day_carries_its_date():
    s = owed_state(replace(ROW, **{**PAUSED, "paused_since": datetime(2026, 11, 28, 23, 5, tzinfo=UTC)}), NOW)
    assert "since 2026-11-28 23:05 UTC" in s.text


def test_an_open_breaker_says_until_when():
    s = owed_state(replace(ROW, **BREAKER), NOW)
    assert s.kind == "waiting_breaker" and s.until == NOW + timedelta(seconds=40)
    assert s.text.startswith("waiting: endpoint's breaker open until 09:00:10 UTC"), s.text
    assert "endpoint 4 failed 5 times in a row" in s.text


def test_a_breaker_whose_time_is_up_holds_nothing():
    s = owed_state(replace(ROW, **{**BREAKER, "breaker_open_until": NOW - timedelta(seconds=1)}), NOW)
    assert s.kind == "overdue"


def test_an_empty_or_short_balance_says_since_when_and_what_it_means():
    s = owed_state(replace(ROW, **BROKE), NOW)
    assert s.kind == "waiting_balance" and s.text.startswith("waiting: balance empty since 07:12 UTC"), s.text
    assert "topped up" in s.text and s.next_try == "after a top-up"
    low = owed_state(replace(ROW, **{**BROKE, "short_balance_cents": 3}), NOW)
    assert low.text.startswith("waiting: balance too low (0.03 left, this message costs 0.05) since 07:12 UTC")


def test_money_already_held_is_not_held_up_by_the_balance():
    assert owed_state(replace(ROW, reserved_cents=5, **BROKE), NOW).kind == "overdue"


def test_quiet_hours_say_until_when_in_the_recipients_own_time():
    s = owed_state(replace(ROW, **QUIET), NOW)
    assert s.kind == "waiting_quiet_hours"
    assert s.text == "waiting: quiet hours until 16:00 Asia/Kolkata (10:30 UTC)"
    assert s.until == datetime(2026, 11, 30, 10, 30, tzinfo=UTC)


def test_quiet_hours_never_hold_the_critical_lane_nor_a_webhook():
    assert owed_state(replace(ROW, lane="critical", **QUIET), NOW).kind == "overdue"
    assert owed_state(replace(ROW, channel="webhook", **QUIET), NOW).kind == "overdue"


def test_a_retry_says_which_attempt_failed_how_and_when_the_next_try_is():
    s = owed_state(replace(ROW, next_attempt_at=NOW + timedelta(seconds=95), **FAILED), NOW)
    assert s.kind == "retrying"
    assert s.text == "retrying: attempt 3 failed (503), next try at 09:01:05 UTC"
    no_code = owed_state(replace(ROW, next_attempt_at=NOW + timedelta(seconds=5), last_error_class="timeout",
                                 failed_attempt_no=2), NOW)
    assert no_code.text.startswith("retrying: attempt 2 failed (the receiver did not answer in time)")


def test_a_retry_that_comes_due_in_quiet_hours_says_so():
    s = owed_state(replace(ROW, next_attempt_at=NOW + timedelta(hours=2), **{**FAILED, **QUIET,
                                                                             "quiet_start": time(16),
                                                                             "quiet_end": time(17)}), NOW)
    assert s.kind == "retrying", s.text
    assert "comes due in quiet hours, which hold it until 17:00 Asia/Kolkata (11:30 UTC)" in s.text, s.text


def test_a_later_message_is_scheduled_with_its_time():
    s = owed_state(replace(ROW, next_attempt_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC)), NOW)
    assert s.kind == "scheduled" and s.text == "scheduled for 2026-12-01 09:00 UTC"


def test_an_overdue_row_says_how_overdue():
    s = owed_state(ROW, NOW)
    assert s.kind == "overdue" and s.text == "due 3 min ago, not yet picked up"
    assert s.next_try == "was due 2026-11-30 08:56:30 UTC"
    failed = owed_state(replace(ROW, **FAILED), NOW)
    assert failed.text == "due 3 min ago, not yet picked up (attempt 3 failed (503))"
    lost = owed_state(replace(ROW, leased_until=NOW - timedelta(minutes=1)), NOW)
    assert "let its lease run out at 08:58:30 UTC" in lost.text
    assert owed_state(replace(ROW, next_attempt_at=NOW), NOW).text == "due just now, not yet picked up"


def test_a_live_lease_is_being_sent_now():
    s = owed_state(replace(ROW, **LEASED), NOW)
    assert (s.kind, s.text) == ("sending", "being sent now")
    assert s.next_try == "now: a worker holds it until 2026-11-30 08:59:50 UTC"


def test_the_one_that_holds_the_row_is_said_in_order():
    everything = {**PAUSED, **BREAKER, **BROKE, **QUIET, "channel": "sms", "cost_cents": 5}
    order = ["waiting_paused", "waiting_breaker", "waiting_balance", "waiting_quiet_hours", "overdue"]
    facts = replace(ROW, **everything)
    seen = []
    for lift in ({"lane_paused": False}, {"breaker_open_until": None}, {"short_balance_cents": None},
                 {"timezone": None}):
        seen.append(owed_state(facts, NOW).kind)
        facts = replace(facts, **lift)
    seen.append(owed_state(facts, NOW).kind)
    assert seen == order


def test_span_reads_like_a_person_says_it():
    assert [span(s) for s in (0, 59, 60, 3599, 3600, 3660, 86400, 3 * 86400)] == [
        "0 s", "59 s", "1 min", "59 min", "1 h", "1 h 1 min", "1 day", "3 days"]


facts = st.builds(
    OwedFacts, id=st.just(1), lane=st.sampled_from(["critical", "high", "normal", "bulk"]),
    channel=st.sampled_from(["sms", "email", "whatsapp", "webhook"]),
    next_attempt_at=st.integers(-7200, 7200).map(lambda s: NOW + timedelta(seconds=s)),
    leased_until=st.none() | st.integers(-60, 60).map(lambda s: NOW + timedelta(seconds=s)),
    last_error_class=st.none() | st.sampled_from(["server_error", "timeout"]),
    cost_cents=st.integers(0, 5), reserved_cents=st.sampled_from([0, 5]),
    endpoint_id=st.none() | st.just(4), lane_paused=st.booleans(),
    paused_since=st.none() | st.just(PAUSED["paused_since"]), paused_by=st.none() | st.just("operator:pat"),
    breaker_open_until=st.none() | st.integers(-60, 60).map(lambda s: NOW + timedelta(seconds=s)),
    short_balance_cents=st.none() | st.integers(0, 4), short_since=st.none() | st.just(BROKE["short_since"]),
    timezone=st.none() | st.sampled_from(["Asia/Kolkata", "UTC"]), quiet_start=st.just(time(14)),
    quiet_end=st.just(time(16)), failed_attempt_no=st.none() | st.integers(1, 8),
    failed_status_code=st.none() | st.just(503))


@given(facts)
def test_being_sent_now_exactly_while_a_live_lease_holds_it(f):
    s = owed_state(f, NOW)
    leased = f.leased_until is not None and f.leased_until > NOW
    assert (s.text == "being sent now") == leased == (s.kind == "sending")
    assert s.text and s.next_try
    if not leased and f.lane_paused:
        assert s.kind == "waiting_paused", "a paused lane holds every row no worker holds"
    if s.kind == "overdue":
        assert f.next_attempt_at <= NOW and ("ago" in s.text or "just now" in s.text)
    if s.kind in ("retrying", "scheduled"):
        assert f.next_attempt_at > NOW and s.until == f.next_attempt_at
