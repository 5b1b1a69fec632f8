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
from urllib.parse import quote, urlencode

import sqlalchemy as sa
from sqlalchemy.engine import Engine, Result, make_url
from sqlalchemy.sql.base import Executable
from sqlmodel import Session

from domain.settings import get_settings


@functools.cache
def engine_for(url: str) -> Engine:
    return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, future=True)


def libpq_url(url: str) -> str:
    """The libpq (psycopg) form of our SQLAlchemy URL, for the connections we open without SQLAlchemy (the workers'
    hot pool, the relay's LISTEN). One host: the same URL without the driver. Several hosts, written the way
    SQLAlchemy takes them (`postgresql+psycopg://u@/db?host=h1:p1&host=h2:p2&target_session_attrs=read-write`,
    a primary and its standby): libpq's own `postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write`, so
    every connection, SQLAlchemy's or not, lands on whichever of them is the primary now."""
    hosts = make_url(url).query.get("host")
    if not isinstance(hosts, tuple):
        return url.replace("postgresql+psycopg://", "postgresql://")
    u = make_url(url)
    auth = quote(u.username or "", safe="") + (f":{quote(u.password, safe='')}" if u.password else "")
    rest = urlencode([(k, x) for k, v in u.query.items() if k != "host" for x in ((v,) if isinstance(v, str) else v)])
    return f"postgresql://{auth}{'@' if auth else ''}{','.join(hosts)}/{u.database or ''}{'?' if rest else ''}{rest}"


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
