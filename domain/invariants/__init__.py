"""The invariants of ARCHITECTURE.md, checked: each counts its offending rows (0 when it holds), and how often the
fence worked (`invariant_counts`, `fence_counts` below). Read by `outbox check`, the tests, the drills and the ops
screen. One line per module:

- `sql` — each invariant as one statement returning 0 when it holds, and the fence's outcomes.
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.invariants import sql


def invariant_counts(engine: Engine | None = None, only: tuple[str, ...] | None = None) -> dict[str, int]:
    """Every invariant's count of offending rows (`only`: just these, by name)."""
    names = sql.INVARIANTS if only is None else only
    with UnitOfWork(engine) as uow:
        return {name: int(uow.execute(sql.INVARIANT_STATEMENTS[name]).scalar_one()) for name in names}


def fence_counts(engine: Engine | None = None) -> dict[str, int]:
    """How often the fence worked: late truths recorded (`late_accept`) and stale writes refused (`stale`)."""
    with UnitOfWork(engine) as uow:
        got = {str(r.outcome): int(r.n) for r in uow.execute(sql.FENCE_OUTCOMES)}
    return {"late_accept": got.get("late_accept", 0), "stale": got.get("stale", 0)}
