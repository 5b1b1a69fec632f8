from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import domain.models  # noqa: F401  (registers every table on SQLModel.metadata)
from domain.db import engine_for
from domain.settings import get_settings

target_metadata = SQLModel.metadata


def include_name(name, type_, parent_names):  # type: ignore[no-untyped-def]
    if type_ == "schema":
        return name in (None, "receiver")
    return True


def run_migrations_online() -> None:
    url = context.config.attributes.get("url") or get_settings().database_url
    with engine_for(url).connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, include_schemas=True,
            include_name=include_name, compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
