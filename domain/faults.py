"""Named fault points across the whole timeline (ARCHITECTURE.md, seed 004 §5.6).

A point is armed by `OUTBOX_FAULT=<point>[,<point>...]` (process-wide, e.g. to make a worker die) or by passing a
`FaultPlan` into a command (deterministic, seeded, in-process: used by the 1,000-failure checkpoint).
Mode `exit` ends the process on the spot (os._exit: no cleanup, no commit), as a crash would; in-process plans raise
`InjectedFault`, which abandons the open transaction exactly like a dropped connection.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

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
