"""The receiver's tables (SQLAlchemy Core), engine and migrations, in its own database."""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
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

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


@functools.cache
def engine_for(url: str) -> Engine:
    return sa.create_engine(url, pool_pre_ping=True, pool_size=16, max_overflow=8)  # 3 providers × 4 + webhooks


def engine() -> Engine:
    return engine_for(get_settings().database_url)


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
