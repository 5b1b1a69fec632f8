"""Every privileged action, kept: who, what, on what, when, and a note — written in the same transaction as the
action itself, shown on /audit and /ops. (Replay, resolve, pause, resume, preference change, top-up, key creation.)"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from domain.access import sql
from domain.db import UnitOfWork


def record(uow: UnitOfWork, *, tenant_id: int | None, actor_ref: str, action: str, target: str,
           note: str = "") -> None:
    """Inside the caller's transaction: the action and its record commit together or not at all."""
    uow.execute(sql.RECORD_ACTION, {"t": tenant_id, "a": actor_ref, "w": action, "g": target, "n": note or None})


def recent(tenant_id: int | None, limit: int = 50, before: int | None = None, after: int | None = None,
           engine: Engine | None = None) -> list[dict[str, Any]]:
    """This tenant's actions and the platform-wide ones (lane controls act on every tenant), newest first;
    tenant_id None (platform on-call): every tenant's. A keyset page by `before`/`after` (an action id)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql.RECENT_ACTIONS, {"t": tenant_id, "l": limit,
                                                                           "b": before, "a": after})]


def on_target(tenant_id: int, target: str, engine: Engine | None = None) -> list[dict[str, Any]]:
    """This tenant's audit rows on one thing (`campaign 12`), oldest first: who started it, who cancelled it."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql.ACTIONS_ON, {"t": tenant_id, "g": target})]


def last_on_targets(tenant_id: int, targets: list[str], engine: Engine | None = None, *,
                    prefix: bool = False) -> dict[str, dict[str, Any]]:
    """This tenant's last audit row on each of `targets` (names of the form "<kind> <id>"; `prefix`: a longer
    target that goes on after a space counts too), keyed by the name asked. A thing nobody acted on is absent."""
    if not targets:
        return {}
    with UnitOfWork(engine) as uow:
        rows = uow.execute(sql.LAST_ACTIONS_ON, {"t": tenant_id, "gs": list(targets), "p": prefix})
        return {str(r.named): dict(r._mapping) for r in rows}


def record_many(uow: UnitOfWork, targets: list[tuple[int | None, str]], *, actor_ref: str, action: str,
                note: str = "") -> None:
    """One action on many targets ((tenant, target) each), inside the caller's transaction: one row each."""
    for tenant_id, target in targets:
        record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action=action, target=target, note=note)
