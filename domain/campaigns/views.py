"""Campaign progress, counted from the campaign's ledger rows. A pure read: nothing here writes.

A campaign is finished once its fan-out is over (`running`) or it was cancelled, and nothing of it is owed any
more; it finished when its last row settled. That is computed from the rows on every read (the stored
`finished_at`, written by earlier versions, still wins when present); a `running` campaign that is finished reads
as `done`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.campaigns import sql
from domain.campaigns.segments import SEGMENTS
from domain.db import UnitOfWork


def _progress(c: sa.Row[Any]) -> dict[str, Any]:
    finished = c.finished_at
    if finished is None and c.status in ("running", "cancelled") and c.queued + c.deferred == 0:
        finished = c.last_settled or c.started_at or c.created_at  # no rows at all: over when it started
    return {"campaign_id": c.id, "name": c.name, "segment": c.segment, "template": c.template, "channel": c.channel,
            "status": "done" if finished and c.status == "running" else c.status, "total": c.total,
            "ledgered": c.ledgered, "queued": c.queued, "sent": c.sent, "delivered": c.delivered,
            "deferred": c.deferred, "suppressed": {str(k): int(v) for k, v in (c.suppressed or {}).items()},
            "failed": c.failed, "started_at": c.started_at, "finished_at": finished}


def status(tenant_id: int, campaign_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    """One campaign's progress; None when the tenant has no such campaign."""
    with UnitOfWork(engine) as uow:
        c = uow.execute(sql.CAMPAIGNS, {"t": tenant_id, "i": campaign_id, "l": 1, "b": None, "a": None,
                                         "ch": None}).first()
    return _progress(c) if c is not None else None


def list_campaigns(tenant_id: int, limit: int = 50, before: int | None = None, after: int | None = None,
                   channel: str | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """The tenant's newest campaigns with their progress, in one query; a keyset page by `before`/`after`."""
    with UnitOfWork(engine) as uow:
        return [_progress(c) for c in uow.execute(sql.CAMPAIGNS, {"t": tenant_id, "i": None, "l": limit,
                                                                  "b": before, "a": after, "ch": channel})]


def preview(tenant_id: int, segment: str, channel: str, engine: Engine | None = None) -> dict[str, int] | None:
    """Before a campaign starts: how many people its segment selects right now, and at most what it would cost
    (that many times the channel's price; suppressed rows are refunded, so the charge can only be lower).
    None: no such segment."""
    if segment not in SEGMENTS:
        return None
    with UnitOfWork(engine) as uow:
        audience = uow.execute(sql.count_audience(SEGMENTS[segment](channel)),
                               {"t": tenant_id, "channel": channel}).scalar_one()
        price = uow.execute(sql.CHANNEL_PRICE, {"t": tenant_id, "c": channel}).scalar_one()
    return {"audience": int(audience), "price_cents": int(price), "cost_cents": int(audience) * int(price)}
