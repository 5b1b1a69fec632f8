"""The one place that opens transactions.

`UnitOfWork` rolls back in `__exit__` unless `commit()` was called, exactly once (cosmicpython's pattern). Helpers
take the unit of work and never commit on their own: that is what lets the order update, the outbox envelope and its
ledger rows share ONE commit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row
from sqlalchemy.engine import Connection, Dialect, Engine, Result, make_url
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.elements import TextClause

from domain.settings import get_settings


@functools.cache
def engine_for(url: str, prepared: bool = True) -> Engine:
    """A pooled engine on `url`. `prepared=False` (a PgBouncer in transaction mode, whose 1.18 cannot follow a
    statement prepared on one server connection to the next): psycopg never prepares server-side, every statement
    goes as an unnamed one (psycopg's `prepare_threshold=None`)."""
    connect_args: dict[str, Any] = {} if prepared else {"prepare_threshold": None}
    return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, future=True,
                            connect_args=connect_args)


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
    """The process's engine: through PgBouncer (OUTBOX_PGBOUNCER_URL, unprepared) when one is configured. Only
    transaction-scoped state runs on it (SET LOCAL, pg_advisory_xact_lock, NOTIFY at commit): a session's SET,
    LISTEN, advisory lock or temporary table would land on whichever server connection the next transaction gets."""
    s = get_settings()
    return engine_for(s.pooled_database_url, prepared=not s.pgbouncer_url)


@functools.cache
def _driver_sql(statement: TextClause, dialect: Dialect) -> str:
    """`statement` as the driver takes it (`%(name)s` placeholders, a literal `%` doubled), compiled once."""
    return str(statement.compile(dialect=dialect))


class UnitOfWork:
    """One transaction on one pooled connection (a Core connection: nothing here uses the ORM's identity map or
    unit of work, whose bookkeeping was a sixth of the order command's CPU). The connection is taken on the first
    statement, so a unit of work that runs none holds none."""

    def __init__(self, engine: Engine | None = None) -> None:
        self._engine = engine or get_engine()
        self._conn: Connection | None = None
        self.committed = False

    def __enter__(self) -> UnitOfWork:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if not self.committed:
                conn.rollback()
            conn.close()

    @property
    def connection(self) -> Connection:
        if self._conn is None:
            self._conn = self._engine.connect()
        return self._conn

    def execute(self, statement: Executable, params: Mapping[str, Any] | None = None) -> Result[Any]:
        return self.connection.execute(statement, dict(params or {}))

    def fetch(self, statement: TextClause, params: Mapping[str, Any]) -> list[Any]:
        """The rows (named tuples) of a named `text()` statement, run in this unit of work's transaction straight on
        the driver's connection. For the order command's two statements: SQLAlchemy's per-statement bookkeeping
        (cache lookup, result metadata) cost ~90 us of CPU a statement where psycopg's own work is ~20 us, and the
        commands of every client of a process share one interpreter lock. Errors are psycopg's, not SQLAlchemy's
        wrappers; the transaction (begin, commit, rollback) stays SQLAlchemy's."""
        conn = self.connection
        if not conn.in_transaction():
            conn.begin()
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        with driver.cursor(row_factory=namedtuple_row) as cur:
            cur.execute(_driver_sql(statement, self._engine.dialect), params)
            return cur.fetchall() if cur.description is not None else []

    def rollback(self) -> None:
        """End the transaction so far, writing nothing; the next statement starts a new one."""
        if self._conn is not None:
            self._conn.rollback()

    def commit(self) -> None:
        if self._conn is not None:
            self._conn.commit()
        self.committed = True


def like_escape(text: str) -> str:
    """A search term taken literally by LIKE/ILIKE: `%` and `_` match only themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def as_dicts(result: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in result]


def is_deadlock(exc: BaseException) -> bool:
    """Was this transaction the victim PostgreSQL chose to end a deadlock? Its whole transaction was rolled back, so
    running it again from the start is safe and is the remedy: a cancel or a journey step taking many rows, then a
    tenant's balance, against a worker's batch that took the balance first (both are right to lock what they lock;
    the order of two many-row statements cannot be fixed from outside them)."""
    orig = getattr(exc, "orig", exc)
    return isinstance(orig, psycopg.errors.DeadlockDetected)
