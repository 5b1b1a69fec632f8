"""Campaign progress, counted from the campaign's ledger rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork


def status(tenant_id: int, campaign_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        c = uow.execute(sa.text(
            "SELECT id, name, segment, template, channel, status, total, ledgered, created_at, started_at, "
            "finished_at FROM campaigns WHERE tenant_id = :t AND id = :i"), {"t": tenant_id, "i": campaign_id}).first()
        if c is None:
            return None
        counts = uow.execute(sa.text(
            "SELECT count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NULL) AS queued, "
            "count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NOT NULL) AS deferred, "
            "count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED')) AS sent, "
            "count(*) FILTER (WHERE status = 'DELIVERED') AS delivered, "
            "count(*) FILTER (WHERE status = 'FAILED') AS failed, "
            "max(coalesce(settled_at, sent_at)) AS last_settled "
            "FROM notifications WHERE campaign_id = :i"), {"i": campaign_id}).one()
        suppressed = {str(r.reason): int(r.n) for r in uow.execute(sa.text(
            "SELECT suppressed_reason AS reason, count(*) AS n FROM notifications WHERE campaign_id = :i "
            "AND status = 'SUPPRESSED' GROUP BY suppressed_reason ORDER BY 2 DESC"), {"i": campaign_id})}
        finished = c.finished_at
        owed = counts.queued + counts.deferred
        if finished is None and c.status in ("running", "cancelled") and owed == 0:
            finished = counts.last_settled or datetime.now(c.created_at.tzinfo)
            uow.execute(sa.text("UPDATE campaigns SET finished_at = :f, status = CASE WHEN status = 'running' "
                                "THEN 'done' ELSE status END WHERE id = :i"), {"f": finished, "i": campaign_id})
            uow.commit()
    return {"campaign_id": c.id, "name": c.name, "segment": c.segment, "template": c.template, "channel": c.channel,
            "status": "done" if finished and c.status == "running" else c.status, "total": c.total,
            "ledgered": c.ledgered, "queued": counts.queued, "sent": counts.sent, "delivered": counts.delivered,
            "deferred": counts.deferred, "suppressed": suppressed, "failed": counts.failed,
            "started_at": c.started_at, "finished_at": finished}


def list_campaigns(tenant_id: int, limit: int = 50, engine: Engine | None = None) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        ids = [int(i) for i in uow.execute(sa.text(
            "SELECT id FROM campaigns WHERE tenant_id = :t ORDER BY id DESC LIMIT :l"),
            {"t": tenant_id, "l": limit}).scalars()]
    return [s for i in ids if (s := status(tenant_id, i, engine)) is not None]
