"""Process configuration, read once from the environment.

Every process (dashboard, relay, lane workers, receiver, CLI, tests) reads the same variables, so one
`OUTBOX_DATABASE_URL` / `OUTBOX_REDIS_URL` pair points a whole system at its own database and Redis db index.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Settings:
    database_url: str = field(default_factory=lambda: _env(
        "OUTBOX_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/outbox"))
    redis_url: str = field(default_factory=lambda: _env("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0"))
    receiver_url: str = field(default_factory=lambda: _env("OUTBOX_RECEIVER_URL", "http://127.0.0.1:8090"))
    app_url: str = field(default_factory=lambda: _env("OUTBOX_APP_URL", "http://127.0.0.1:3000"))
    # Standard Webhooks secrets ("whsec_" + base64). Demo defaults; production sets its own.
    webhook_secret: str = field(default_factory=lambda: _env(
        "OUTBOX_WEBHOOK_SECRET", "whsec_b3V0Ym94LWRlbW8td2ViaG9vay1zZWNyZXQtMDAwMQ=="))
    receipt_secret: str = field(default_factory=lambda: _env(
        "OUTBOX_RECEIPT_SECRET", "whsec_b3V0Ym94LWRlbW8tcmVjZWlwdC1zZWNyZXQtMDAwMg=="))
    lease_seconds: float = field(default_factory=lambda: float(_env("OUTBOX_LEASE_SECONDS", "30")))
    scan_interval: float = field(default_factory=lambda: float(_env("OUTBOX_SCAN_INTERVAL", "5")))
    bulk_rate_per_second: float = field(default_factory=lambda: float(_env("OUTBOX_BULK_RATE", "5")))
    oldest_owed_slo_seconds: float = field(default_factory=lambda: float(_env("OUTBOX_SLO_SECONDS", "60")))
    max_attempts: int = field(default_factory=lambda: int(_env("OUTBOX_MAX_ATTEMPTS", "8")))
    backoff_base: float = field(default_factory=lambda: float(_env("OUTBOX_BACKOFF_BASE", "1.0")))
    backoff_cap: float = field(default_factory=lambda: float(_env("OUTBOX_BACKOFF_CAP", "300")))
    max_body_bytes: int = field(default_factory=lambda: int(_env("OUTBOX_MAX_BODY_BYTES", "65536")))
    dev_mode: bool = field(default_factory=lambda: _env("OUTBOX_DEV_MODE", "1") == "1")
    fault: str = field(default_factory=lambda: _env("OUTBOX_FAULT", ""))


def get_settings() -> Settings:
    return Settings()
