"""Campaigns for the bulk lane's tests: many reachable people, and a campaign fanned out to them."""

from __future__ import annotations

import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from jobs.ops.seed import seed_recipients


def reachable_people(tenant_id: int, n: int) -> None:
    """Seeded people, every one reachable by email now (no quiet hours: nothing deferred to their morning)."""
    seed_recipients(n, tenant_id=tenant_id)
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET quiet_start = NULL, quiet_end = NULL, opted_out_channels = '{}', "
                          "email = coalesce(email, ref || '@example.test') WHERE tenant_id = :t AND ref LIKE 'bulk-%'"),
                  {"t": tenant_id})


def fanned_out_campaign(tenant_id: int, name: str) -> int:
    """An email campaign to everyone reachable, ledgered (its NOTIFY wakes the relay, which enqueues the wake-ups)."""
    cid = campaign_fan_out.create(tenant_id=tenant_id, name=name, segment="all_reachable", template="offer",
                                  channel="email", actor_ref="test:fair")
    campaign_fan_out.fan_out(cid)
    return cid
