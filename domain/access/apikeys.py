"""API keys as operators see them: listed by prefix (the whole key exists only in the answer that created it —
we keep its SHA-256) and revoked with who, when and why (`outbox apikey list|revoke`, the API keys page).

A revoked key is refused by every API process within `dashboard.api.deps.KNOWN_KEY_SECONDS` (each keeps the keys
it authenticated that long)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from domain.access import actions, sql
from domain.db import UnitOfWork


def list_keys(tenant_id: int | None, limit: int = 500, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Live keys first, newest first. Never the key itself: only its first 8 characters (`obx_` + 4)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql.LIST_KEYS, {"t": tenant_id, "l": limit})]


@dataclass(frozen=True)
class Revoked:
    key_id: int
    tenant_id: int
    prefix: str
    revoked_at: datetime
    already: bool  # it was revoked before: nothing changed


def revoke_key(key_id: int, *, tenant_id: int | None, actor_ref: str, note: str = "",
               engine: Engine | None = None) -> Revoked | None:
    """Revoke one key of this tenant (tenant None: any tenant's). None: no such key — another tenant's key looks
    exactly like a missing one. Revoking twice changes nothing and is not recorded twice."""
    if not 1 <= key_id <= 2**31 - 1:
        return None
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.REVOKE_KEY, {"id": key_id, "t": tenant_id}).first()
        if row is None:
            old = uow.execute(sql.ONE_KEY, {"id": key_id, "t": tenant_id}).first()
            if old is None:
                return None
            return Revoked(old.id, old.tenant_id, old.prefix, old.revoked_at, already=True)
        actions.record(uow, tenant_id=row.tenant_id, actor_ref=actor_ref, action="revoke API key",
                       target=f"key {row.prefix}… acting as {row.actor_ref}", note=note)
        uow.commit()
    return Revoked(row.id, row.tenant_id, row.prefix, row.revoked_at, already=False)
