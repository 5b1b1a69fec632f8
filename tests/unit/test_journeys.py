"""Invariant (pure): only a strictly further step supersedes; lifecycle events never compete with nudges;
anything else is an unknown event."""

from hypothesis import given
from hypothesis import strategies as st

from domain.journeys import NUDGE_DELAY, Drop, Lifecycle, Supersede, UnknownEvent, decide
from domain.rules import JOURNEY_STEPS, LIFECYCLE_EVENTS

CURRENT = st.one_of(st.none(), st.sampled_from(JOURNEY_STEPS))


@given(st.sampled_from(JOURNEY_STEPS), CURRENT)
def test_only_strictly_further_steps_supersede(step, current):
    d = decide(step, current)
    further = current is None or JOURNEY_STEPS.index(step) > JOURNEY_STEPS.index(current)
    assert d == (Supersede(step, NUDGE_DELAY[step]) if further else Drop("not_further"))


@given(st.sampled_from(LIFECYCLE_EVENTS), CURRENT)
def test_lifecycle_events_never_touch_the_journey(event, current):
    assert decide(event, current) == Lifecycle(event)


@given(st.text(max_size=20).filter(lambda s: s not in JOURNEY_STEPS and s not in LIFECYCLE_EVENTS), CURRENT)
def test_anything_else_is_unknown(event, current):
    assert decide(event, current) == UnknownEvent(event)


def test_late_initiated_after_credit_check_is_dropped_and_offer_submitted_is_immediate():
    assert decide("initiated", "credit_check_done") == Drop("not_further")
    assert decide("offer_submitted", "offers_viewed") == Supersede("offer_submitted", None)
