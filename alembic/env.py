from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import domain.models  # noqa: F401  (registers every table on SQLModel.metadata)
from domain.db import engine_for
from domain.retention.months import is_partition
from domain.settings import get_settings

target_metadata = SQLModel.metadata


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Month partitions are made at run time (domain/retention/), not by the models."""
    return not (type_ == "table" and reflected and compare_to is None and name is not None and is_partition(name))


def run_migrations_online() -> None:
    url = context.config.attributes.get("url") or get_settings().database_url
    with engine_for(url).connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, compare_type=True,
            include_object=include_object,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
