"""The bulk lane's sharing decisions (domain/delivery/fair_plan.py), exhaustively over generated flows.

Invariants: the relay's window is shared equally between tenants whatever their number of campaigns or rows, and a
tenant's share equally between its campaigns; every flow gets at least one wake-up; the first round never exceeds
the window (beyond one per flow); a capped tenant never holds more than its cap's horizon; room a flow cannot fill
goes only to uncapped flows that filled theirs and never past the window; a tenant's campaigns together cost the
virtual time of one flow; a capped tenant's jobs hold worker slots for a bounded time and number; the bulk window
covers at least two scan intervals of the lane's pace (so the lane never runs dry between scans) and never more than
the relay's window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from domain.delivery.fair_plan import (
    BULK_WINDOW_SCANS,
    CAP_HORIZON_S,
    MIN_BULK_WINDOW,
    SLEEPERS_PER_TENANT,
    Flow,
    bulk_window,
    gap_ms,
    reserve_ahead,
    spare,
    tenant_rate,
    windows,
)

flows_st = st.lists(st.builds(Flow, st.integers(1, 6), st.integers(0, 5)), min_size=1, max_size=20, unique=True)


@given(flows_st, st.integers(10, 5000))
def test_the_window_is_shared_equally_between_tenants_then_campaigns(flows: list[Flow], window: int) -> None:
    shares = windows(flows, window)
    assert set(shares) == set(flows) and all(n >= 1 for n in shares.values())
    per_tenant: dict[int, int] = {}
    for f, n in shares.items():
        per_tenant[f.tenant_id] = per_tenant.get(f.tenant_id, 0) + n
    tenants = {f.tenant_id for f in flows}
    for t in tenants:  # a tenant with five campaigns gets no more than a tenant with one (rounding aside)
        n_flows = sum(1 for f in flows if f.tenant_id == t)
        assert abs(per_tenant[t] - window / len(tenants)) <= n_flows, (t, per_tenant, window)
        mine = [shares[f] for f in flows if f.tenant_id == t]
        assert max(mine) - min(mine) == 0
    assert sum(shares.values()) <= window + len(flows)  # at least one each may go past it


@given(flows_st, st.integers(10, 5000), st.dictionaries(st.integers(1, 6), st.floats(0.5, 500), max_size=3))
def test_a_capped_tenant_holds_at_most_its_cap_horizon_and_spare_room_never_overflows(
        flows: list[Flow], window: int, caps: dict[int, float]) -> None:
    shares = windows(flows, window, caps)
    for t, cap in caps.items():
        held = sum(n for f, n in shares.items() if f.tenant_id == t)
        n_flows = sum(1 for f in flows if f.tenant_id == t)
        assert held <= max(n_flows, cap * CAP_HORIZON_S), (t, held)
    # Every even-numbered flow owes fewer than its share: the rest fill up, within the window.
    taken = {f: (n if i % 2 else n // 2) for i, (f, n) in enumerate(sorted(shares.items()))}
    more = spare(shares, taken, window, caps)
    assert all(f.tenant_id not in caps and taken[f] >= shares[f] for f in more)
    assert sum(taken.values()) + sum(more.values()) <= max(window, sum(taken.values()))


def test_a_small_tenant_gets_its_share_beside_a_big_campaign() -> None:
    """Tenant 7's 50 rows enter Redis at once beside tenant 42's 40,000 (before: 42's oldest 2,000 only)."""
    big, small = Flow(42, 1), Flow(7, 2)
    shares = windows([big, small], 2000)
    assert shares == {big: 1000, small: 1000}
    assert spare(shares, {big: 1000, small: 50}, 2000) == {big: 950}


@given(st.integers(1, 10), st.floats(0.01, 10_000))
def test_virtual_time_a_job_costs_and_how_far_a_capped_job_may_reserve(flows_of_tenant: int, rate: float) -> None:
    assert gap_ms(flows_of_tenant) == flows_of_tenant  # a tenant's campaigns share its one turn
    ahead = reserve_ahead(rate)
    assert 0 < ahead <= CAP_HORIZON_S and ahead * rate <= SLEEPERS_PER_TENANT + 1e-9


def test_a_tenants_rate_is_its_own_else_the_default_never_above_the_channel() -> None:
    assert tenant_rate(100, None, None) == 100
    assert tenant_rate(100, 30, None) == 30
    assert tenant_rate(100, 30, 10) == 10
    assert tenant_rate(100, None, 500) == 100


@given(st.integers(10, 100_000), st.floats(0.01, 10_000), st.floats(0.05, 60))
def test_the_bulk_window_holds_two_scans_of_the_lanes_pace_within_the_relays_window(
        relay_window: int, rate: float, interval: float) -> None:
    w = bulk_window(relay_window, rate, interval)
    assert 1 <= w <= relay_window
    assert w >= min(relay_window, MIN_BULK_WINDOW, rate * interval * BULK_WINDOW_SCANS)
    assert w >= min(relay_window, rate * interval * BULK_WINDOW_SCANS) - 1e-9


def test_the_bulk_window_is_a_few_seconds_of_work_not_the_relays_2000() -> None:
    """Default pace 100/s: 1,000 wake-ups at the default 5 s scan, the floor of 200 at the bench's 0.5 s."""
    assert bulk_window(2000, 100, 5.0) == 1000
    assert bulk_window(2000, 100, 0.5) == MIN_BULK_WINDOW == 200
    assert bulk_window(2000, 10_000, 5.0) == 2000
