"""Standard Webhooks signing and the request digest, the receiver's own few lines (via the reference library)."""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["WebhookVerificationError", "digest", "signed_headers", "verify"]


@functools.lru_cache(maxsize=8)
def _webhook(secret: str) -> Webhook:
    return Webhook(secret)  # decodes the secret once, not on every request


def verify(secret: str, body: bytes, headers: dict[str, str]) -> Any:
    """The parsed JSON body, or WebhookVerificationError (bad signature, stale or future timestamp)."""
    return _webhook(secret).verify(body, headers)


def signed_headers(secret: str, msg_id: str, body: str) -> dict[str, str]:
    ts = datetime.now(UTC)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(ts.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, ts, body), "content-type": "application/json"}


def digest(obj: Any) -> str:
    """What identifies a request body: the same event id with another digest is an identity conflict."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
