"""A tenant's webhook endpoints: create (the secret is answered once), list, read, disable, enable, delete,
rotate. Every statement filters on the tenant: another tenant's endpoint is exactly a missing one.

Secrets are `whsec_` + base64 of 24 random bytes (Standard Webhooks). They are kept to sign with, so they are
stored; no read here returns one after `create` and `rotate` answered it. After a rotation the previous secret
keeps signing for `ROTATION_OVERLAP` (both signatures in one `webhook-signature` header), so receivers can switch
without a gap.
"""

from __future__ import annotations

import base64
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.endpoints import sql

ROTATION_OVERLAP: Final = timedelta(hours=24)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _public(row: Any) -> dict[str, Any]:
    d = dict(row._mapping)
    until = d.pop("previous_secret_until")
    d["rotating_until"] = until if until and until > datetime.now(UTC) else None
    return d


def create(tenant_id: int, url: str, description: str, event_types: list[str] | None, actor_ref: str,
           engine: Engine | None = None) -> dict[str, Any]:
    """The new endpoint with its secret: the only answer that ever carries it whole."""
    secret = new_secret()
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.CREATE, {"t": tenant_id, "u": url, "d": description, "e": _json(event_types), "s": secret}).one()
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="create webhook endpoint",
                       target=f"endpoint {row.id} → {url}")
        uow.commit()
    return {**_public(row), "secret": secret}


def _json(v: list[str] | None) -> str | None:
    return None if v is None else json.dumps(v)


def list_endpoints(tenant_id: int, engine: Engine | None = None) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        return [_public(r) for r in uow.execute(sql.LIST, {"t": tenant_id})]


def get(tenant_id: int, endpoint_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.GET, {"t": tenant_id, "i": endpoint_id}).first()
    return _public(row) if row else None


def set_enabled(tenant_id: int, endpoint_id: int, enabled: bool, actor_ref: str,
                engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SET_ENABLED, {"t": tenant_id, "i": endpoint_id, "on": enabled}).first()
        if row is None:
            return None
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref,
                       action="enable webhook endpoint" if enabled else "disable webhook endpoint",
                       target=f"endpoint {endpoint_id}")
        uow.commit()
    return _public(row)


def delete(tenant_id: int, endpoint_id: int, actor_ref: str, engine: Engine | None = None) -> bool:
    with UnitOfWork(engine) as uow:
        gone = uow.execute(sql.DELETE, {"t": tenant_id, "i": endpoint_id}).first()
        if gone is None:
            return False
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="delete webhook endpoint",
                       target=f"endpoint {endpoint_id} → {gone.url}")
        uow.commit()
    return True


def rotate(tenant_id: int, endpoint_id: int, actor_ref: str, now: datetime | None = None,
           engine: Engine | None = None) -> dict[str, Any] | None:
    """A new secret (answered once); the current one keeps signing beside it for ROTATION_OVERLAP."""
    now = now or datetime.now(UTC)
    secret = new_secret()
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.ROTATE, {"t": tenant_id, "i": endpoint_id, "s": secret, "until": now + ROTATION_OVERLAP, "now": now}).first()
        if row is None:
            return None
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="rotate webhook endpoint secret",
                       target=f"endpoint {endpoint_id}")
        uow.commit()
    return {**_public(row), "secret": secret}


def signing_secrets(tenant_id: int, endpoint_id: int, now: datetime | None = None,
                    engine: Engine | None = None) -> list[str]:
    """For the sender only: the current secret, and the previous one while its overlap lasts."""
    now = now or datetime.now(UTC)
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SECRETS, {"t": tenant_id, "i": endpoint_id}).first()
    if row is None:
        return []
    out = [row.secret]
    if row.previous_secret and row.previous_secret_until and row.previous_secret_until > now:
        out.append(row.previous_secret)
    return out
