"""API keys as operators see them: listed by prefix (the whole key exists only in the answer that created it —
we keep its SHA-256) and revoked with who, when and why (`outbox apikey list|revoke`, the API keys page).

A revoked key is refused by every API process within `dashboard.api.deps.KNOWN_KEY_SECONDS` (each keeps the keys
it authenticated that long)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork

# tenant NULL: every tenant's (the command line, run by whoever holds the database).
_LIST = sa.text("""
SELECT k.id, k.tenant_id, t.name AS tenant_name, k.prefix, k.actor_ref, k.created_at, k.revoked_at
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE CAST(:t AS integer) IS NULL OR k.tenant_id = :t
ORDER BY k.revoked_at IS NOT NULL, k.id DESC
LIMIT :l""")
_REVOKE = sa.text("""
UPDATE api_keys SET revoked_at = now()
WHERE id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND revoked_at IS NULL
RETURNING id, tenant_id, prefix, actor_ref, revoked_at""")
_ONE = sa.text("SELECT id, tenant_id, prefix, actor_ref, revoked_at FROM api_keys "
               "WHERE id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t)")


def list_keys(tenant_id: int | None, limit: int = 500, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Live keys first, newest first. Never the key itself: only its first 8 characters (`obx_` + 4)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(_LIST, {"t": tenant_id, "l": limit})]


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
        row = uow.execute(_REVOKE, {"id": key_id, "t": tenant_id}).first()
        if row is None:
            old = uow.execute(_ONE, {"id": key_id, "t": tenant_id}).first()
            if old is None:
                return None
            return Revoked(old.id, old.tenant_id, old.prefix, old.revoked_at, already=True)
        actions.record(uow, tenant_id=row.tenant_id, actor_ref=actor_ref, action="revoke API key",
                       target=f"key {row.prefix}… acting as {row.actor_ref}", note=note)
        uow.commit()
    return Revoked(row.id, row.tenant_id, row.prefix, row.revoked_at, already=False)
