"""Lane controls: a durable pause flag per lane, obeyed by every worker of that lane and skipped by the relay."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import sql
from domain.db import UnitOfWork


def lane_paused(lane: str, engine: Engine | None = None) -> bool:
    with UnitOfWork(engine) as uow:
        return bool(uow.execute(sa.text("SELECT paused FROM lane_controls WHERE lane = :l"), {"l": lane}).scalar())


def set_lane_paused(lane: str, paused: bool, engine: Engine | None = None) -> None:
    with UnitOfWork(engine) as uow:
        uow.execute(sa.text(
            "INSERT INTO lane_controls (lane, paused) VALUES (:l, :p) "
            "ON CONFLICT (lane) DO UPDATE SET paused = :p, updated_at = now()"), {"l": lane, "p": paused})
        if not paused:
            uow.execute(sql.NOTIFY_OWED, {"lane": lane})
        uow.commit()


