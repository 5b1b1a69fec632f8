"""The fulfilment service's tables (SQLAlchemy Core, for its migrations), its connections and its migrations."""

from __future__ import annotations

from pathlib import Path

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import make_url

from fulfilment.settings import get_settings

metadata = sa.MetaData()
NOW = sa.text("now()")
OUTCOMES = ("applied", "parked", "stale")

# Every event ever taken in, once: "a redelivered event changes nothing" is this primary key, written in the
# transaction that applies the event. `digest` is what the id stood for the first time (an identity conflict is
# the same id with another). A parked event (its aggregate's previous revision not yet seen) keeps its body here.
inbox = sa.Table(
    "inbox", metadata,
    sa.Column("event_id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("tenant_id", sa.Integer, nullable=False),
    sa.Column("aggregate_type", sa.Text, nullable=False),
    sa.Column("aggregate_id", sa.Text, nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("payload", pg.JSONB, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("outcome IN ('applied', 'parked', 'stale')", name="inbox_outcome"),
)
sa.Index("inbox_parked", inbox.c.tenant_id, inbox.c.aggregate_type, inbox.c.aggregate_id, inbox.c.revision,
         postgresql_where=sa.text("outcome = 'parked'"))

# The projection: where each order stands, as far as the revisions applied in order take it.
fulfilments = sa.Table(
    "fulfilments", metadata,
    sa.Column("tenant_id", sa.Integer, nullable=False),
    sa.Column("aggregate_type", sa.Text, nullable=False),
    sa.Column("aggregate_id", sa.Text, nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("last_event_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("applied_events", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("tenant_id", "aggregate_type", "aggregate_id"),
)

# A revision the projection waits for: noticed when a later one came first; closed when it arrives.
gaps = sa.Table(
    "gaps", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("tenant_id", sa.Integer, nullable=False),
    sa.Column("aggregate_type", sa.Text, nullable=False),
    sa.Column("aggregate_id", sa.Text, nullable=False),
    sa.Column("missing_revision", sa.Integer, nullable=False),
    sa.Column("seen_revision", sa.Integer, nullable=False),
    sa.Column("noticed_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("tenant_id", "aggregate_type", "aggregate_id", "missing_revision",
                        name="gaps_one_per_revision"),
)

# Identity conflicts refused: the same event id with another digest (counted; the first body stays).
refusals = sa.Table(
    "refusals", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("event_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("digest_kept", sa.Text, nullable=False),
    sa.Column("digest_refused", sa.Text, nullable=False),
    sa.Column("refused_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def connect(url: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
    """Autocommit, so that each `with conn.transaction()` of the caller is a real BEGIN ... COMMIT (one per event),
    never a savepoint inside a transaction a stray read left open."""
    return psycopg.connect(conninfo(url or get_settings().database_url), autocommit=True,
                           application_name="fulfilment")


def ensure_database(url: str, reset: bool = False) -> None:
    name = make_url(url).database
    assert name and name.replace("_", "").isalnum(), name
    with psycopg.connect(conninfo(str(make_url(url).set(database="postgres"))), autocommit=True) as c:
        if reset:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            c.execute(f'CREATE DATABASE "{name}"')


def migrate(url: str | None = None, reset: bool = False) -> None:
    url = url or get_settings().database_url
    ensure_database(url, reset)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["url"] = url
    command.upgrade(cfg, "head")
