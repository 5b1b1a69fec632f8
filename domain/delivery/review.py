"""Review: replay a FAILED row (same row, dedupe key and event id) or mark it resolved."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.delivery import sql
from domain.delivery.queue import NOTIFY_OWED
from domain.settings import get_settings


def replay(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
           actor_ref: str = "system", note: str = "") -> bool:
    """FAILED -> QUEUED with the same row, dedupe key and event id: the receiver recognises it. The row gets the
    configured number of attempts again, no more; money was refunded when it failed, so it is reserved once.

    A message the provider accepted and then could not deliver (a `failed` receipt: `undeliverable`) is a new
    message for the provider: it gets its own idempotency key (`provider_key`) and forgets the old reference, so
    the provider sends it again instead of answering `already_processed` (which would charge and send nothing),
    and a late receipt for the old send never lands on the new one. Any other failure keeps its key: if the
    provider did accept it after all, it answers `already_processed` and that is the truth.

    A replay waits while a month is being archived (retention/archive.py): it lands before the archive's owed
    check (the archive refuses) or after its commit, never in between."""
    with UnitOfWork(engine) as uow:
        uow.execute(sql.REPLAY_WAITS_FOR_ARCHIVE)  # never between an archive's owed check and its commit
        r = uow.execute(sql.REPLAY, {"id": notification_id, "t": tenant_id, "m": get_settings().max_attempts}).first()
        if r:
            uow.execute(NOTIFY_OWED, {"lane": r.lane})
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="replay",
                           target=f"notification {notification_id}", note=note)
        uow.commit()
    return r is not None


def resolve(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
            actor_ref: str = "system", note: str = "") -> bool:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.RESOLVE, {"id": notification_id, "t": tenant_id}).first()
        if r:
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="resolve",
                           target=f"notification {notification_id}", note=note)
        uow.commit()
    return r is not None

