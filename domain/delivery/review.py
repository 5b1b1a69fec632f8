"""Review: replay a FAILED row (same row, dedupe key and event id) or mark it resolved — one row, the rows chosen,
or every failed row of a lane since a time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

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



# ---- bulk review: many rows in one transaction, each kept with who and why -------------------------------------
BULK_MAX = 1000  # rows one bulk action touches; a bigger backlog takes another pass (the answer says how many are left)


@dataclass(frozen=True)
class Bulk:
    """What a bulk action did: the rows it changed (a row already replayed, resolved or settled matched nothing) and,
    for a lane-wide action, how many rows still match after it (over BULK_MAX)."""

    done: tuple[int, ...]
    left: int = 0


def _bulk(uow: UnitOfWork, statement: Any, params: dict[str, Any], action: str, actor_ref: str, note: str) -> Bulk:
    if action == "replay":
        uow.execute(sql.REPLAY_WAITS_FOR_ARCHIVE)  # as one replay: never between an archive's owed check and commit
    rows = uow.execute(statement, params).all()
    if action == "replay":
        for lane in sorted({r.lane for r in rows}):
            uow.execute(NOTIFY_OWED, {"lane": lane})
    actions.record_many(uow, [(r.tenant_id, f"notification {r.id}") for r in rows], actor_ref=actor_ref,
                        action=action, note=note)
    return Bulk(tuple(sorted(int(r.id) for r in rows)))


def review_many(action: str, tenant_id: int | None, ids: list[int], engine: Engine | None = None, *,
                actor_ref: str, note: str) -> Bulk:
    """Replay or resolve the chosen rows (at most BULK_MAX ids) in one commit; each changed row is kept in
    operator_actions with who and the note. Ids another tenant owns, or rows no longer FAILED, change nothing."""
    statement = {"replay": sql.REPLAY_MANY, "resolve": sql.RESOLVE_MANY}[action]
    with UnitOfWork(engine) as uow:
        out = _bulk(uow, statement, {"ids": sorted(set(ids))[:BULK_MAX], "t": tenant_id,
                                     "m": get_settings().max_attempts}, action, actor_ref, note)
        uow.commit()
    return out


def review_lane(action: str, tenant_id: int | None, lane: str, since: datetime, engine: Engine | None = None, *,
                actor_ref: str, note: str) -> Bulk:
    """Every FAILED row of `lane` that failed at or after `since` and that no one resolved (of one tenant, or of every
    tenant for platform on-call), oldest first, at most BULK_MAX — replayed or resolved in one commit."""
    statement = {"replay": sql.REPLAY_LANE_SINCE, "resolve": sql.RESOLVE_LANE_SINCE}[action]
    params = {"lane": lane, "t": tenant_id, "since": since, "l": BULK_MAX, "m": get_settings().max_attempts}
    with UnitOfWork(engine) as uow:
        out = _bulk(uow, statement, params, action, actor_ref, note)
        left = int(uow.execute(sql.COUNT_LANE_SINCE, params).scalar_one())
        uow.commit()
    return Bulk(out.done, left)


def count_lane(tenant_id: int | None, lane: str, since: datetime, engine: Engine | None = None) -> int:
    """How many rows `review_lane` would take now (shown in its confirmation)."""
    with UnitOfWork(engine) as uow:
        return int(uow.execute(sql.COUNT_LANE_SINCE, {"lane": lane, "t": tenant_id, "since": since}).scalar_one())
