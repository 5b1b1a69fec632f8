"""Writes of operational measurements (kept apart from the read models in `queries`)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork


def record_push_latency(tenant_id: int, latency_ms: float, engine: Engine | None = None) -> None:
    """One measured publish-to-render delay of a live view (shown on /ops as push p50/p99)."""
    with UnitOfWork(engine) as uow:
        uow.execute(sa.text("INSERT INTO refresh_metrics (kind, tenant_id, latency_ms) VALUES ('push', :t, :l)"),
                    {"t": tenant_id, "l": latency_ms})
        uow.commit()
