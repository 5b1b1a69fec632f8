"""Create, reset and migrate a database. Migrations run through Alembic only, never on import."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from jobs.procs import ROOT


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


def migrate(url: str) -> None:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    cfg.attributes["url"] = url
    command.upgrade(cfg, "head")
