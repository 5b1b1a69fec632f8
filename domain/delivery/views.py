"""Operations read models: lane depth and age, latency, the last hour, day or week, items for review, refresh push
latency, tenants."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.delivery import sql
from domain.delivery.sql import LANE_LATENCY, LANE_STATS, OPS_SERIES

__all__ = ["LANE_LATENCY", "LANE_STATS", "OPS_SERIES", "SERIES_WINDOWS", "lane_stats", "ops_series", "refresh_stats",
           "review_items", "tenants"]

def lane_stats(tenant_id: int | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """System-wide for on-call tooling (CLI, /metrics); tenant-scoped for the dashboard."""
    with UnitOfWork(engine) as uow:
        stats = as_dicts(uow.execute(LANE_STATS, {"t": tenant_id}))
        lat = {r["lane"]: r for r in as_dicts(uow.execute(LANE_LATENCY, {"t": tenant_id}))}
    for s in stats:
        lr = lat.get(s["lane"], {})
        s["p50_ms"] = float(lr.get("p50") or 0.0)
        s["p99_ms"] = float(lr.get("p99") or 0.0)
        s["oldest_owed_seconds"] = float(s["oldest_owed_seconds"])
        s["scheduled"] = int(s["scheduled"])
    return stats


def review_items(tenant_id: int | None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Failed rows waiting for a human: one tenant's, or every tenant's (None: platform on-call)."""
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.REVIEW_ITEMS, {"t": tenant_id}))


# The ops charts' windows: (minutes back, minutes per point, label format). About 60-100 points each.
SERIES_WINDOWS: dict[str, tuple[int, int, str]] = {
    "1h": (60, 1, "HH24:MI"), "24h": (24 * 60, 15, "HH24:MI"), "7d": (7 * 24 * 60, 120, "Dy HH24:MI"),
}


def ops_series(tenant_id: int | None, window: str = "1h", engine: Engine | None = None) -> list[dict[str, Any]]:
    """Per point over the window (SERIES_WINDOWS), rebuilt from the ledger itself (no sampler to lose): owed depth,
    age of the oldest owed row, and mean commit-to-send latency of rows sent in that point's span."""
    minutes, step, label = SERIES_WINDOWS[window]
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.OPS_SERIES, {"m": minutes, "s": step, "f": label, "t": tenant_id}))


def refresh_stats(tenant_id: int | None = None, engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.REFRESH_STATS, {"t": tenant_id}).one()
    return {"pushes": int(r.pushes), "p50_ms": float(r.p50 or 0), "p99_ms": float(r.p99 or 0)}


def tenants(engine: Engine | None = None) -> list[tuple[int, str]]:
    with UnitOfWork(engine) as uow:
        return [(int(r.id), str(r.name)) for r in uow.execute(sql.TENANTS)]
