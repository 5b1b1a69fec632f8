"""The ledger through the API's doors: a recipient created, a send's body; and a balance moved the honest
way."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from domain.db import get_engine


def set_balance(tenant_id: int, cents: int) -> None:
    """Move the balance to `cents` the honest way: with an adjustment entry, so invariant 7 still holds."""
    with get_engine().begin() as c:
        c.execute(sa.text(
            "INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) "
            "SELECT :t, 'adjustment', :c - balance_cents, 'test: set balance' FROM balances WHERE tenant_id = :t"),
            {"t": tenant_id, "c": cents})
        c.execute(sa.text("UPDATE balances SET balance_cents = :c WHERE tenant_id = :t"), {"t": tenant_id, "c": cents})


async def new_recipient(client, key, **extra) -> int:  # type: ignore[no-untyped-def]
    body = {"ref": f"r-{uuid.uuid4().hex[:8]}", "display_name": "Test Person", "email": "t@example.test",
            "phone": "+15550001111", "timezone": "UTC", **extra}
    r = await client.post("/api/v1/recipients", json=body, headers=key)
    assert r.status_code == 201, r.text
    return int(r.json()["recipient_id"])


def send_body(rid: int, period: str = "2026-11-29", channel: str = "sms") -> dict[str, object]:
    return {"recipient_id": rid, "channel": channel, "template": "offer", "data": {"headline": "10% off"},
            "subject_period": period}
