"""A person of tenant 42 and an SMS ledgered to them, written straight through the ledger (`person`, `sms`),
and a fanned-out campaign's first row (`campaign_row`)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from domain.ledger.send import send
from tests.support.db import one


def person(cap: int | None = 10) -> tuple[int, str]:
    ref = f"rv-{uuid.uuid4().hex[:8]}"
    with get_engine().begin() as c:
        rid = c.execute(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, daily_cap) "
            "VALUES (42, :r, 'Rev', 'rev@example.test', '+15550002222', 'UTC', :cap) RETURNING id"),
            {"r": ref, "cap": cap}).scalar_one()
    return int(rid), ref


def sms(rid: int, period: str) -> int:
    return send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane="normal",
                      data={"headline": "x"}, subject_period=period).notification_id


def campaign_row() -> tuple[int, int]:
    """An SMS campaign to every reachable person of tenant 42 (no quiet hours, caps or opt-outs in the way),
    fanned out: its id and its first row."""
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET quiet_start = NULL, quiet_end = NULL, daily_cap = NULL, "
                          "opted_out_channels = ARRAY[]::text[] WHERE tenant_id = 42"))
    cid = campaign_fan_out.create(tenant_id=42, name="t", segment="all_reachable", template="offer", channel="sms",
                                  actor_ref="test")
    campaign_fan_out.fan_out(cid)
    return cid, int(one("SELECT min(id) FROM notifications WHERE campaign_id = :c", c=cid))
