"""Quiet hours across clock changes (issue 15, bug 5).

Invariant: when `now` is inside a recipient's quiet hours, the deferral `quiet_hours_end` returns is strictly after
`now`, the recipient's wall clock reads a time outside the window at that instant, and at no instant in between —
the message is held exactly until the window's real end: never to a time already past (a row re-claimed every
second), never past the moment the clock jumps over the end (held 30-60 minutes too long).

"Inside" is judged on the wall clock: an instant is quiet when the local time it shows is in [start, end) (a window
may wrap midnight). The oracle below is written from that definition alone, independent of the code under test.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.ledger.floor import Defer, floor_decision, quiet_hours_end

ZONES = sorted(available_timezones())
FIRST_DAY, LAST_DAY = date(2026, 1, 1), date(2027, 12, 31)
MINUTE = timedelta(minutes=1)
# The longest a window can hold: just under a day, plus an hour the clocks repeat — or, when the clock jumps over
# the only wall times outside the window (02:00-01:00 on the night 01:00-02:00 never happens), one more day.
HORIZON_MINUTES = 50 * 60


def quiet(instant: datetime, tz: str, start: time, end: time) -> bool:
    t = instant.astimezone(ZoneInfo(tz)).time()
    return start <= t < end if start < end else (t >= start or t < end)


def offset_minutes(instant: datetime, zone: ZoneInfo) -> int:
    off = instant.astimezone(zone).utcoffset()
    assert off is not None
    return int(off.total_seconds()) // 60


def real_end(now: datetime, tz: str, start: time, end: time) -> datetime:
    """The first whole minute after `now` that is outside the window, found by walking minute by minute. Exact
    when `now` and the window are on the minute grid: every offset and every offset change of 2026-2027 is on
    whole minutes. The offset is re-read from the zone at each change `transitions` found (else it holds)."""
    zone = ZoneInfo(tz)
    lo, hi = start.hour * 60 + start.minute, end.hour * 60 + end.minute
    base = int(now.timestamp()) // 60
    changes = [int(c.timestamp()) // 60 for c in transitions(tz) if c > now]
    offset = offset_minutes(now, zone)
    for k in range(1, HORIZON_MINUTES):
        u = base + k
        if changes and u >= changes[0]:
            changes.pop(0)
            offset = offset_minutes(datetime.fromtimestamp(u * 60, UTC), zone)
        m = (u + offset) % 1440
        if not (lo <= m < hi if lo < hi else (m >= lo or m < hi)):
            return now + k * MINUTE
    raise AssertionError(f"window {start}-{end} in {tz} never ends after {now}")


def check(now: datetime, tz: str, start: time, end: time) -> None:
    until = quiet_hours_end(now, tz, start, end)
    if not quiet(now, tz, start, end):
        assert until is None
        return
    assert until is not None, "inside quiet hours but no end"
    assert until > now, f"deferral {until} is not after now {now}"
    assert not quiet(until, tz, start, end), f"deferral {until} is still inside quiet hours"
    assert quiet(until - timedelta(microseconds=1), tz, start, end), "the window had already ended before"
    assert until == real_end(now, tz, start, end), "not the window's real end"


@functools.cache
def transitions(tz: str) -> tuple[datetime, ...]:
    """The zone's offset changes in 2026-2027 and the oracle's horizon after it (UTC, to the minute), found by daily
    probes and bisection."""
    zone = ZoneInfo(tz)
    out: list[datetime] = []
    t = datetime.combine(FIRST_DAY, time(), UTC)
    stop = datetime.combine(LAST_DAY + timedelta(days=4), time(), UTC)
    while t < stop:
        nxt = t + timedelta(days=1)
        if t.astimezone(zone).utcoffset() != nxt.astimezone(zone).utcoffset():
            lo, hi = t, nxt
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        t = nxt
    return tuple(out)


def wall_times() -> st.SearchStrategy[time]:
    """A quarter-hour grid (hits the hour a clock change skips or repeats often) or any minute."""
    quarter = st.builds(time, st.integers(0, 23), st.sampled_from([0, 15, 30, 45]))
    return st.one_of(quarter, st.builds(time, st.integers(0, 23), st.integers(0, 59)))


WALL_TIMES = wall_times()
ZONE_INDEX = st.integers(0, len(ZONES) - 1)
CHANGE_INDEX = st.integers(0, 7)
NEAR = st.integers(-75, 75)
COIN = st.booleans()
FALLBACK_ZONES = ("Europe/London", "America/New_York", "Australia/Lord_Howe", "America/Santiago")


@st.composite
def any_day(draw: st.DrawFn) -> tuple[str, datetime]:
    """Any zone, any day of 2026-2027, any minute of that local day (give or take the zone's offset)."""
    tz = ZONES[draw(ZONE_INDEX)]
    day = draw(st.dates(FIRST_DAY, LAST_DAY))
    minutes = draw(st.integers(-14 * 60, 38 * 60 - 1))
    return tz, datetime.combine(day, time(), UTC) + minutes * MINUTE


@st.composite
def near_a_clock_change(draw: st.DrawFn) -> tuple[str, datetime, time, time]:
    """Any zone that changes its clocks in 2026-2027, one of those changes, `now` within a day before it (or just
    after), and a window whose end or start lies on the wall times around the change. (Strategies are built once,
    outside: building them per example is what costs.)"""
    tz = ZONES[draw(ZONE_INDEX)]
    changes = transitions(tz)
    if not changes:
        tz = FALLBACK_ZONES[draw(ZONE_INDEX) % len(FALLBACK_ZONES)]
        changes = transitions(tz)
    change = changes[draw(CHANGE_INDEX) % len(changes)]
    now = change + draw(st.integers(-26 * 60, 90)) * MINUTE
    zone = ZoneInfo(tz)
    before, after = (change - MINUTE).astimezone(zone), change.astimezone(zone)

    def window_edge() -> time:
        if draw(COIN):
            return draw(WALL_TIMES)
        around = (before + MINUTE) if draw(COIN) else after  # the wall time just before the change, or just after
        return (around.replace(tzinfo=None) + draw(NEAR) * MINUTE).time()

    return tz, now, window_edge(), window_edge()


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(any_day(), WALL_TIMES, WALL_TIMES)
def test_deferral_is_future_outside_and_the_real_end_for_every_zone_and_day(at, start, end):
    """Every IANA zone, every day of 2026-2027: the deferral is after now, outside quiet hours, and nothing
    between is outside (minute by minute). Derandomized: a failure prints its example and replays as is."""
    tz, now = at
    if start == end:
        assert quiet_hours_end(now, tz, start, end) is None
        return
    check(now, tz, start, end)


@settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(near_a_clock_change())
def test_deferral_is_the_real_end_around_every_clock_change(case):
    """Around every clock change of 2026-2027 in every zone that has one, with windows ending (or starting) in the
    skipped or repeated hour: the same three properties, which is where today's code broke."""
    tz, now, start, end = case
    if start == end:
        return
    check(now, tz, start, end)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# (zone, now, start, end, expected end) — clocks back: the end wall time happens twice, `now` is in the repeat.
FALL_BACK = [
    # London 2026-10-25: 02:00 BST -> 01:00 GMT. now = 01:15 GMT (the second 01:15); 01:30 BST was 00:30 UTC.
    ("Europe/London", utc(2026, 10, 25, 1, 15), time(0), time(1, 30), utc(2026, 10, 25, 1, 30)),
    # New York 2026-11-01: 02:00 EDT -> 01:00 EST. now = 01:10 EST; a window that wraps midnight.
    ("America/New_York", utc(2026, 11, 1, 6, 10), time(22), time(1, 30), utc(2026, 11, 1, 6, 30)),
]
# Clocks forward: the end wall time never happens; the window ends when the clock jumps over it.
SPRING_FORWARD = [
    # London 2026-03-29: 01:00 GMT -> 02:00 BST, so 01:30 never shows; the jump is at 01:00 UTC (not 01:30).
    ("Europe/London", utc(2026, 3, 29, 0, 30), time(0), time(1, 30), utc(2026, 3, 29, 1)),
    # New York 2026-03-08: 02:00 EST -> 03:00 EDT, so 02:59 never shows; the jump is at 07:00 UTC (not 07:59).
    ("America/New_York", utc(2026, 3, 8, 5, 30), time(23), time(2, 59), utc(2026, 3, 8, 7)),
]


@pytest.mark.parametrize(("tz", "now", "start", "end", "expected"), FALL_BACK)
def test_window_ending_in_the_repeated_hour_defers_into_the_future(tz, now, start, end, expected):
    """Regression (clocks go back): a window ending inside the repeated hour, `now` in the repeat, used to defer
    to the first occurrence — already past, so the row was re-claimed about once a second and showed overdue.
    The deferral is the repeated occurrence, in the future."""
    assert quiet_hours_end(now, tz, start, end) == expected
    decision = floor_decision(now=now, lane="normal", channel="email", still_eligible=True, opted_out_channels=(),
                              sent_today=0, daily_cap=None, tz=tz, quiet_start=start, quiet_end=end)
    assert isinstance(decision, Defer) and decision.until > now


@pytest.mark.parametrize(("tz", "now", "start", "end", "expected"), SPRING_FORWARD)
def test_window_ending_in_the_skipped_hour_ends_when_the_clock_jumps(tz, now, start, end, expected):
    """Regression (clocks go forward): a window ending inside the skipped hour used to hold the message until the
    end wall time read with the old offset — 30-60 minutes after the clock had already jumped past it."""
    assert quiet_hours_end(now, tz, start, end) == expected


def test_first_occurrence_of_a_repeated_end_is_kept_when_it_is_still_ahead():
    """Clocks go back, `now` before the first 01:30: the window ends at that first 01:30 (00:30 UTC), not an hour
    later at the repeat."""
    assert quiet_hours_end(utc(2026, 10, 24, 23, 45), "Europe/London", time(0), time(1, 30)) == utc(2026, 10, 25, 0, 30)


def test_midnight_spanning_windows_still_end_next_morning():
    """A 22:00-07:00 window over an ordinary night and over both clock-change nights ends at 07:00 local."""
    london = ZoneInfo("Europe/London")
    for now in (utc(2026, 6, 1, 22, 30), utc(2026, 3, 28, 23, 30), utc(2026, 10, 24, 22, 30)):
        until = quiet_hours_end(now, "Europe/London", time(22), time(7))
        assert until is not None and until > now
        assert until.astimezone(london).time() == time(7) and until.astimezone(london).date() == now.date() + \
            timedelta(days=1)
