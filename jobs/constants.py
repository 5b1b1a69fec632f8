"""Every lane name, queue name and Redis key prefix in one place."""

from __future__ import annotations

from typing import Final

LANES: Final[tuple[str, ...]] = ("critical", "high", "normal", "bulk")
QUEUE_PREFIX: Final[str] = "outbox:queue:"
RATE_KEY: Final[str] = "outbox:rate:bulk"
REFRESH_PREFIX: Final[str] = "outbox:refresh:"
NOTIFY_CHANNEL: Final[str] = "outbox_owed"
REFRESH_PUBLISHES: Final[str] = "outbox:metrics:refresh_publishes"
# Development-only one-shot process faults armed from /ops: members are "<lane>:<fault point>".
ARMED_FAULTS: Final[str] = "outbox:faults:armed"


def queue_name(lane: str) -> str:
    if lane not in LANES:
        raise ValueError(f"unknown lane {lane!r}; lanes are {', '.join(LANES)}")
    return QUEUE_PREFIX + lane


def job_id(notification_id: int) -> str:
    """The arq `_job_id`: the same notification always maps to the same job, so enqueues are idempotent."""
    return f"n-{notification_id}"


def order_channel(tenant_id: int, order_id: int) -> str:
    return f"{REFRESH_PREFIX}tenant:{tenant_id}:order:{order_id}"


def tenant_channel(tenant_id: int) -> str:
    return f"{REFRESH_PREFIX}tenant:{tenant_id}"
