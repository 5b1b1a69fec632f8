"""The words every floor of the domain shares, and the one schema names in its CHECK constraints: lanes, order
statuses, the owed-work NOTIFY channel and a ledger row's job id.

A leaf: it imports nothing of ours, so `models`, the ledger and `faults` can name a lane or an order status without
leaning on the capabilities above them. `domain.delivery.queue` (the queue vocabulary: queues, channels, Redis keys)
hands these names on; its own words stay there.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import sqlalchemy as sa

Lane = Literal["critical", "high", "normal", "bulk"]
# Priority order: the ops screen, `outbox status` and /metrics list lanes this way.
LANES: Final[tuple[Lane, ...]] = get_args(Lane)

OrderStatus = Literal["authorized", "approved", "cancelled", "fulfilled"]
ORDER_STATUSES: Final[tuple[OrderStatus, ...]] = get_args(OrderStatus)

# Development-only one-shot process faults armed from /ops: members are "<lane>:<fault point>".
ARMED_FAULTS: Final[str] = "outbox:faults:armed"
# PostgreSQL LISTEN/NOTIFY channel: a commit that owes work wakes the relay (payload: the lane).
NOTIFY_CHANNEL: Final[str] = "outbox_owed"


def is_lane(value: str) -> bool:
    return value in LANES


def lanes_sql_list() -> str:
    """`'critical','high','normal','bulk'` for CHECK constraints and ORDER BY array_position."""
    return ",".join(f"'{lane}'" for lane in LANES)


def job_id(notification_id: int) -> str:
    """The arq `_job_id`: the same notification always maps to the same job, so enqueues are idempotent."""
    return f"n-{notification_id}"


JOB_ID_SQL: Final[str] = "'n-' || id"  # job_id() for a notifications row, in SQL (kept equal by a unit test)

# Transactional: the relay hears it only if the caller's commit happens.
NOTIFY_OWED = sa.text(f"SELECT pg_notify('{NOTIFY_CHANNEL}', :lane)")
