"""`outbox prune`: what is not partitioned, kept for the retention (`OUTBOX_RETENTION_DAYS`) and no longer: push
latency samples, ended or expired sessions, idempotency keys past their window, idle login counters. A batch at a
time, each its own short transaction. Never the ledger, the envelopes (invariant 1 reads every committed revision's
event), money or the audit trail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.retention import sql

BATCH = 5000


def prune(days: float, dry_run: bool = False, now: datetime | None = None,
          engine: Engine | None = None) -> dict[str, int]:
    """Rows removed per table (with `dry_run`, rows that would be: nothing changes)."""
    if days <= 0:
        raise ValueError("retention must be a positive number of days")
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    done: dict[str, int] = {}
    for table in sql.PRUNABLE:
        if dry_run:
            with UnitOfWork(engine) as uow:
                done[table] = int(uow.execute(sql.prune_count(table), {"cutoff": cutoff}).scalar_one())
            continue
        done[table] = 0
        while True:
            with UnitOfWork(engine) as uow:
                n = int(uow.execute(sql.prune_batch(table), {"cutoff": cutoff, "batch": BATCH}).scalar_one())
                uow.commit()
            done[table] += int(n)
            if n < BATCH:
                break
    return done
