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
