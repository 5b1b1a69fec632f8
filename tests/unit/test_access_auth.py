"""Invariant (pure): a login lockout starts at the limit, doubles with each further failure and stops growing at
fifteen minutes."""

from datetime import timedelta

from domain.access.auth import lockout_for


def test_lockouts_start_at_the_limit_double_and_stop_growing_at_fifteen_minutes():
    assert [lockout_for(n, 5) for n in range(5)] == [None] * 5
    assert lockout_for(5, 5) == timedelta(seconds=30) and lockout_for(6, 5) == timedelta(seconds=60)
    assert lockout_for(50, 5) == timedelta(minutes=15)
