"""Review: replay a FAILED row (same row, dedupe key and event id) or mark it resolved."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import actions, sql
from domain.db import UnitOfWork
from domain.settings import get_settings

# `tenant_id` None = platform on-call, whose scope is every tenant; the action is recorded under the row's tenant.
_IN_SCOPE = "id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND status = 'FAILED'"


def replay(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
           actor_ref: str = "system", note: str = "") -> bool:
    """FAILED -> QUEUED with the same row, dedupe key and event id: the receiver recognises it. The row gets the
    configured number of attempts again, no more; money was refunded when it failed, so it is reserved once."""
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            "UPDATE notifications SET status = 'QUEUED', review = NULL, next_attempt_at = now(), "
            f"max_attempts = attempts + :m, settled_at = NULL WHERE {_IN_SCOPE} RETURNING lane, tenant_id"),
            {"id": notification_id, "t": tenant_id, "m": get_settings().max_attempts}).first()
        if r:
            uow.execute(sql.NOTIFY_OWED, {"lane": r.lane})
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="replay",
                           target=f"notification {notification_id}", note=note)
        uow.commit()
    return r is not None


def resolve(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
            actor_ref: str = "system", note: str = "") -> bool:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            f"UPDATE notifications SET review = 'resolved' WHERE {_IN_SCOPE} RETURNING id, tenant_id"),
            {"id": notification_id, "t": tenant_id}).first()
        if r:
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="resolve",
                           target=f"notification {notification_id}", note=note)
        uow.commit()
    return r is not None

