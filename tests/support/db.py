"""The database as a whole: one value from a query, and every invariant of `outbox check` holding."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from domain import invariants
from domain.db import get_engine


def one(sql: str, **params: Any) -> Any:
    with get_engine().connect() as c:
        return c.execute(sa.text(sql), params).scalar()


def assert_invariants() -> None:
    counts = invariants.invariant_counts()
    assert not any(counts.values()), counts


def waiting_on_a_lock(query_like: str = "%") -> bool:
    """A backend of this database waits on a row or table lock, running a statement that matches `query_like`."""
    return bool(one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE :q", q=query_like))
