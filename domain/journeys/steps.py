"""The journey funnel: a step's rank is its position in ONE list; how long after each step its nudge fires."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

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


# How long after reaching a step its "come back" nudge fires; None = an immediate message, not a reminder.
NUDGE_DELAY: Final[dict[str, timedelta | None]] = {
    "initiated": timedelta(minutes=30),
    "phone_verified": timedelta(minutes=20),
    "credit_check_done": timedelta(minutes=15),
    "savings_explored": timedelta(minutes=15),
    "offers_viewed": timedelta(minutes=10),
    "offer_submitted": None,
}


assert set(NUDGE_DELAY) == set(JOURNEY_STEPS), "every funnel step needs a nudge rule"
