"""Invariant (pure): only a strictly further step supersedes; lifecycle events never compete with nudges;
anything else is an unknown event."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.journeys.decide import Drop, Lifecycle, Supersede, UnknownEvent, decide
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS, NUDGE_DELAY, is_further

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


@given(st.sampled_from(JOURNEY_STEPS), CURRENT, st.integers(1, 3600), st.floats(1, 1000))
def test_a_step_older_than_the_last_applied_one_is_late_and_delays_follow_the_time_scale(step, current, back,
                                                                                        scale):
    """Late beats everything for a step: an event that happened before the last applied step is dropped, however
    far along it claims to be; otherwise the nudge's delay is the rule's delay divided by the time scale."""
    from datetime import UTC, datetime, timedelta

    last = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert decide(step, current, last - timedelta(seconds=back), last) == Drop("late")
    d = decide(step, current, last, last, scale)
    if isinstance(d, Supersede) and NUDGE_DELAY[step] is not None:
        assert d.delay == NUDGE_DELAY[step] / scale  # type: ignore[operator]


def test_journey_order_is_list_position():
    assert is_further("credit_check_done", "initiated")
    assert not is_further("initiated", "credit_check_done")
    assert not is_further("initiated", "initiated")
    assert is_further(JOURNEY_STEPS[0], None)
    with pytest.raises(ValueError):
        is_further("teleported", None)
