"""The mock providers (POST /providers/{whatsapp|sms|email}/messages): a provider reference for each message,
idempotent by its idempotency key, then a signed delivery receipt posted back to the app a little later (and only
while the provider still holds the message). `handle_provider_message` answers (status, JSON, the receipt to post).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from typing import Any

import httpx
from psycopg import AsyncConnection
from pydantic import BaseModel

from receiver import db, faults, logs
from receiver.settings import get_settings
from receiver.signing import signed_headers

log = logging.getLogger("outbox.receiver")
PROVIDERS = ("whatsapp", "sms", "email")


class ProviderMessageIn(BaseModel):
    to: str
    template: str
    body: str | None = None  # the rendered text; a real provider would deliver it (never stored here)
    vars: dict[str, Any] = {}
    idempotency_key: str
    # Ignored: receipts go only to the configured app URL, never to an address a caller names.
    callback_url: str | None = None


# As a webhook's effect (receiver/batch.py): one statement; the caller's fresh reference coming back means this call
# stored the message.
STORE_MESSAGE = """
INSERT INTO provider_messages (provider, reference, idempotency_key, to_address_hash)
VALUES (%(provider)s, %(ref)s, %(key)s, %(to_hash)s)
ON CONFLICT (idempotency_key) DO UPDATE SET reference = provider_messages.reference
RETURNING reference
"""


async def _store_message(provider: str, m: ProviderMessageIn) -> tuple[str, bool]:
    ref = f"{provider}-{uuid.uuid4().hex[:12]}"
    params = {"provider": provider, "ref": ref, "key": m.idempotency_key,
              "to_hash": hashlib.sha256(m.to.encode()).hexdigest()[:16]}

    async def store(c: AsyncConnection) -> str:
        row = await (await c.execute(STORE_MESSAGE, params)).fetchone()
        assert row is not None
        return str(row[0])

    stored = await db.run(store, retry=True)
    return stored, stored == ref


async def send_receipt(provider: str, reference: str, outcome: str, client_reference: str) -> None:
    """Signed like any Standard Webhook, posted to the configured app only; retried while the app has not yet
    recorded the send. `client_reference` echoes the sender's idempotency key, as real providers echo metadata."""
    switches = await faults.current()
    delay = switches.receipt_delay if switches and switches.receipt_delay is not None else get_settings().receipt_delay
    await asyncio.sleep(delay)
    if not await _still_held(reference):  # the provider forgot the message meanwhile (the mock was reset): no receipt
        return
    receipt_id = f"rcpt-{reference}"
    callback_url = f"{get_settings().app_url}/api/v1/receipts/{provider}"
    body = json.dumps({"receipt_id": receipt_id, "provider_reference": reference, "outcome": outcome,
                       "client_reference": client_reference})
    client = _receipt_client()
    for attempt in range(20):
        try:
            r = await client.post(callback_url, content=body,
                                  headers=signed_headers(get_settings().receipt_secret, receipt_id, body))
            if r.status_code < 300 or r.status_code in (400, 401, 404):
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(min(0.25 * (attempt + 1), 2.0))


HELD_MESSAGE = "SELECT 1 FROM provider_messages WHERE reference = %(ref)s"


async def _still_held(reference: str) -> bool:
    """The provider still holds the message it is about to post a receipt for. A reset of this mock (each test's
    start: `tests/conftest.py reset_receiver`) empties its messages; a receipt of one sent before it, still waiting
    out its delay, would otherwise land in the next test and match that test's message of the same idempotency key
    (a journey's nudge for the same lead and step) — DELIVERED before any worker ran."""

    async def read(c: AsyncConnection) -> bool:
        return await (await c.execute(HELD_MESSAGE, {"ref": reference})).fetchone() is not None

    return await db.run(read)


_client: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


def _receipt_client() -> httpx.AsyncClient:
    """One pooled client for every receipt of this process (a client per receipt costs a connection each); one per
    event loop, as the database pool."""
    global _client
    loop = asyncio.get_running_loop()
    if _client is None or _client[0] is not loop:
        _client = (loop, httpx.AsyncClient(timeout=5, limits=httpx.Limits(max_connections=20)))
    return _client[1]


async def close_receipt_client() -> None:
    """On the way out of a server process: its one receipt client, if it made one, is closed."""
    if _client is not None:
        await _client[1].aclose()


async def handle_provider_message(provider: str, m: ProviderMessageIn) -> tuple[
        int, dict[str, Any], tuple[str, str, str, str] | None]:
    """(status, JSON answer, the receipt to post after answering or None)."""
    if provider not in PROVIDERS:
        return 404, {"error": "unknown_provider"}, None
    if await faults.take("fail_503"):
        return 503, {"error": "unavailable"}, None
    ref, fresh = await _store_message(provider, m)
    logs.info(log, "provider message", provider=provider, reference=ref, fresh=fresh)
    if not fresh:
        return 200, {"status": "already_processed", "reference": ref}, None
    outcome = "failed" if "bounce" in m.to else "delivered"
    return 201, {"status": "accepted", "reference": ref}, (provider, ref, outcome, m.idempotency_key)
