"""What /metrics reads from the ledger beyond the lane gauges: latency histograms, attempts by outcome, and each
tenant's money left, tenant endpoints disabled automatically and breakers open — computed from PostgreSQL at
scrape time, so every backend reports the same truth and the counts only grow (attempts and sent rows are never
deleted). docs/alerts.yml is written against these names.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.delivery.sql_reads import (
    ATTEMPT_OUTCOMES,
    DELIVERY_BUCKETS,
    DELIVERY_LATENCY,
    SEND_BUCKETS,
    SEND_LATENCY,
    TENANT_MONEY,
)
from domain.endpoints import store as endpoints

__all__ = ["DELIVERY_BUCKETS", "SEND_BUCKETS", "snapshot"]

def _histogram(rows: list[dict[str, Any]], buckets: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    return {r["lane"]: {"count": int(r["n"]), "sum": float(r["total"]),
                        "buckets": [(b, int(r[f"b{i}"])) for i, b in enumerate(buckets)]} for r in rows}


def snapshot(engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        return {
            "send": _histogram(as_dicts(uow.execute(SEND_LATENCY)), SEND_BUCKETS),
            "delivery": _histogram(as_dicts(uow.execute(DELIVERY_LATENCY)), DELIVERY_BUCKETS),
            "outcomes": as_dicts(uow.execute(ATTEMPT_OUTCOMES)),
            "money": as_dicts(uow.execute(TENANT_MONEY)),
            "endpoints_auto_disabled": endpoints.auto_disabled_counts(uow),
            "endpoint_breakers_open": endpoints.breakers_open(uow),
        }
