"""Receiver: the mock outside world, in its own process with its own database, settings, signing and migrations.
It imports nothing of ours (an import-linter contract says so): `python -m receiver serve` runs it.

- POST /webhooks/orders: Standard Webhooks signature verified with the reference library; the effect is applied
  once per (event_id, effect_type) — a duplicate gets 200 `already_processed` and the same `result_ref`, a reused id
  with a different body gets 409 `identity_conflict`.
- POST /providers/{whatsapp|sms|email}/messages: returns a provider reference (idempotent by idempotency_key), then
  POSTs a signed delivery receipt back to the app a little later.
- /faults: switchable faults (503 for the next N calls, 422, slow responses, accept-then-hang), shared by every
  server process (receiver/faults.py).
- Lean on purpose, so the mock is never the system's limit: several server processes (`serve --workers`), each
  request one statement on psycopg's async pool (no thread pool, no ORM on the request path).
- GET /effects/{event_id} and GET /invariants: what it applied, read through its HTTP API (never by a join).
- Every answer carries the security headers the dashboard sets (`SecurityHeaders`; a preflight grants no origin).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import BackgroundTasks, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from psycopg import AsyncConnection
from pydantic import BaseModel

from receiver import db, faults, logs
from receiver.faults import FaultRequest
from receiver.settings import get_settings
from receiver.signing import WebhookVerificationError, digest, signed_headers, verify

log = logging.getLogger("outbox.receiver")
PROVIDERS = ("whatsapp", "sms", "email")
EFFECT_TYPE = "customer_webhook"
SUPPORTED_SCHEMAS = (1,)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Each server process (`serve --workers N` spawns them) logs JSON lines and closes its pool on the way out."""
    logs.configure()
    await db.open_pool()
    yield
    await db.close_pool()
    if _client is not None:
        await _client[1].aclose()


# The security headers the dashboard's `guard.RequestContext` sets, on every answer (written again here: the receiver
# imports nothing of ours). JSON answers load nothing, are never framed and never stored by a cache; the docs page
# needs its own scripts, so it gets only the framing rule.
API_CSP = b"default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = b"frame-ancestors 'none'"
COMMON_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                  (b"x-frame-options", b"DENY"))
DOCS_PATHS = ("/docs",)
Scope = dict[str, Any]
Message = dict[str, Any]


