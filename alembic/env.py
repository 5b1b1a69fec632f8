from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import domain.models  # noqa: F401  (registers every table on SQLModel.metadata)
from domain.db import engine_for
from domain.settings import get_settings

target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    url = context.config.attributes.get("url") or get_settings().database_url
    with engine_for(url).connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
