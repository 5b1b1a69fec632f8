"""An endpoint's circuit breaker, decided: values in (its run of failed attempts, since when, now, the thresholds),
a decision out. Pure: no unit of work, no SQL (domain/delivery/circuit.py runs what it decides).

Closed: sends go. After `open_after` failed attempts in a row the breaker opens for `cooldown`: the endpoint's rows
are deferred when claimed, not attempted; then one probe goes (half-open) — a success closes it, a failure opens it
again. A run of `disable_after` failures spread over at least `disable_span` is sustained failure: the endpoint is
disabled, what it still owes is settled unsent with the reason, and an operator alert is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Thresholds:
    open_after: int
    cooldown: timedelta
    disable_after: int
    disable_span: timedelta

    @classmethod
    def from_settings(cls) -> Thresholds:
        from domain.settings import get_settings

        s = get_settings()
        return cls(s.endpoint_breaker_failures, timedelta(seconds=s.endpoint_breaker_cooldown),
                   s.endpoint_disable_failures, timedelta(minutes=s.endpoint_disable_minutes))


@dataclass(frozen=True)
class StayClosed:
    pass


@dataclass(frozen=True)
class Open:
    until: datetime


@dataclass(frozen=True)
class Disable:
    why: str  # plain words: kept on the endpoint and on every row it settles


BreakerDecision = StayClosed | Open | Disable


def after_failure(streak: int, failing_since: datetime, now: datetime, t: Thresholds,
                  endpoint_id: int, last_error: str) -> BreakerDecision:
    """`streak` counts this failure too; `failing_since` is when the run began."""
    span = now - failing_since
    if streak >= t.disable_after and span >= t.disable_span:
        minutes = max(1, round(span.total_seconds() / 60)) if span >= timedelta(minutes=1) else 0
        over = f"over {minutes} minutes" if minutes else f"over {span.total_seconds():.0f} seconds"
        return Disable(f"endpoint {endpoint_id} was disabled automatically after {streak} failed attempts in a row "
                       f"{over} (last: {last_error})")
    if streak >= t.open_after:
        return Open(now + t.cooldown)
    return StayClosed()
