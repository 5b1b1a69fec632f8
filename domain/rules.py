"""Floor rules no template or campaign can break, and the journey ordering. All pure.

- quiet hours in the recipient's timezone for every lane but critical: defer to their end, never drop
- a per-recipient daily cap that suppresses with reason `daily_cap`
- send-time eligibility (the fact still holds, the recipient has not opted out)
- journey steps are ordered by their position in ONE list
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

SuppressReason = Literal[
    "daily_cap", "opted_out", "no_longer_eligible", "superseded", "no_contact_point", "insufficient_balance",
    "campaign_cancelled"
]

def quiet_hours_end(now: datetime, tz: str, start: time | None, end: time | None) -> datetime | None:
    """If `now` falls in the recipient's quiet hours, return when they end (aware, UTC); else None.

    Windows may wrap midnight (22:00-07:00).
    """
    if start is None or end is None or start == end:
        return None
    local = now.astimezone(ZoneInfo(tz))
    t = local.timetz().replace(tzinfo=None)
    if start < end:
        inside = start <= t < end
        end_day = local.date()
    else:
        inside = t >= start or t < end
        end_day = local.date() + timedelta(days=1) if t >= start else local.date()
    if not inside:
        return None
    local_end = datetime.combine(end_day, end, tzinfo=ZoneInfo(tz))
    return local_end.astimezone(now.tzinfo)


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
) -> FloorDecision:
    """Evaluated at send time by the worker, in this order: eligibility, opt-out, quiet hours, cap (the critical
    lane — one-time codes — skips quiet hours and the cap).

    Webhooks go to a system, not a person: quiet hours and the personal cap do not apply to them.
    """
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


# Journey funnel: a step's rank is its position in this list. Adding a step is a one-line edit.
JOURNEY_STEPS: Final[tuple[str, ...]] = (
    "initiated",
    "phone_verified",
    "credit_check_done",
    "savings_explored",
    "offers_viewed",
    "offer_submitted",
)
LIFECYCLE_EVENTS: Final[tuple[str, ...]] = ("loan_sanctioned", "loan_disbursed", "advisor_assigned")


def is_further(new_step: str, current_step: str | None) -> bool:
    if new_step not in JOURNEY_STEPS:
        raise ValueError(f"unknown step {new_step!r}")
    if current_step is None:
        return True
    return JOURNEY_STEPS.index(new_step) > JOURNEY_STEPS.index(current_step)


def day_start_utc(now: datetime, tz: str) -> datetime:
    local = now.astimezone(ZoneInfo(tz))
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return start.astimezone(now.tzinfo)