class SecurityHeaders:
    """Pure ASGI, outermost (around Starlette's own error layer, so a 500 carries them too) and cheap: the mock
    must never be the system's limit."""

    def __init__(self, app: Callable[[Scope, Any, Any], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        page = str(scope.get("path", "")).startswith(DOCS_PATHS)
        extra = [*COMMON_HEADERS, (b"content-security-policy", PAGE_CSP if page else API_CSP)]
        if not page:
            extra.append((b"cache-control", b"no-store"))
        ours = {k for k, _ in extra}

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in ours]
                message = {**message, "headers": kept + extra}
            await send(message)

        await self.app(scope, receive, with_headers)


class ReceiverApp(FastAPI):
    def build_middleware_stack(self) -> Any:
        return SecurityHeaders(super().build_middleware_stack())


app = ReceiverApp(title="Outbox mock receiver", version="1.0", docs_url="/docs", lifespan=lifespan)


@app.post("/faults", response_model=None)
async def set_faults(f: FaultRequest) -> dict[str, Any] | JSONResponse:
    """Replace every switch at once; `{}` clears them all. Absent (404) unless RECEIVER_FAULTS is on."""
    if not faults.enabled():
        return JSONResponse({"error": "not_found"}, status_code=404)
    await faults.replace(f)
    return f.model_dump()


@app.get("/healthz")
def healthz() -> dict[str, Any]:
    return {"status": "ok", "pid": os.getpid()}  # which server process answered


async def _record_delivery(event_id: uuid.UUID, outcome: str) -> None:
    async def insert(c: AsyncConnection) -> None:
        await c.execute("INSERT INTO webhook_deliveries (event_id, outcome) VALUES (%s, %s)", (event_id, outcome))

    await db.run(insert)


# One statement, one round trip: the effect is inserted once per (event_id, effect_type); a duplicate meets the
# UNIQUE constraint, waits for the racing insert to commit and locks its row (DO UPDATE, a no-op write, is what
# makes PostgreSQL return a row committed after this statement began — DO NOTHING would return none), so every
# caller reads the one effect's result_ref. The caller proposed a fresh random ref: getting it back means its
# insert is the one that applied the effect.
APPLY_EFFECT = """
WITH fx AS (
    INSERT INTO webhook_effects (event_id, effect_type, request_digest, result_ref)
    VALUES (%(event_id)s, %(effect_type)s, %(digest)s, %(ref)s)
    ON CONFLICT ON CONSTRAINT webhook_effects_once DO UPDATE SET result_ref = webhook_effects.result_ref
    RETURNING result_ref, request_digest
), call AS (
    INSERT INTO webhook_deliveries (event_id, outcome)
    SELECT %(event_id)s, CASE WHEN fx.result_ref = %(ref)s THEN 'accepted'
                              WHEN fx.request_digest = %(digest)s THEN 'already_processed'
                              ELSE 'identity_conflict' END
    FROM fx
    RETURNING outcome
)
SELECT call.outcome, fx.result_ref FROM fx, call
"""


async def apply_effect(event_id: uuid.UUID, request_digest: str) -> tuple[str, str]:
    """Returns (outcome, result_ref): outcome is accepted | already_processed | identity_conflict."""
    params = {"event_id": event_id, "effect_type": EFFECT_TYPE, "digest": request_digest,
              "ref": "fx-" + secrets.token_hex(8)}

    async def apply(c: AsyncConnection) -> tuple[str, str]:
        row = await (await c.execute(APPLY_EFFECT, params)).fetchone()
        assert row is not None
        return str(row[0]), str(row[1])

    return await db.run(apply, retry=True)


@app.post("/webhooks/orders")
async def webhook(request: Request) -> Response:
    body = await request.body()
    try:
        data = verify(get_settings().webhook_secret, body, dict(request.headers))
    except (WebhookVerificationError, ValueError):
        return JSONResponse({"error": "bad_signature"}, status_code=401)
    try:
        event_id = uuid.UUID(str(data["event_id"]))
    except (KeyError, ValueError, TypeError):
        return JSONResponse({"error": "malformed_event"}, status_code=422)
    if request.headers.get("webhook-id") != str(event_id) or request.headers.get("idempotency-key") != str(event_id):
        return JSONResponse({"error": "identity_mismatch"}, status_code=422)
    switches = await faults.current()
    if switches is not None and switches.slow_seconds:
        await asyncio.sleep(switches.slow_seconds)
    if await faults.take("fail_503"):
        await _record_delivery(event_id, "503")
        return JSONResponse({"error": "unavailable"}, status_code=503)
    if await faults.take("fail_422") or data.get("schema_version") not in SUPPORTED_SCHEMAS:
        await _record_delivery(event_id, "422")
        return JSONResponse({"error": "unsupported_schema"}, status_code=422)
    outcome, result_ref = await apply_effect(event_id, digest(data))
    log.info("webhook", extra={"event_id": str(event_id), "outcome": outcome, "result_ref": result_ref,
                               "tenant": data.get("tenant_id")})
    if outcome == "identity_conflict":
        log.warning("identity conflict event_id=%s", event_id)
        return JSONResponse({"error": "identity_conflict", "result_ref": result_ref}, status_code=409)
    if outcome == "accepted" and await faults.take("accept_then_hang"):
        await asyncio.sleep(3600)  # the effect is applied; the caller will time out and must retry
    if outcome == "accepted" and await faults.take("accept_then_drop"):
        return DroppedResponse()  # the effect is applied; the connection dies mid-response
    return JSONResponse({"status": outcome, "result_ref": result_ref, "event_id": str(event_id)})


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


@app.get("/effects/{event_id}")
async def effects(event_id: uuid.UUID) -> dict[str, Any]:
    async def read(c: AsyncConnection) -> dict[str, Any]:
        fx = [r[0] for r in await (await c.execute(
            "SELECT result_ref FROM webhook_effects WHERE event_id = %s", (event_id,))).fetchall()]
        calls = await (await c.execute(
            "SELECT count(*) FROM webhook_deliveries WHERE event_id = %s", (event_id,))).fetchone()
        return {"event_id": str(event_id), "effects": len(fx), "result_refs": fx, "deliveries": calls[0] if calls else 0}

    return await db.run(read)


@app.get("/invariants")
async def invariants() -> dict[str, int]:
    """Each count must be 0: `outbox check` and the tests read the receiver's invariant here."""
    async def read(c: AsyncConnection) -> dict[str, int]:
        out = {}
        for name, q in db.INVARIANTS.items():
            row = await (await c.execute(q)).fetchone()
            out[name] = int(row[0]) if row else 0
        return out

    return await db.run(read)


class ProviderMessageIn(BaseModel):
    to: str
    template: str
    body: str | None = None  # the rendered text; a real provider would deliver it (never stored here)
    vars: dict[str, Any] = {}
    idempotency_key: str
    # Ignored: receipts go only to the configured app URL, never to an address a caller names.
    callback_url: str | None = None


# As the effect above: one statement; the caller's fresh reference coming back means this call stored the message.
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


_client: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


def _receipt_client() -> httpx.AsyncClient:
    """One pooled client for every receipt of this process (a client per receipt costs a connection each); one per
    event loop, as the database pool."""
    global _client
    loop = asyncio.get_running_loop()
    if _client is None or _client[0] is not loop:
        _client = (loop, httpx.AsyncClient(timeout=5, limits=httpx.Limits(max_connections=20)))
    return _client[1]


@app.post("/providers/{provider}/messages")
async def provider_message(provider: str, m: ProviderMessageIn, tasks: BackgroundTasks) -> JSONResponse:
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    if await faults.take("fail_503"):
        return JSONResponse({"error": "unavailable"}, status_code=503)
    ref, fresh = await _store_message(provider, m)
    log.info("provider message", extra={"provider": provider, "reference": ref, "fresh": fresh})
    if fresh:
        outcome = "failed" if "bounce" in m.to else "delivered"
        # After the response: the receipt's delay and post never hold up this answer.
        tasks.add_task(send_receipt, provider, ref, outcome, m.idempotency_key)
    return JSONResponse({"status": "accepted" if fresh else "already_processed", "reference": ref},
                        status_code=201 if fresh else 200)
