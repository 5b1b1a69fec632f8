"""Floor rules no template or campaign can break. All pure.

- quiet hours in the recipient's timezone for every lane but critical: defer to their end, never drop
- a per-recipient daily cap that suppresses with reason `daily_cap`
- send-time eligibility (the fact still holds, the recipient has not opted out)
- a one-time code's life: a code claimed at or after its `expires_at` is never sent (reason `code_expired`)

(The journey step order is the journeys' own: `domain.journeys.steps`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

SuppressReason = Literal[
    "daily_cap", "opted_out", "no_longer_eligible", "superseded", "no_contact_point", "insufficient_balance",
    "campaign_cancelled", "code_expired"
]

def in_quiet_hours(instant: datetime, tz: str, start: time | None, end: time | None) -> bool:
    """Whether the recipient's wall clock reads a time inside [start, end) at `instant` (aware). Windows may wrap
    midnight (22:00-07:00); an empty window (start == end, or either missing) is never quiet."""
    if start is None or end is None or start == end:
        return False
    t = instant.astimezone(ZoneInfo(tz)).time()
    return start <= t < end if start < end else (t >= start or t < end)


# A UTC offset holds for months; probing this often can never step over a change and its undoing.
_OFFSET_PROBE: Final = timedelta(hours=1)
# Each round of quiet_hours_end either answers or moves past one offset change; a few days hold only a few.
_MAX_ROUNDS: Final = 64


def _next_offset_change(zone: ZoneInfo, after: datetime, until: datetime) -> datetime | None:
    """The first instant in (after, until] (aware, UTC) at which `zone`'s UTC offset differs from its offset at
    `after`, or None. Offset changes fall on whole seconds: probe hourly, then bisect over whole seconds."""
    def offset(posix: float) -> timedelta | None:
        return datetime.fromtimestamp(posix, zone).utcoffset()

    before = offset(after.timestamp())
    lo = after
    while lo < until:
        hi = min(lo + _OFFSET_PROBE, until)
        if offset(hi.timestamp()) != before:
            # offset(lo_s) == before: a change in (lo_s, lo] would be a whole second <= lo, hence <= lo_s.
            lo_s, hi_s = math.floor(lo.timestamp()), math.ceil(hi.timestamp())
            while hi_s - lo_s > 1:
                mid = (lo_s + hi_s) // 2
                if offset(mid) == before:
                    lo_s = mid
                else:
                    hi_s = mid
            return datetime.fromtimestamp(hi_s, UTC)
        lo = hi
    return None


def quiet_hours_end(now: datetime, tz: str, start: time | None, end: time | None) -> datetime | None:
    """If `now` (aware) falls in the recipient's quiet hours, return when they really end, in `now`'s timezone;
    else None.

    An instant is quiet when the recipient's wall clock then reads a time in [start, end) (see `in_quiet_hours`);
    windows may wrap midnight (22:00-07:00). The end returned is the FIRST instant after `now` at which the wall
    clock reads a time outside the window — so it is always strictly in the future, it is outside quiet hours, and
    every instant between `now` and it is quiet. Across a clock change that means:

    - the end wall time does not exist that day (clocks go forward over it, e.g. 01:30 on the night London jumps
      from 01:00 to 02:00): the end is the moment the clock jumps, the first instant at or after that wall time
      (not the instant the pre-change offset would give, 30-60 minutes later);
    - the end wall time happens twice (clocks go back over it, e.g. 01:30 on the night London goes from 02:00 back
      to 01:00): the end is the first occurrence that is still after `now` — the earlier one if `now` is before it,
      else the repeated one (not the earlier one, which would already be past and re-claim the row every second);
    - clocks going back can also carry the wall time out of the window below its start (01:45-03:00 on that London
      night: at 02:00 summer time the clock reads 01:00 again): the end is that moment. The window opens again at
      01:45 and defers again then; "first instant outside" is the one reading that never sends inside the window.

    Pure: it reads only the zone database. Walk forward through spans of constant UTC offset: within a span the
    wall clock runs continuously, so a quiet wall time leaves the window exactly when it reaches `end`; a span
    that starts with the clock outside the window ends quiet hours at its first instant.
    """
    if not in_quiet_hours(now, tz, start, end):
        return None
    assert end is not None
    zone = ZoneInfo(tz)
    t = now.astimezone(UTC)
    for _ in range(_MAX_ROUNDS):
        wall = t.astimezone(zone).replace(tzinfo=None)
        wall_end = datetime.combine(wall.date(), end)
        if wall_end <= wall:
            wall_end += timedelta(days=1)
        leaves = t + (wall_end - wall)  # in UTC: where the clock reaches `end` if the offset holds until then
        change = _next_offset_change(zone, t, leaves)
        if change is None:
            return leaves.astimezone(now.tzinfo)
        t = change
        if not in_quiet_hours(t, tz, start, end):
            return t.astimezone(now.tzinfo)
    return t.astimezone(now.tzinfo)  # unreachable for real zones: after now, and the latest bound found


@dataclass(frozen=True)
class Send:
    pass


@dataclass(frozen=True)
class Defer:
    until: datetime


@dataclass(frozen=True)
class Suppress:
    reason: SuppressReason


FloorDecision = Send | Defer | Suppress


def floor_decision(
    *,
    now: datetime,
    lane: str,
    channel: str,
    still_eligible: bool,
    opted_out_channels: tuple[str, ...],
    sent_today: int,
    daily_cap: int | None,
    tz: str,
    quiet_start: time | None,
    quiet_end: time | None,
    code_expires_at: datetime | None = None,
) -> FloorDecision:
    """Evaluated at send time by the worker, in this order: a code's life, eligibility, opt-out, quiet hours, cap
    (the critical lane — one-time codes — skips quiet hours and the cap).

    `code_expires_at`: a one-time code's end of life (None: not a code). A code still owed at or after it is
    suppressed `code_expired` whatever else holds: the person could no longer use it, so it is neither sent nor
    charged (the person asks for a new one).

    Webhooks go to a system, not a person: quiet hours and the personal cap do not apply to them.
    """
    if code_expires_at is not None and code_expires_at <= now:
        return Suppress("code_expired")
    if not still_eligible:
        return Suppress("no_longer_eligible")
    if channel in opted_out_channels:
        return Suppress("opted_out")
    if channel == "webhook":
        return Send()
    if lane != "critical":
        until = quiet_hours_end(now, tz, quiet_start, quiet_end)
        if until is not None:
            return Defer(until)
    # The cap is for marketing and reminders: a one-time code (critical lane) is never held back by it.
    if lane != "critical" and daily_cap is not None and sent_today >= daily_cap:
        return Suppress("daily_cap")
    return Send()


def day_start_utc(now: datetime, tz: str) -> datetime:
    local = now.astimezone(ZoneInfo(tz))
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return start.astimezone(now.tzinfo)
