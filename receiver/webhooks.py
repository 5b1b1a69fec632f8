"""The mock receiver's webhooks (POST /webhooks/orders): the Standard Webhooks signature verified with the reference
library — the sender's system-wide secret first, then, with the secrets API on, a registered endpoint's — the event's
identity checked against its headers, the switched faults applied, and the effect applied once per (event_id,
effect_type) (receiver/batch.py). `handle_webhook` answers (status, JSON); `DROP` asks for the connection to die
mid-response (`DroppedResponse`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from typing import Any

from fastapi.responses import Response
from psycopg import AsyncConnection

from receiver import batch, db, faults, logs
from receiver.settings import get_settings
from receiver.signing import WebhookVerificationError, digest, verify

log = logging.getLogger("outbox.receiver")
EFFECT_TYPE = "customer_webhook"
SUPPORTED_SCHEMAS = (1,)


async def _registered_secrets() -> list[str]:
    async def read(c: AsyncConnection) -> list[str]:
        return [str(r[0]) for r in await (await c.execute(
            "SELECT secret FROM endpoint_secrets ORDER BY registered_at DESC LIMIT 100")).fetchall()]

    return await db.run(read)


async def _verified(body: bytes, headers: dict[str, str]) -> Any:
    """The parsed body of a webhook signed with the sender's system-wide secret or, when the secrets API is on,
    with a registered endpoint's (read only after the first check failed: the system's own webhooks cost nothing
    more). Raises WebhookVerificationError when none verifies."""
    try:
        return verify(get_settings().webhook_secret, body, headers)
    except (WebhookVerificationError, ValueError):
        if not get_settings().secrets_api:
            raise
    for secret in await _registered_secrets():
        try:
            return verify(secret, body, headers)
        except (WebhookVerificationError, ValueError):
            continue
    raise WebhookVerificationError("no registered secret verifies")


async def _record_delivery(event_id: uuid.UUID, outcome: str) -> None:
    async def insert(c: AsyncConnection) -> None:
        await c.execute("INSERT INTO webhook_deliveries (event_id, outcome) VALUES (%s, %s)", (event_id, outcome))

    await db.run(insert)


async def apply_effect(event_id: uuid.UUID, request_digest: str) -> tuple[str, str]:
    """Returns (outcome, result_ref): outcome is accepted | already_processed | identity_conflict. Concurrent calls
    of this process share one statement (receiver/batch.py: APPLY_EFFECT for many rows), each answered after it."""
    return await batch.batcher(EFFECT_TYPE).apply(event_id, request_digest, "fx-" + secrets.token_hex(8))


DROP: dict[str, Any] = {}  # handle_webhook's answer when the connection is to die mid-response


async def handle_webhook(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """(status, JSON answer) of one webhook POST; `headers` with lower-case names."""
    try:
        data = await _verified(body, headers)
    except (WebhookVerificationError, ValueError):
        return 401, {"error": "bad_signature"}
    try:
        event_id = uuid.UUID(str(data["event_id"]))
    except (KeyError, ValueError, TypeError):
        return 422, {"error": "malformed_event"}
    if headers.get("webhook-id") != str(event_id) or headers.get("idempotency-key") != str(event_id):
        return 422, {"error": "identity_mismatch"}
    armed = faults.armed()  # read once: nothing armed (the common case) costs no query and no further check
    if armed:
        switches = await faults.current()
        if switches is not None and switches.slow_seconds:
            await asyncio.sleep(switches.slow_seconds)
        if await faults.take("fail_503"):
            await _record_delivery(event_id, "503")
            return 503, {"error": "unavailable"}
    if (armed and await faults.take("fail_422")) or data.get("schema_version") not in SUPPORTED_SCHEMAS:
        await _record_delivery(event_id, "422")
        return 422, {"error": "unsupported_schema"}
    outcome, result_ref = await apply_effect(event_id, digest(data))
    logs.info(log, "webhook", event_id=str(event_id), outcome=outcome, result_ref=result_ref,
              tenant=data.get("tenant_id"))
    if outcome == "identity_conflict":
        log.warning("identity conflict event_id=%s", event_id)
        return 409, {"error": "identity_conflict", "result_ref": result_ref}
    if armed and outcome == "accepted" and await faults.take("accept_then_hang"):
        await asyncio.sleep(3600)  # the effect is applied; the caller will time out and must retry
    if armed and outcome == "accepted" and await faults.take("accept_then_drop"):
        return 200, DROP  # the effect is applied; the connection dies mid-response
    return 200, {"status": outcome, "result_ref": result_ref, "event_id": str(event_id)}


class DroppedResponse(Response):
    """Promise a body, send half of it, then fail: the server closes the connection mid-response and the caller
    sees a transport error, not an answer — exactly the uncertain window after a remote effect."""

    def __init__(self) -> None:
        super().__init__()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")]})
        await send({"type": "http.response.body", "body": b'{"status": "acc', "more_body": True})
        raise ConnectionAbortedError("fault: accept_then_drop")
