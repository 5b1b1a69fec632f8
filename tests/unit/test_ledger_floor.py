"""Invariants of the floor rules (pure): quiet hours defer in the person's own timezone (never for the critical
lane), the daily cap and eligibility suppress with a reason."""

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from domain.ledger.floor import Defer, Send, Suppress, floor_decision, quiet_hours_end

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
def test_quiet_hours_end_exactly_when_inside_the_window_and_at_its_local_end(now):
    """Inside 22:00-07:00 Berlin time there is an end, in the future, within a night, at 07:00 local; outside
    there is none. (Both branches are asserted: a function that always said None would fail.)"""
    berlin = ZoneInfo("Europe/Berlin")
    local = now.astimezone(berlin).time()
    end = quiet_hours_end(now, "Europe/Berlin", time(22), time(7))
    if local >= time(22) or local < time(7):
        assert end is not None
        assert now < end and (end - now).total_seconds() <= 10 * 3600 + 1  # 9 h, or 10 on the night DST ends
        assert end.astimezone(berlin).time() == time(7)
    else:
        assert end is None


ZONES = ["UTC", "Asia/Kolkata", "Asia/Tokyo", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
         "America/Sao_Paulo", "Pacific/Chatham"]


@given(now=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)),
       tz=st.sampled_from(ZONES), start=st.integers(0, 23), length=st.integers(1, 23))
def test_quiet_hours_across_timezones_and_dst_defer_into_the_future_never_past_a_day(now, tz, start, length):
    """Whatever the zone and whatever DST does that night: inside the window the answer is a moment in the
    future no more than a day (plus a DST hour) away whose local clock reads the window's end (or the first
    valid time after it, when DST skips the end); outside there is none."""
    zone = ZoneInfo(tz)
    qs, qe = time(start), time((start + length) % 24)
    end = quiet_hours_end(now, tz, qs, qe)
    local = now.astimezone(zone).time()
    inside = (qs <= local < qe) if qs < qe else (local >= qs or local < qe)
    assert (end is not None) == inside
    if end is not None:
        assert now < end and (end - now) <= timedelta(hours=25)
        shown = end.astimezone(zone).time()
        gap = (datetime.combine(datetime(2000, 1, 1), shown) - datetime.combine(datetime(2000, 1, 1), qe))
        assert timedelta(0) <= gap <= timedelta(hours=1), (tz, qe, shown)


@given(now=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)),
       tz=st.sampled_from(ZONES))
def test_critical_lane_is_never_deferred_by_quiet_hours(now, tz):
    d = floor_decision(now=now, **{**BASE, "tz": tz, "lane": "critical", "quiet_start": time(0),
                                   "quiet_end": time(23, 59)})
    assert d == Send()


def test_a_code_past_its_end_of_life_is_suppressed_whatever_else_holds():
    """Invariant (issue 25, item 3): a one-time code decided at or after its `expires_at` is never sent — reason
    `code_expired`, before every other rule (quiet hours and the cap never apply to it, an opt-out is beside the
    point); a code still alive goes as before. Today there was no such rule: a code past its life was sent."""
    now = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)  # 23:30 in Tokyo: quiet, which a code ignores
    code = {**BASE, "lane": "critical", "channel": "sms", "sent_today": 9}
    for expired in (now, now - timedelta(seconds=1), now - timedelta(days=3)):
        assert floor_decision(now=now, **code, code_expires_at=expired) == Suppress("code_expired")
        assert floor_decision(now=now, **{**code, "opted_out_channels": ("sms",), "still_eligible": False},
                              code_expires_at=expired) == Suppress("code_expired")
    assert floor_decision(now=now, **code, code_expires_at=now + timedelta(seconds=1)) == Send()
    assert floor_decision(now=now, **code) == Send()  # not a code
