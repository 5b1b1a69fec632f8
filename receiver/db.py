"""The receiver's tables (SQLAlchemy Core), engine and migrations, in its own database."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from psycopg import AsyncConnection, OperationalError
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import Engine, make_url

from receiver.settings import get_settings

metadata = sa.MetaData()
NOW = sa.text("now()")

# One row per applied effect: the invariant "one effect per (event_id, effect_type)" is this UNIQUE constraint.
webhook_effects = sa.Table(
    "webhook_effects", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("event_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("effect_type", sa.Text, nullable=False),
    sa.Column("request_digest", sa.Text, nullable=False),
    sa.Column("result_ref", sa.Text, nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    sa.UniqueConstraint("event_id", "effect_type", name="webhook_effects_once"),
)

# Every call seen, whatever its outcome (effects are counted above, calls here).
webhook_deliveries = sa.Table(
    "webhook_deliveries", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("event_id", pg.UUID(as_uuid=True), nullable=False, index=True),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
)

provider_messages = sa.Table(
    "provider_messages", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("reference", sa.Text, nullable=False, unique=True),
    sa.Column("idempotency_key", sa.Text, nullable=False, unique=True),
    sa.Column("to_address_hash", sa.Text, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
)

# The /faults switch board: one row every process of the receiver reads and decrements (counted faults are taken
# with one atomic UPDATE, so N processes never take one shot twice). `receipt_delay` NULL means the setting's.
receiver_faults = sa.Table(
    "receiver_faults", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("fail_503", sa.Integer, nullable=False, server_default="0"),
    sa.Column("fail_422", sa.Integer, nullable=False, server_default="0"),
    sa.Column("slow_seconds", sa.Float, nullable=False, server_default="0"),
    sa.Column("accept_then_hang", sa.Integer, nullable=False, server_default="0"),
    sa.Column("accept_then_drop", sa.Integer, nullable=False, server_default="0"),
    sa.Column("receipt_delay", sa.Float, nullable=True),
    sa.CheckConstraint("id = 1", name="receiver_faults_one_row"),
)

# Secrets of the sender's endpoints pointed at this mock, registered through its own API (PUT /endpoint-secrets/
# {name}, development only): a webhook that does not verify with `webhook_secret` is tried against these.
endpoint_secrets = sa.Table(
    "endpoint_secrets", metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("secret", sa.Text, nullable=False),
    sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


@functools.cache
def engine_for(url: str) -> Engine:
    # Migrations and the tests' direct reads only: requests go through the async pool below.
    return sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4)


def engine() -> Engine:
    return engine_for(get_settings().database_url)


# Requests hold a connection for one statement at a time: a few per process serve hundreds of requests a second.
POOL_MAX = 8
T = TypeVar("T")


_pool: AsyncConnectionPool | None = None


def conninfo(url: str) -> str:
    """The SQLAlchemy URL as libpq reads it (psycopg's own pool, without SQLAlchemy on the request path)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def open_pool() -> None:
    """A server process's pool for requests (the app's lifespan opens it and closes it on the way out)."""
    global _pool
    _pool = AsyncConnectionPool(conninfo(get_settings().database_url), min_size=2, max_size=POOL_MAX, open=False,
                                kwargs={"autocommit": True}, name="receiver")
    await _pool.open()


async def close_pool() -> None:
    global _pool
    if _pool is not None:
        await _pool.close()
        _pool = None


async def _once(fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    if _pool is not None:
        async with _pool.connection() as c:
            return await fn(c)
    # The app run in-process without its lifespan (the tests' ASGI transport, one event loop per call): a
    # connection of its own, so nothing outlives the loop.
    async with await AsyncConnection.connect(conninfo(get_settings().database_url), autocommit=True) as c:
        return await fn(c)


async def run(fn: Callable[[AsyncConnection], Awaitable[T]], retry: bool = False) -> T:
    """`fn` on a connection (autocommit: each statement is its own transaction). With `retry`, a connection killed
    under us (PostgreSQL restarted) is replaced and `fn` run once more: only for statements that apply nothing twice
    (INSERT … ON CONFLICT)."""
    try:
        return await _once(fn)
    except OperationalError:
        if not retry:
            raise
        return await _once(fn)


def ensure_database(url: str, reset: bool = False) -> None:
    name = make_url(url).database
    assert name and name.replace("_", "").isalnum(), name
    server = sa.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with server.connect() as c:
            if reset:
                c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            if not c.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
                c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        server.dispose()


def migrate(url: str | None = None, reset: bool = False) -> None:
    """Create the database if missing (drop it first with reset) and apply the receiver's own migrations."""
    url = url or get_settings().database_url
    ensure_database(url, reset)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["url"] = url
    command.upgrade(cfg, "head")


INVARIANTS = {
    "4 two effects for one (event_id, effect_type)":
        "SELECT count(*) FROM (SELECT event_id, effect_type FROM webhook_effects "
        "GROUP BY event_id, effect_type HAVING count(*) > 1) x",
}
