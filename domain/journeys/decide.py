"""The journey decision, pure: what one lead event does to the lead's one live nudge."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS, NUDGE_DELAY, is_further


@dataclass(frozen=True)
class Drop:
    reason: str  # late (older than the last applied step) | not_further (a repeat or a step backward)


@dataclass(frozen=True)
class Supersede:
    """Cancel the live nudge (if any), then schedule this step's nudge (or send it now when delay is None)."""

    step: str
    delay: timedelta | None


@dataclass(frozen=True)
class Lifecycle:
    """Good news that never competes with a reminder: sent now, never cancels a journey nudge."""

    event: str


@dataclass(frozen=True)
class UnknownEvent:
    event: str


JourneyDecision = Drop | Supersede | Lifecycle | UnknownEvent


def decide(event: str, current_step: str | None, occurred_at: datetime | None = None,
           last_step_at: datetime | None = None, time_scale: float = 1.0) -> JourneyDecision:
    """Pure. A step older than the last applied step is late; a step not further along is dropped; delays are
    divided by the time scale (demos and tests watch 30 minutes pass in 3 seconds at 600)."""
    if event in LIFECYCLE_EVENTS:
        return Lifecycle(event)
    if event not in JOURNEY_STEPS:
        return UnknownEvent(event)
    if occurred_at is not None and last_step_at is not None and occurred_at < last_step_at:
        return Drop("late")
    if not is_further(event, current_step):
        return Drop("not_further")
    delay = NUDGE_DELAY[event]
    return Supersede(event, delay / time_scale if delay is not None else None)
