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


RECEIPT_BATCH_MAX = 100  # receipts in one post (the app takes up to 500)
RECEIPT_BATCH_WINDOW_S = 0.02  # how long a receipt waits for others to share its post
RECEIPT_POSTS_IN_FLIGHT = 4  # posts of one provider at once (a slow app does not hold up the next batch)


async def send_receipt(provider: str, reference: str, outcome: str, client_reference: str) -> None:
    """After the receipt delay, the receipt joins its provider's next post: a receipt alone is posted as one
    (Standard Webhooks, its id the webhook id), receipts ready within `RECEIPT_BATCH_WINDOW_S` of each other as one
    batch (as SendGrid or Twilio post their events), signed once. `client_reference` echoes the sender's idempotency
    key, as real providers echo metadata."""
    switches = await faults.current()
    delay = switches.receipt_delay if switches and switches.receipt_delay is not None else get_settings().receipt_delay
    await asyncio.sleep(delay)
    posted = asyncio.get_running_loop().create_future()
    _batcher(provider).put_nowait(({"receipt_id": f"rcpt-{reference}", "provider_reference": reference,
                                    "outcome": outcome, "client_reference": client_reference}, posted))
    await posted  # as before batching: the background task ends when its receipt was posted (or given up)


_Waiting = tuple[dict[str, str], "asyncio.Future[None]"]
_batchers: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Queue[_Waiting]] = {}
_posting: set[asyncio.Task[None]] = set()


def _batcher(provider: str) -> asyncio.Queue[_Waiting]:
    """The provider's queue of receipts to post, with its one collecting task (one per event loop)."""
    loop = asyncio.get_running_loop()
    queue = _batchers.get((loop, provider))
    if queue is None:
        queue = _batchers[(loop, provider)] = asyncio.Queue()
        task = loop.create_task(_collect(provider, queue, asyncio.Semaphore(RECEIPT_POSTS_IN_FLIGHT)))
        _posting.add(task)
    return queue


async def _collect(provider: str, queue: asyncio.Queue[_Waiting], in_flight: asyncio.Semaphore) -> None:
    """For ever: the first receipt waiting, and every other ready within the window, up to a batch; each batch
    posted by a task of its own. A receipt that breaks a silence (none came within the window before it, none
    waits behind it) is posted at once: a quiet provider's receipt has no company to wait for, and waiting the
    window for none only made it 20 ms later. A stream of receipts (a campaign's) still goes in batches."""
    loop = asyncio.get_running_loop()
    last = float("-inf")  # when the collector last took a receipt (the loop's clock)
    while True:
        batch = [await queue.get()]
        now = loop.time()
        alone = now - last >= RECEIPT_BATCH_WINDOW_S and queue.empty()
        last = now
        until = now + RECEIPT_BATCH_WINDOW_S
        while not alone and len(batch) < RECEIPT_BATCH_MAX and (left := until - loop.time()) > 0:
            try:
                batch.append(await asyncio.wait_for(queue.get(), left))
            except TimeoutError:
                break
            last = loop.time()
        await in_flight.acquire()
        task = loop.create_task(_post_receipts(provider, batch))
        _posting.add(task)
        task.add_done_callback(lambda done: _posted(done, in_flight))


def _posted(task: asyncio.Task[None], in_flight: asyncio.Semaphore) -> None:
    _posting.discard(task)
    in_flight.release()


async def _post_receipts(provider: str, waiting: list[_Waiting]) -> None:
    """Posted to the configured app only; retried while the app does not answer. Only receipts of messages the
    provider still holds (a reset of this mock forgets them). Each waiting sender is told when it is done."""
    receipts = [receipt for receipt, _ in waiting]
    try:
        held = await _still_held([r["provider_reference"] for r in receipts])
        receipts = [r for r in receipts if r["provider_reference"] in held]
        if receipts:
            await _post_in_parts(provider, receipts)
    except Exception as exc:  # a mock's receipt lost: the app's record stands (as a provider's outage would)
        log.warning("receipts not posted: %s", type(exc).__name__)
    finally:
        for _, posted in waiting:
            if not posted.done():
                posted.set_result(None)


async def _post_in_parts(provider: str, receipts: list[dict[str, str]]) -> None:
    """One post for these receipts (alone: as a single receipt); a batch the app refuses as too large (413: its
    body limit, `OUTBOX_MAX_BODY_BYTES`, counts bytes, not receipts) is posted again as two halves, each under an id
    of its own, down to one receipt a post — never retried whole, which the app would refuse as often."""
    if len(receipts) == 1:
        webhook_id, body = receipts[0]["receipt_id"], json.dumps(receipts[0])
    else:
        webhook_id = f"rbatch-{uuid.uuid4().hex}"
        body = json.dumps({"batch_id": webhook_id, "receipts": receipts})
    if await _post(provider, webhook_id, body) == 413 and len(receipts) > 1:
        half = len(receipts) // 2
        await _post_in_parts(provider, receipts[:half])
        await _post_in_parts(provider, receipts[half:])


async def _post(provider: str, webhook_id: str, body: str) -> int | None:
    """The app's final answer (None: it never answered); retried while it does not answer or answers 5xx."""
    callback_url = f"{get_settings().app_url}/api/v1/receipts/{provider}"
    client = _receipt_client()
    for attempt in range(20):
        try:
            r = await client.post(callback_url, content=body,
                                  headers=signed_headers(get_settings().receipt_secret, webhook_id, body))
            if r.status_code < 300 or r.status_code in (400, 401, 404, 413, 422):
                return r.status_code
        except httpx.HTTPError:
            pass
        await asyncio.sleep(min(0.25 * (attempt + 1), 2.0))
    return None


HELD_MESSAGES = "SELECT reference FROM provider_messages WHERE reference = ANY(%(refs)s)"


async def _still_held(references: list[str]) -> set[str]:
    """Which of these messages the provider still holds, as it is about to post their receipts. A reset of this
    mock (each test's start: `tests/conftest.py reset_receiver`) empties its messages; a receipt of one sent before
    it, still waiting out its delay, would otherwise land in the next test and match that test's message of the
    same idempotency key (a journey's nudge for the same lead and step) — DELIVERED before any worker ran."""

    async def read(c: AsyncConnection) -> set[str]:
        return {str(r[0]) for r in await (await c.execute(HELD_MESSAGES, {"refs": references})).fetchall()}

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
