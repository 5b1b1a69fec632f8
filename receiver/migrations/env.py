from __future__ import annotations

from alembic import context

from receiver.db import engine_for, metadata
from receiver.settings import get_settings


def run_migrations_online() -> None:
    url = context.config.attributes.get("url") or get_settings().database_url
    with engine_for(url).connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True,
                          version_table="receiver_alembic_version")
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
