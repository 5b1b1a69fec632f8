"""Operations read models: lane depth and age, latency, the last hour, day or week, items for review, refresh push
latency, tenants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.delivery import sql_reads
from domain.delivery.sql_reads import LANE_LATENCY, LANE_STATS, OPS_SERIES_WHOLE_LEDGER

__all__ = ["LANE_LATENCY", "LANE_STATS", "OPS_SERIES_WHOLE_LEDGER", "SERIES_WINDOWS", "keep_finished_points",
           "lane_stats", "ops_series", "refresh_stats", "review_items", "tenants"]

def lane_stats(tenant_id: int | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """System-wide for on-call tooling (CLI, /metrics); tenant-scoped for the dashboard."""
    with UnitOfWork(engine) as uow:
        stats = as_dicts(uow.execute(LANE_STATS, {"tenant_id": tenant_id}))
        lat = {r["lane"]: r for r in as_dicts(uow.execute(LANE_LATENCY, {"tenant_id": tenant_id}))}
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
        return as_dicts(uow.execute(sql_reads.REVIEW_ITEMS, {"tenant_id": tenant_id}))


# The ops charts' windows: (minutes back, minutes per point, label format). About 60-100 points each.
SERIES_WINDOWS: dict[str, tuple[int, int, str]] = {
    "1h": (60, 1, "HH24:MI"), "24h": (24 * 60, 15, "HH24:MI"), "7d": (7 * 24 * 60, 120, "Dy HH24:MI"),
}


# A point is kept once its span ended this long ago and no transaction still open began before its end: a
# transaction that began before the span's end and commits later (its rows carry its start time) could still move it.
SETTLED_AFTER: Final = timedelta(minutes=1)


def ops_series(tenant_id: int | None, window: str = "1h", engine: Engine | None = None,
               now: datetime | None = None) -> list[dict[str, Any]]:
    """Per point over the window (SERIES_WINDOWS), rebuilt from the ledger itself (no sampler to lose): the worst
    of the point's span — the most rows owed at once (`depth`) and the oldest owed age at its oldest
    (`oldest_seconds`) — the rows sent in it (`sent`, a count: a longer point sums them) and their mean and slowest
    commit-to-send seconds. So a breach shows at every window: a longer point keeps its span's maximum, never its end
    alone. A finished point is computed once and kept (`ops_series_points`); a refresh computes only the points
    still moving. `now` (default: the database's) fixes the instant the window ends at."""
    _, _, label = SERIES_WINDOWS[window]
    starts, points, _ = _points(tenant_id, window, engine, moving=True, now=now)
    return [{"minute": _label(t, label), "depth": int(points[t].depth_max),
             "oldest_seconds": float(points[t].oldest_max_seconds), "sent": int(points[t].sent),
             "latency_mean_seconds": float(points[t].latency_mean_seconds),
             "latency_max_seconds": float(points[t].latency_max_seconds)}
            for t in starts]


def keep_finished_points(engine: Engine | None = None) -> int:
    """Compute and keep every finished point not kept yet, for every tenant and for every tenant together, in
    every window — the relay runs it each minute, so a chart's first load finds its points kept (each point
    computed just after it finishes reads only the rows that left the owed set since). Points kept."""
    kept = 0
    for scope in [None, *(t for t, _ in tenants(engine))]:
        for window in SERIES_WINDOWS:
            kept += _points(scope, window, engine, moving=False)[2]
    return kept


def _points(tenant_id: int | None, window: str, engine: Engine | None, moving: bool,
            now: datetime | None = None) -> tuple[list[datetime], dict[datetime, Any], int]:
    """(the window's point starts, the points by start, how many were kept now): kept points read, finished ones
    not kept yet computed and kept, and — `moving` — the points still moving computed."""
    minutes, step, _ = SERIES_WINDOWS[window]
    scope = tenant_id or 0
    with UnitOfWork(engine) as uow:
        spans = uow.execute(sql_reads.OPS_SERIES_STARTS, {"window": minutes, "step": step, "now": now,
                                                     "settle": SETTLED_AFTER.total_seconds()}).all()
        if not spans:
            return [], {}, 0
        settled, at = spans[0].settled, spans[0].now
        starts: list[datetime] = [r[0] for r in spans]
        finished = [t for t in starts if t + timedelta(minutes=step) <= settled]
        points: dict[datetime, Any] = {
            r.at: r for r in uow.execute(sql_reads.OPS_SERIES_KEPT, {"scope": scope, "step": step, "starts": finished})}
        wanted = [t for t in (starts if moving else finished) if t not in points]
        computed: dict[datetime, Any] = {
            r.at: r for r in uow.execute(sql_reads.OPS_SERIES_POINTS, {"step": step, "tenant_id": tenant_id,
                                                                      "starts": wanted, "now": at})}
        keep = [computed[t] for t in finished if t in computed]
        if keep:
            uow.execute(sql_reads.OPS_SERIES_KEEP, {
                "scope": scope, "step": step, "starts": [r.at for r in keep], "depth": [int(r.depth_max) for r in keep],
                "oldest": [float(r.oldest_max_seconds) for r in keep], "sent": [int(r.sent) for r in keep],
                "mean": [float(r.latency_mean_seconds) for r in keep],
                "max": [float(r.latency_max_seconds) for r in keep]})
            uow.commit()
        points.update(computed)
    return starts, points, len(keep)


def _label(t: datetime, fmt: str) -> str:
    """PostgreSQL's `to_char` labels of SERIES_WINDOWS ('HH24:MI', 'Dy HH24:MI') in UTC. Pure."""
    return t.astimezone(UTC).strftime("%a %H:%M" if fmt.startswith("Dy") else "%H:%M")


def refresh_stats(tenant_id: int | None = None, engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql_reads.REFRESH_STATS, {"tenant_id": tenant_id}).one()
    return {"pushes": int(r.pushes), "p50_ms": float(r.p50 or 0), "p99_ms": float(r.p99 or 0)}


def tenants(engine: Engine | None = None) -> list[tuple[int, str]]:
    with UnitOfWork(engine) as uow:
        return [(int(r.id), str(r.name)) for r in uow.execute(sql_reads.TENANTS)]
