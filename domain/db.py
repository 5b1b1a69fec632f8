"""The one place that opens transactions.

`UnitOfWork` rolls back in `__exit__` unless `commit()` was called, exactly once (cosmicpython's pattern). Helpers
take the session and never commit on their own: that is what lets the order update, the outbox envelope and its
ledger rows share ONE commit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, Result
from sqlalchemy.sql.base import Executable
from sqlmodel import Session

from domain.settings import get_settings


@functools.cache
def engine_for(url: str) -> Engine:
    return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, future=True)


def get_engine() -> Engine:
    return engine_for(get_settings().database_url)


class UnitOfWork:
    def __init__(self, engine: Engine | None = None) -> None:
        self._engine = engine or get_engine()
        self.committed = False

    def __enter__(self) -> UnitOfWork:
        self.session = Session(self._engine, expire_on_commit=False)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.committed:
            self.session.rollback()
        self.session.close()

    def execute(self, statement: Executable, params: Mapping[str, Any] | None = None) -> Result[Any]:
        return self.session.execute(statement, dict(params or {}))

    def commit(self) -> None:
        self.session.commit()
        self.committed = True


def like_escape(text: str) -> str:
    """A search term taken literally by LIKE/ILIKE: `%` and `_` match only themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def as_dicts(result: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in result]
