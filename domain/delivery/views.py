"""Operations read models: lane depth and age, latency, the last hour per minute, items for review, refresh push
latency, tenants."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.delivery.queue import lanes_sql_list
from domain.ledger.views import NOTIFICATION_COLUMNS

# ---- operations --------------------------------------------------------------------------------------------------
LANE_STATS = sa.text(
    """
    SELECT l.lane,
           -- Owed work is what is DUE: a nudge scheduled for later is counted apart, never as overdue. Its age
           -- is how long it has been due and waiting (since creation, or since its retry or schedule came due).
           count(n.id) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at <= now()) AS depth,
           coalesce(extract(epoch FROM now() - min(n.next_attempt_at)
                                             FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at <= now())), 0)
               AS oldest_owed_seconds,
           count(n.id) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at > now()) AS scheduled,
           min(n.next_attempt_at) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at > now()) AS next_due,
           coalesce(sum(n.attempts), 0) AS attempts,
           count(n.id) FILTER (WHERE n.status = 'FAILED') AS failed,
           count(n.id) FILTER (WHERE n.review = 'needs_review') AS review,
           coalesce(bool_or(c.paused), false) AS paused
    FROM unnest(ARRAY[{lanes}]) AS l(lane)
    LEFT JOIN notifications n ON n.lane = l.lane AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t)
    LEFT JOIN lane_controls c ON c.lane = l.lane
    GROUP BY l.lane
    ORDER BY array_position(ARRAY[{lanes}], l.lane)
    """.format(lanes=lanes_sql_list())
)


LANE_LATENCY = sa.text(
    "SELECT n.lane, percentile_cont(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50, "
    "percentile_cont(0.99) WITHIN GROUP (ORDER BY a.latency_ms) AS p99, count(*) AS n "
    "FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id "
    "WHERE a.latency_ms IS NOT NULL AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t) GROUP BY n.lane"
)


OPS_SERIES = sa.text(
    """
    WITH minutes AS (
      SELECT generate_series(date_trunc('minute', now()) - make_interval(mins => :m - 1),
                             date_trunc('minute', now()), interval '1 minute') AS t
    )
    SELECT to_char(m.t, 'HH24:MI') AS minute,
           (SELECT count(*) FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.created_at <= m.t + interval '1 minute'
               AND ((n.status = 'QUEUED' AND n.next_attempt_at <= m.t + interval '1 minute')
                    OR coalesce(n.sent_at, n.settled_at) > m.t + interval '1 minute')) AS depth,
           -- Rows still owed are aged from when they came due (a scheduled nudge is not late before its time).
           (SELECT coalesce(extract(epoch FROM max(m.t + interval '1 minute'
                     - CASE WHEN n.status = 'QUEUED' THEN n.next_attempt_at ELSE n.created_at END)), 0)
             FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.created_at <= m.t + interval '1 minute'
               AND ((n.status = 'QUEUED' AND n.next_attempt_at <= m.t + interval '1 minute')
                    OR coalesce(n.sent_at, n.settled_at) > m.t + interval '1 minute'))
             AS oldest_seconds,
           (SELECT coalesce(avg(extract(epoch FROM n.sent_at - n.created_at) * 1000), 0) FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.sent_at >= m.t AND n.sent_at < m.t + interval '1 minute') AS latency_ms
    FROM minutes m ORDER BY m.t
    """
)


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
        return as_dicts(uow.execute(sa.text(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE (CAST(:t AS integer) IS NULL "
            "OR n.tenant_id = :t) AND n.status = 'FAILED' "
            "AND coalesce(n.review, 'needs_review') <> 'resolved' ORDER BY n.id DESC LIMIT 50"), {"t": tenant_id}))


def ops_series(tenant_id: int | None, minutes: int = 60, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Per minute over the last hour, rebuilt from the ledger itself (no sampler to lose): owed depth, age of
    the oldest owed row, and mean commit-to-send latency of rows sent in that minute."""
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(OPS_SERIES, {"m": minutes, "t": tenant_id}))


def refresh_stats(tenant_id: int | None = None, engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            "SELECT count(*) AS pushes, percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50, "
            "percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) AS p99 FROM refresh_metrics "
            "WHERE kind = 'push' AND created_at > now() - interval '1 hour' "
            "AND (CAST(:t AS int) IS NULL OR tenant_id = :t)"), {"t": tenant_id}).one()
    return {"pushes": int(r.pushes), "p50_ms": float(r.p50 or 0), "p99_ms": float(r.p99 or 0)}


def tenants(engine: Engine | None = None) -> list[tuple[int, str]]:
    with UnitOfWork(engine) as uow:
        return [(int(r.id), str(r.name)) for r in uow.execute(sa.text("SELECT id, name FROM tenants ORDER BY id"))]
