"""Create, reset and migrate a database. Migrations run through Alembic only, never on import."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from domain.settings import reload_settings
from jobs.ops.procs import ROOT


def _server_url(url: str) -> str:
    return make_url(url).set(database="postgres").render_as_string(hide_password=False)


def ensure_database(url: str, reset: bool = False) -> bool:
    """Create the database named in `url` if missing (drop it first with reset). Returns True if created."""
    name = make_url(url).database
    assert name and name.replace("_", "").isalnum(), name
    eng = sa.create_engine(_server_url(url), isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as c:
            exists = c.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            if exists and reset:
                c.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
                exists = None
            if not exists:
                c.execute(sa.text(f'CREATE DATABASE "{name}"'))
                return True
    finally:
        eng.dispose()
    return False


def isolated_environment(db_name: str, redis_db: int, **extra: str) -> str:
    """Point this process (and every process it starts) at its own freshly migrated, seeded database and a
    flushed Redis db, next to whatever the running system uses. Returns the Redis URL."""
    import os

    import redis

    base = os.environ.get("OUTBOX_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/outbox")
    db_url = base.rsplit("/", 1)[0] + "/" + db_name
    redis_url = os.environ.get("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0] + f"/{redis_db}"
    os.environ.update({"OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": db_url, "OUTBOX_REDIS_URL": redis_url,
                       "OUTBOX_FAULT": "", **extra})
    reload_settings()
    ensure_database(db_url, reset=True)
    migrate(db_url)
    from jobs.ops.seed import seed

    seed()
    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    r.close()
    return redis_url


def migrate(url: str) -> None:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    cfg.attributes["url"] = url
    command.upgrade(cfg, "head")
