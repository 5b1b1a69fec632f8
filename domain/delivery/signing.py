"""Standard Webhooks signing (webhook-id, webhook-timestamp, webhook-signature), via the reference library."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["WebhookVerificationError", "signed_headers", "verify"]


def signed_headers(secret: str, msg_id: str, body: str, now: datetime | None = None) -> dict[str, str]:
    ts = now or datetime.now(UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(ts.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, ts, body),
        "content-type": "application/json",
    }


def verify(secret: str, body: bytes, headers: dict[str, str]) -> Any:
    """Returns the parsed JSON, or raises WebhookVerificationError (bad signature, stale or future timestamp)."""
    return Webhook(secret).verify(body, headers)
