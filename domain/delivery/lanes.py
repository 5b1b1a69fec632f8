"""Lane controls: a durable pause flag per lane, obeyed by every worker of that lane and skipped by the relay."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.delivery import sql_review
from domain.delivery.queue import NOTIFY_OWED


def lane_paused(lane: str, engine: Engine | None = None) -> bool:
    with UnitOfWork(engine) as uow:
        return bool(uow.execute(sql_review.LANE_PAUSED, {"lane": lane}).scalar())


def set_lane_paused(lane: str, paused: bool, engine: Engine | None = None, *, actor_ref: str = "system",
                    note: str = "") -> None:
    """Durable and audited: a lane carries every tenant's messages, so the action is recorded without a tenant."""
    with UnitOfWork(engine) as uow:
        actions.record(uow, tenant_id=None, actor_ref=actor_ref, action="pause" if paused else "resume",
                       target=f"lane {lane}", note=note)
        uow.execute(sql_review.SET_LANE_PAUSED, {"lane": lane, "paused": paused})
        if not paused:
            uow.execute(NOTIFY_OWED, {"lane": lane})
        uow.commit()


