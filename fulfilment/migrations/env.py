from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from fulfilment.db import metadata
from fulfilment.settings import get_settings


def run_migrations_online() -> None:
    url = context.config.attributes.get("url") or get_settings().database_url
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True,
                          version_table="fulfilment_alembic_version")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
