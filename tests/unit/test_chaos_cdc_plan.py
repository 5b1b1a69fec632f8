"""The CDC chaos profile's fault plan (jobs/drills/chaos/cdc_plan.py, pure: a seed and a duration in, a plan out).

Invariants: every kind of fault is in every plan; faults come one at a time (each one's hold and a restore
allowance end before the next begins), inside the run's load window (a run too short for them all has them back
to back from its start, and the load goes on until the last is restored); the relay's outage lasts a quarter of the run,
a minute at most; the same seed gives the same plan (a failure is replayed with its printed seed)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.drills.chaos.cdc_plan import CDC_FAULT_KINDS, RESTORE_ALLOWANCE_S, plan_cdc_faults


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), duration=st.floats(30, 600))
def test_plan_holds_every_kind_one_at_a_time_inside_the_run(seed: int, duration: float) -> None:
    plan = plan_cdc_faults(seed, duration)
    assert {f.kind for f in plan} == set(CDC_FAULT_KINDS)
    assert plan == plan_cdc_faults(seed, duration)
    assert plan[0].at >= 0.05 * duration - 1e-9
    for before, after in itertools.pairwise(plan):
        assert after.at >= before.at + before.hold + RESTORE_ALLOWANCE_S - 1e-9, (before, after)
    back_to_back = all(abs(after.at - (before.at + before.hold + RESTORE_ALLOWANCE_S)) < 1e-6
                       for before, after in itertools.pairwise(plan))
    # Inside the load window, or (a short run) back to back from its start: the load then runs on until the last
    # fault is restored.
    assert plan[-1].at + plan[-1].hold <= 0.85 * duration + 1e-6 or (back_to_back and plan[0].at == 0.05 * duration)
    (down,) = [f for f in plan if f.kind == "relay_down"]
    assert down.hold == min(60.0, 0.25 * duration)
    assert all(f.target == "cdc-relay" for f in plan if "relay" in f.kind)
    assert all(f.target == "fulfilment" for f in plan if "consumer" in f.kind)
