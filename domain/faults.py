"""Named fault points across the whole timeline (ARCHITECTURE.md, seed 004 §5.6).

A point is armed by `OUTBOX_FAULT=<point>[,<point>...]` (process-wide, e.g. to make a worker die) or by passing a
`FaultPlan` into a command (deterministic, seeded, in-process: used by the 1,000-failure checkpoint).
Mode `exit` ends the process on the spot (os._exit: no cleanup, no commit), as a crash would; in-process plans raise
`InjectedFault`, which abandons the open transaction exactly like a dropped connection.

In development only (the /ops page, for the platform on-call), a one-shot worker crash can be armed in Redis and the
receiver's fault switches set to a named preset; both refuse outside development.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import httpx
from arq import ArqRedis

from domain.settings import get_settings
from domain.vocabulary import ARMED_FAULTS, LANES

POINTS: Final[tuple[str, ...]] = (
    "after_decision",
    "after_begin",
    "after_order_update",
    "after_handoff_insert",
    "before_commit",
    "after_commit_before_publish",
    "after_publish_before_enqueue",
    "after_worker_claim",
    "before_remote_call",
    "after_remote_accept_before_local_ack",
    "after_local_ack",
    # The CDC relay (jobs/cdc.py): the stream has the events, the slot is not yet confirmed past them.
    "cdc_after_publish_before_confirm",
)
TRANSACTION_POINTS: Final[tuple[str, ...]] = (
    "after_begin", "after_order_update", "after_handoff_insert", "before_commit",
)
EXIT_CODE: Final[int] = 86


class InjectedFault(RuntimeError):
    def __init__(self, point: str) -> None:
        super().__init__(f"fault injected point={point}")
        self.point = point


@dataclass
class FaultPlan:
    armed: set[str] = field(default_factory=set)
    fired: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, points: Iterable[str]) -> FaultPlan:
        unknown = set(points) - set(POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}; known: {', '.join(POINTS)}")
        return cls(armed=set(points))

    def hit(self, point: str) -> None:
        if point in self.armed:
            self.fired.append(point)
            raise InjectedFault(point)


def _env_points() -> set[str]:
    return {p.strip() for p in os.environ.get("OUTBOX_FAULT", "").split(",") if p.strip()}


def hit(point: str, plan: FaultPlan | None = None) -> None:
    """Call at a named point. Env-armed points end the process; plan-armed points raise."""
    assert point in POINTS, point
    if point in _env_points():
        print(f"fault injected point={point} pid={os.getpid()}", file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)
    if plan is not None:
        plan.hit(point)


# The receiver's fault switch board, by the name /ops shows: what the receiver does to the next webhooks.
RECEIVER_SWITCHES: Final[dict[str, dict[str, float]]] = {
    "503 ×3": {"fail_503": 3},
    "422 once": {"fail_422": 1},
    "slow 2 s": {"slow_seconds": 2.0},
    "accept then hang": {"accept_then_hang": 1},
    "accept then drop": {"accept_then_drop": 1},
    "clear": {},
}
# The point a crash is armed at from /ops: the dangerous window, the remote effect applied and not yet recorded.
ARMABLE_POINT: Final[str] = "after_remote_accept_before_local_ack"


def may_arm_crash(lane: str) -> bool:
    return get_settings().dev_mode is True and lane in LANES


def may_switch_receiver(switch: str) -> bool:
    return get_settings().dev_mode is True and switch in RECEIVER_SWITCHES


async def arm_worker_crash(redis: ArqRedis, lane: str) -> None:
    """The next `lane` worker to get an accepted answer dies before recording it (once; `take_armed_crash`)."""
    if not may_arm_crash(lane):
        raise ValueError(f"no crash can be armed for lane {lane!r} (development only, known lanes)")
    await redis.sadd(ARMED_FAULTS, f"{lane}:{ARMABLE_POINT}")  # type: ignore[misc]


async def take_armed_crash(redis: ArqRedis, lane: str, point: str) -> bool:
    """The worker's side: whether a crash was armed for this lane at `point`, disarming it (one crash per arming).
    Never true outside development."""
    return get_settings().dev_mode is True and bool(await redis.srem(ARMED_FAULTS, f"{lane}:{point}"))  # type: ignore[misc]


async def set_receiver_switch(switch: str) -> bool:
    """Set the receiver's fault switches to the named preset; False when the receiver did not answer."""
    if not may_switch_receiver(switch):
        raise ValueError(f"no receiver fault switch {switch!r} (development only)")
    try:
        async with httpx.AsyncClient(timeout=3) as c:
            await c.post(f"{get_settings().receiver_url}/faults", json=RECEIVER_SWITCHES[switch])
    except httpx.HTTPError:
        return False
    return True
