"""The receiver's own configuration (`RECEIVER_*`): it is another company's system and reads none of ours."""

from __future__ import annotations

import functools

from pydantic_settings import BaseSettings, SettingsConfigDict


class ReceiverSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECEIVER_", frozen=True, extra="ignore")

    # Its own database: we never join its tables, it never reads ours.
    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/outbox_receiver"
    # Standard Webhooks secrets shared with the sender out of band (demo values; tests and deployments set them).
    webhook_secret: str = "whsec_b3V0Ym94LWRlbW8td2ViaG9vay1zZWNyZXQtMDAwMQ=="
    receipt_secret: str = "whsec_b3V0Ym94LWRlbW8tcmVjZWlwdC1zZWNyZXQtMDAwMg=="
    # The one place delivery receipts are posted to (`{app_url}/api/v1/receipts/{provider}`), whatever a caller asks.
    app_url: str = "http://127.0.0.1:3000"
    # The /faults switch board (a test double's controls): off unless asked for.
    faults: bool = False
    # PUT /endpoint-secrets/{name} (the sender's endpoint secrets, so its signed test events verify): off unless
    # asked for, as /faults — a real receiver is never told secrets over an open route.
    secrets_api: bool = False
    # Server processes (`serve --workers` overrides): the mock must stay well above the system's rate.
    workers: int = 2
    # Providers post their delivery receipt this long after accepting (the /faults board can change it).
    receipt_delay: float = 0.3


@functools.cache
def get_settings() -> ReceiverSettings:
    return ReceiverSettings()
