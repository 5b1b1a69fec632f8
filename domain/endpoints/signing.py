"""One Standard Webhooks `webhook-signature` header signed with every live secret of an endpoint (during a
rotation: the new one and the previous one, space-separated, as the spec allows), so a receiver that verifies with
either secret accepts the message."""

from __future__ import annotations

from datetime import UTC, datetime

from domain.delivery.signing import signed_headers


def signed_headers_all(secrets: list[str], msg_id: str, body: str, now: datetime | None = None) -> dict[str, str]:
    if not secrets:
        raise ValueError("an endpoint always has a secret")
    now = now or datetime.now(UTC)
    each = [signed_headers(s, msg_id, body, now) for s in secrets]
    return {**each[0], "webhook-signature": " ".join(h["webhook-signature"] for h in each)}
