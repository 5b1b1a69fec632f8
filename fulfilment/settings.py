"""The fulfilment service's own configuration (`FULFILMENT_*`): it reads none of ours."""

from __future__ import annotations

import functools

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FulfilmentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FULFILMENT_", frozen=True, extra="ignore")

    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/outbox_fulfilment"
    redis_url: str = "redis://127.0.0.1:6379/0"
    stream: str = "outbox:cdc:events"
    group: str = "fulfilment"
    consumer: str = "fulfilment-1"
    batch: int = Field(100, ge=1, le=10_000)
    block_ms: int = Field(1000, ge=1)
    # A message another consumer of the group read and never acknowledged (it died) is taken over after this long.
    claim_idle_ms: int = Field(30_000, ge=1)
    # Development and tests only: die between the inbox's commit and XACK (the redelivery that must change nothing).
    fault: str = ""


@functools.cache
def get_settings() -> FulfilmentSettings:
    return FulfilmentSettings()
