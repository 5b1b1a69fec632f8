"""What a ledger write owes: the row's id, lane, job id and month, and nothing else. It crosses process boundaries (the
after-commit wake-up, the relay's scan, the API's enqueue), so it carries ids only, never payloads or contact points.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class OwedRow:
    """A ledger row crossing the process boundary: ids only, never payloads."""

    notification_id: int
    lane: str
    job_id: str
    # The bulk lane's fair queueing (domain/delivery/fair_queue.py): "<tenant>:<campaign>" and the ms of virtual time
    # one job of it costs. Empty: enqueued at once, in arrival order.
    flow: str = ""
    gap_ms: int = 1
    # The row's `created_at` (the ledger's partition key), when the one handing it over read it: the per-row job
    # carries it, and the worker's claim then reads that month's partition alone (None: the claim by id alone).
    created_at: datetime | None = None
