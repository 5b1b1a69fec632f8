"""The one place that opens transactions.

`UnitOfWork` rolls back in `__exit__` unless `commit()` was called, exactly once (cosmicpython's pattern). Helpers
take the unit of work and never commit on their own: that is what lets the order update, the outbox envelope and its
ledger rows share ONE commit.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import quote, urlencode

import psycopg
import sqlalchemy as sa
from psycopg.rows import RowMaker, namedtuple_row
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Connection, Dialect, Engine, Result, make_url
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, TextClause
from sqlalchemy.util import await_only, greenlet_spawn

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


# ---- sync unit-of-work code on an async psycopg connection (the workers' store, domain/delivery/store.py) ----------
P = ParamSpec("P")
T = TypeVar("T")


async def run_sync(conn: psycopg.AsyncConnection[Any], fn: Callable[Concatenate[UnitOfWork, P], T],
                   *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(uow, *args, **kwargs)` — sync code written against a `UnitOfWork` (the long way of a claim or a record,
    the ledger's and the breaker's helpers) — run on `conn`, in the transaction its caller holds open there, on
    this event loop: each statement is awaited through a greenlet (SQLAlchemy's `greenlet_spawn`, the bridge its own
    asyncio extension runs sync code on). No thread, no second connection: the fast path's statements and the long
    way's are one transaction. `fn` never commits (the caller's transaction does); a statement that failed fails the
    transaction even if `fn` caught it."""
    uow = _OnAsyncConnection(conn)
    result: T = await greenlet_spawn(functools.partial(fn, uow, *args, **kwargs))
    if uow.failed is not None:
        raise uow.failed
    return result


class _OnAsyncConnection(UnitOfWork):
    """A `UnitOfWork` whose statements run on an async psycopg connection someone else's transaction holds (see
    `run_sync`); only inside `run_sync`'s greenlet. Results answer as SQLAlchemy's do (`first`, `one`, `scalar`,
    `scalar_one`, `scalars`, `all`, rows by attribute and by `_mapping`)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        super().__init__(engine=_NO_ENGINE)
        self._async = conn
        self.failed: BaseException | None = None

    @property
    def connection(self) -> Connection:
        raise TypeError("a unit of work on an async connection has no SQLAlchemy connection")

    def execute(self, statement: Executable, params: Mapping[str, Any] | None = None) -> Result[Any]:
        assert isinstance(statement, ClauseElement)
        rows, rowcount = self._run(statement, params or {})
        return DriverResult(rows, rowcount)  # type: ignore[return-value]  # Result's reading surface, duck-typed

    def fetch(self, statement: TextClause, params: Mapping[str, Any]) -> list[Any]:
        return self._run(statement, params)[0]

    def _run(self, statement: ClauseElement, params: Mapping[str, Any]) -> tuple[list[Any], int]:
        text, defaults = _compiled(statement)
        try:
            return await_only(_execute(self._async, text, {**defaults, **params}))
        except BaseException as exc:
            self.failed = exc
            raise

    def rollback(self) -> None:
        raise TypeError("the caller's transaction ends it, not the code it runs")

    def commit(self) -> None:
        raise TypeError("the caller's transaction commits, not the code it runs")


_NO_ENGINE: Any = object()  # `_OnAsyncConnection` never opens a connection of its own


@functools.lru_cache(maxsize=1024)  # most are module constants; a few are built per call (sql.settle_unleased)
def _compiled(statement: ClauseElement) -> tuple[str, dict[str, Any]]:
    """`statement` as psycopg takes it (`%(name)s`, a literal `%` doubled) and the values it binds itself."""
    compiled = statement.compile(dialect=_PSYCOPG)
    assert isinstance(compiled, SQLCompiler)
    binds = compiled.binds
    # A value the statement carries (a Core construct's `values(leased_until=None)`), not a `:name` left to the caller.
    return str(compiled), {k: v for k, v in compiled.params.items() if k in binds and not binds[k].required}


_PSYCOPG = psycopg_dialect()  # type: ignore[no-untyped-call]


async def _execute(conn: psycopg.AsyncConnection[Any], text: str, params: Mapping[str, Any]) -> tuple[list[Any], int]:
    """One statement and its rows. Inside a pipeline (the fast path's), its own nested pipeline syncs it, so its
    rows and its row count are there when it returns."""
    cur = conn.cursor(row_factory=_rows)
    async with conn.pipeline():
        await cur.execute(text, params)
    rows = await cur.fetchall() if cur.description is not None else []
    return rows, cur.rowcount


def _rows(cursor: Any) -> RowMaker[Any]:
    names = tuple(c.name for c in cursor.description or ())
    make = _row_class(names)
    return lambda values: make._make(values)


@functools.cache
def _row_class(names: tuple[str, ...]) -> Any:
    base = namedtuple("DriverRow", names, rename=True)  # type: ignore[misc]  # the names are the statement's columns

    class DriverRow(base):
        __slots__ = ()

        @property
        def _mapping(self) -> dict[str, Any]:
            return dict(zip(names, self, strict=True))

    return DriverRow


class _Scalars(list[Any]):
    def all(self) -> list[Any]:
        return list(self)


class DriverResult:
    """A statement's rows, read the way long-way code reads SQLAlchemy's `Result`."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    def fetchall(self) -> list[Any]:
        return list(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if len(self._rows) != 1:
            raise NoResultFound("no row") if not self._rows else MultipleResultsFound("more than one row")
        return self._rows[0]

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise MultipleResultsFound("more than one row")
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> _Scalars:
        return _Scalars(r[0] for r in self._rows)

    def mappings(self) -> list[dict[str, Any]]:
        return [r._mapping for r in self._rows]


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
