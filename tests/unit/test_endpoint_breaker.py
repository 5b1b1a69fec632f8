"""An endpoint's circuit breaker, decided (domain/endpoints/breaker.py): values in, a decision out.

Invariants: fewer failures in a row than `open_after` keep it closed; from `open_after` on it opens for exactly the
cooldown; a run of `disable_after` failures disables only when it spans at least `disable_span` (a burst of
failures within a second opens the breaker, it does not disable the endpoint), and the reason says how many, over
how long, and the last error, in plain words; a refused address at send time is a failure the breaker counts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from domain.delivery.retry import Outcome, classify
from domain.endpoints.breaker import Disable, Open, StayClosed, Thresholds, after_failure

T = Thresholds(open_after=5, cooldown=timedelta(seconds=60), disable_after=20, disable_span=timedelta(minutes=60))
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@given(streak=st.integers(1, 200), span_s=st.integers(0, 10_000))
def test_the_decision_follows_the_thresholds(streak: int, span_s: int) -> None:
    d = after_failure(streak, NOW - timedelta(seconds=span_s), NOW, T, 5, "timeout")
    if streak >= 20 and span_s >= 3600:
        assert isinstance(d, Disable)
    elif streak >= 5:
        assert d == Open(NOW + timedelta(seconds=60))
    else:
        assert d == StayClosed()


def test_the_reason_is_plain_words() -> None:
    d = after_failure(24, NOW - timedelta(minutes=75), NOW, T, 7, "connection")
    assert d == Disable("endpoint 7 was disabled automatically after 24 failed attempts in a row over 75 minutes "
                        "(last: connection)")
    quick = Thresholds(2, timedelta(seconds=1), 4, timedelta(seconds=1))
    short = after_failure(4, NOW - timedelta(seconds=3), NOW, quick, 7, "server_error")
    assert isinstance(short, Disable) and "over 3 seconds" in short.why


def test_a_burst_opens_the_breaker_but_does_not_disable() -> None:
    assert isinstance(after_failure(50, NOW - timedelta(seconds=1), NOW, T, 1, "timeout"), Open)


def test_a_refused_address_is_a_failure_that_is_retried_and_counted() -> None:
    assert classify(Outcome(None, error="url_not_allowed")) == ("transient", "url_not_allowed")


def _claim(**endpoint: object):  # type: ignore[no-untyped-def]
    from domain.delivery.plan import Claim

    return Claim(id=1, tenant_id=42, recipient="endpoint:5", channel="webhook", lane="high", template="order.approved",
                 payload={}, dedupe_key="k", cost_cents=0, attempts=1, max_attempts=8, event_id=None, order_id=None,
                 **endpoint)  # type: ignore[arg-type]


def test_only_an_endpoint_that_is_there_enabled_and_closed_goes_the_common_way() -> None:
    """Invariant: the one-statement claim (`plan`) sends a tenant endpoint's row only while its endpoint is there,
    enabled and its breaker closed; anything else goes the long way, which suppresses or defers it."""
    from domain.delivery.plan import SendContext, plan

    x = SendContext(False)
    assert plan(_claim(endpoint_id=5, ep_found=True), x, NOW) is not None
    assert plan(_claim(), x, NOW) is not None, "the system-wide receiver's row is unchanged"
    for state in ({"ep_found": False}, {"ep_found": True, "ep_disabled": True},
                  {"ep_found": True, "ep_open_until": NOW + timedelta(seconds=5)},
                  {"ep_found": True, "ep_open_until": NOW - timedelta(seconds=5)}):
        assert plan(_claim(endpoint_id=5, **state), x, NOW) is None, state
