"""Month partitions kept ahead: this month and `ahead` more exist for every partitioned table, and a row that fell
into a DEFAULT partition (its month did not exist yet) is moved into its own month. Run by the relay (at start and
every hour) and by `outbox partitions ensure`; idempotent, cheap when nothing is missing (a catalog read)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.retention import sql
from domain.retention.months import (
    PARTITIONED,
    add_months,
    bounds,
    month_of,
    month_of_partition,
    parse_month,
    partition_name,
)


@dataclass(frozen=True)
class Partition:
    parent: str
    name: str
    month: date | None  # None: the DEFAULT partition


def partitions(engine: Engine | None = None) -> list[Partition]:
    """Every partition of every partitioned table, oldest month first (the DEFAULT last)."""
    got: list[Partition] = []
    with UnitOfWork(engine) as uow:
        for parent in PARTITIONED:
            rows = uow.execute(sql.PARTITIONS_OF, {"parent": parent}).all()
            got += sorted((Partition(parent, r.name, month_of_partition(parent, r.name)) for r in rows),
                          key=lambda p: (p.month is None, p.month or date.min))
    return got


def default_months(engine: Engine | None = None) -> set[date]:
    """The months of rows waiting in a DEFAULT partition (their month's partition not created yet)."""
    with UnitOfWork(engine) as uow:
        return {parse_month(r.month) for parent in PARTITIONED for r in uow.execute(sql.default_months(parent))}


def ensure_partitions(ahead: int = 3, now: datetime | None = None, engine: Engine | None = None) -> list[str]:
    """Create what is missing; returns the partitions created (empty when all were there)."""
    this_month = month_of(now or datetime.now(UTC))
    have = {(p.parent, p.month) for p in partitions(engine)}
    created: list[str] = []
    for parent in PARTITIONED:
        with UnitOfWork(engine) as uow:
            early = {parse_month(r.month) for r in uow.execute(sql.default_months(parent))}
        wanted = {add_months(this_month, i) for i in range(ahead + 1)} | early
        for m in sorted(wanted):
            if (parent, m) in have:
                continue
            name = partition_name(parent, m)
            lo, hi = bounds(m)
            with UnitOfWork(engine) as uow:  # one month, one short transaction
                uow.execute(sql.LOCK_TIMEOUT)
                for stmt in sql.create_month(parent, name, lo, hi):
                    uow.execute(stmt)
                uow.commit()
            created.append(name)
    return created
