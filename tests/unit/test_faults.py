"""The /ops fault switches (domain/faults.py). Invariants: outside development nothing can be armed, taken or
switched, whatever the caller asks; in development an armed crash fires once, for its lane only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from domain import faults


class SetOnlyRedis:
    """The two set operations the switches use, kept in memory (no Redis needed to check the rules)."""

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.calls = 0

    async def sadd(self, key: str, member: str) -> int:
        self.calls += 1
        added = member not in self.members
        self.members.add(member)
        return int(added)

    async def srem(self, key: str, member: str) -> int:
        self.calls += 1
        if member in self.members:
            self.members.remove(member)
            return 1
        return 0


def _settings(monkeypatch: pytest.MonkeyPatch, dev_mode: bool) -> None:
    monkeypatch.setattr(faults, "get_settings",
                        lambda: SimpleNamespace(dev_mode=dev_mode, receiver_url="http://127.0.0.1:9"))


async def test_outside_development_nothing_is_armed_taken_or_switched(monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(monkeypatch, dev_mode=False)
    redis: Any = SetOnlyRedis()
    assert not faults.may_arm_crash("high") and not faults.may_switch_receiver("503 ×3")
    with pytest.raises(ValueError):
        await faults.arm_worker_crash(redis, "high")
    redis.members.add(f"high:{faults.ARMABLE_POINT}")  # even if something put one there
    assert await faults.take_armed_crash(redis, "high", faults.ARMABLE_POINT) is False
    assert redis.calls == 0, "production never reads or writes the armed set"
    with pytest.raises(ValueError):
        await faults.set_receiver_switch("503 ×3")


async def test_in_development_an_armed_crash_fires_once_and_only_for_its_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(monkeypatch, dev_mode=True)
    redis: Any = SetOnlyRedis()
    assert not faults.may_arm_crash("nonsense") and not faults.may_switch_receiver("nonsense")
    with pytest.raises(ValueError):
        await faults.arm_worker_crash(redis, "nonsense")
    await faults.arm_worker_crash(redis, "high")
    assert await faults.take_armed_crash(redis, "normal", faults.ARMABLE_POINT) is False
    assert await faults.take_armed_crash(redis, "high", "after_worker_claim") is False
    assert await faults.take_armed_crash(redis, "high", faults.ARMABLE_POINT) is True
    assert await faults.take_armed_crash(redis, "high", faults.ARMABLE_POINT) is False, "one crash per arming"


async def test_a_receiver_that_does_not_answer_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(monkeypatch, dev_mode=True)  # port 9 (discard): nothing listens there
    assert await faults.set_receiver_switch("clear") is False
