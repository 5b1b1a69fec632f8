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
- PUT/DELETE /endpoint-secrets/{name} (only with RECEIVER_SECRETS_API, else 404 as /faults): the secret of one
  of the sender's endpoints pointed here; a webhook not signed with `webhook_secret` verifies against these. A
  secret is never logged nor answered back.
- GET /effects/{event_id} and GET /invariants: what it applied, read through its HTTP API (never by a join).
- Every answer carries the security headers the dashboard sets (`SecurityHeaders`; a preflight grants no origin).

This module is the app: its routes, its security headers and the pure-ASGI path of the two hot POSTs (`_lean`). What
a webhook does is `webhooks.py`'s, what a provider does (and its receipts) `providers.py`'s.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import BackgroundTasks, FastAPI, Request
from fastapi import Path as FastApiPath
from fastapi.responses import JSONResponse, Response
from psycopg import AsyncConnection
from pydantic import BaseModel, Field

from receiver import db, faults, logs
from receiver.faults import FaultRequest
from receiver.providers import ProviderMessageIn, close_receipt_client, handle_provider_message, send_receipt
from receiver.settings import get_settings
from receiver.signing import WebhookVerificationError, verify
from receiver.webhooks import DROP, DroppedResponse, handle_webhook

log = logging.getLogger("outbox.receiver")


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Each server process (`serve --workers N` spawns them) logs JSON lines and closes its pool on the way out."""
    logs.configure()
    await db.open_pool()
    yield
    await db.close_pool()
    await close_receipt_client()


# The security headers the dashboard's `guard.RequestContext` sets, on every answer (written again here: the receiver
# imports nothing of ours). JSON answers load nothing, are never framed and never stored by a cache; the docs page
# needs its own scripts, so it gets only the framing rule.
API_CSP = b"default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = b"frame-ancestors 'none'"
COMMON_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                  (b"x-frame-options", b"DENY"))
DOCS_PATHS = ("/docs",)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


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
    """FastAPI for every route but the two hot ones: a POST to /webhooks/orders or /providers/{p}/messages is
    served by the pure-ASGI handlers below (`_lean`), with the same answers and headers, at a fraction of the CPU
    (no routing, no dependency solving, no Request object); anything they do not handle whole goes on to FastAPI."""

    def build_middleware_stack(self) -> Any:
        return SecurityHeaders(super().build_middleware_stack())

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path == "/webhooks/orders" or (path.startswith("/providers/") and path.endswith("/messages")):
                await _lean(self, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


app = ReceiverApp(title="Outbox mock receiver", version="1.0", docs_url="/docs", lifespan=lifespan)


@app.post("/faults", response_model=None)
async def set_faults(f: FaultRequest) -> dict[str, Any] | JSONResponse:
    """Replace every switch at once; `{}` clears them all. Absent (404) unless RECEIVER_FAULTS is on."""
    if not faults.enabled():
        return JSONResponse({"error": "not_found"}, status_code=404)
    await faults.replace(f)
    return f.model_dump()


class EndpointSecretIn(BaseModel):
    secret: str = Field(min_length=10, max_length=200, pattern=r"^whsec_[A-Za-z0-9+/=]+$")


NAME = r"^[A-Za-z0-9_.-]{1,100}$"


@app.put("/endpoint-secrets/{name}", response_model=None)
async def register_secret(body: EndpointSecretIn,
                          name: str = FastApiPath(pattern=NAME)) -> dict[str, Any] | JSONResponse:
    """Register (or replace) the secret of one of the sender's endpoints that points here. Absent (404) unless
    RECEIVER_SECRETS_API is on. Answers the name only: the secret is never answered back nor logged."""
    if not get_settings().secrets_api:
        return JSONResponse({"error": "not_found"}, status_code=404)
    try:
        verify(body.secret, b"{}", {})
    except WebhookVerificationError:
        pass  # the secret decodes: only a signature was missing
    except Exception:
        return JSONResponse({"error": "invalid_secret", "detail": "not a whsec_ base64 secret"}, status_code=422)

    async def upsert(c: AsyncConnection) -> None:
        await c.execute("INSERT INTO endpoint_secrets (name, secret) VALUES (%s, %s) ON CONFLICT (name) "
                        "DO UPDATE SET secret = EXCLUDED.secret, registered_at = now()", (name, body.secret))

    await db.run(upsert, retry=True)
    logs.info(log, "endpoint secret registered", name=name)
    return {"name": name, "registered": True}


@app.delete("/endpoint-secrets/{name}", status_code=204, response_model=None)
async def forget_secret(name: str = FastApiPath(pattern=NAME)) -> Response:
    if not get_settings().secrets_api:
        return JSONResponse({"error": "not_found"}, status_code=404)

    async def delete(c: AsyncConnection) -> None:
        await c.execute("DELETE FROM endpoint_secrets WHERE name = %s", (name,))

    await db.run(delete, retry=True)
    return Response(status_code=204)


@app.get("/healthz")
def healthz() -> dict[str, Any]:
    return {"status": "ok", "pid": os.getpid()}  # which server process answered


@app.post("/webhooks/orders")
async def webhook(request: Request) -> Response:
    """Served by `_lean` over HTTP; kept for the API's schema (and reached only if `_lean` is bypassed)."""
    status, answer = await handle_webhook(await request.body(), {k: v for k, v in request.headers.items()})
    if answer is DROP:
        return DroppedResponse()
    return JSONResponse(answer, status_code=status)


@app.get("/effects/{event_id}")
async def effects(event_id: uuid.UUID) -> dict[str, Any]:
    async def read(c: AsyncConnection) -> dict[str, Any]:
        fx = [r[0] for r in await (await c.execute(
            "SELECT result_ref FROM webhook_effects WHERE event_id = %s", (event_id,))).fetchall()]
        calls = await (await c.execute(
            "SELECT count(*) FROM webhook_deliveries WHERE event_id = %s", (event_id,))).fetchone()
        return {"event_id": str(event_id), "effects": len(fx), "result_refs": fx,
                "deliveries": calls[0] if calls else 0}

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


@app.post("/providers/{provider}/messages")
async def provider_message(provider: str, m: ProviderMessageIn, tasks: BackgroundTasks) -> JSONResponse:
    status, answer, receipt = await handle_provider_message(provider, m)
    if receipt is not None:
        tasks.add_task(send_receipt, *receipt)  # after the response: the receipt never holds up this answer
    return JSONResponse(answer, status_code=status)


# The lean path's answers carry the headers SecurityHeaders would add (an API answer's).
LEAN_HEADERS = [*COMMON_HEADERS, (b"content-security-policy", API_CSP), (b"cache-control", b"no-store"),
                (b"content-type", b"application/json")]
INTERNAL_ERROR = (b"Internal Server Error", [(b"content-type", b"text/plain; charset=utf-8")])


async def _lean(app: ReceiverApp, scope: Scope, receive: Callable[[], Awaitable[Message]],
                send: Callable[[Message], Awaitable[None]]) -> None:
    """The two hot POSTs as pure ASGI. What is not their common case — a provider body that does not validate,
    or one not sent as JSON — is replayed into FastAPI, so its 422 answers stay FastAPI's own."""
    chunks = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    body = b"".join(chunks)
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    started = False

    async def answer(status: int, payload: dict[str, Any]) -> None:
        nonlocal started
        raw = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        started = True
        await send({"type": "http.response.start", "status": status,
                    "headers": [*LEAN_HEADERS, (b"content-length", str(len(raw)).encode())]})
        await send({"type": "http.response.body", "body": raw})

    try:
        path: str = scope["path"]
        if path == "/webhooks/orders":
            status, payload = await handle_webhook(body, headers)
            if payload is DROP:
                started = True
                await DroppedResponse()(scope, receive, send)
                return
            await answer(status, payload)
            return
        provider = path[len("/providers/"):-len("/messages")]
        m = None
        if "/" not in provider and headers.get("content-type", "").startswith("application/json"):
            try:
                m = ProviderMessageIn.model_validate_json(body)
            except ValueError:
                m = None
        if m is None:
            await _replay(app, scope, body, receive, send)
            return
        status, payload, receipt = await handle_provider_message(provider, m)
        await answer(status, payload)
        if receipt is not None:
            await send_receipt(*receipt)  # after the response, as FastAPI's background tasks
    except Exception:
        if not started:  # as Starlette's error layer: a plain 500 with the security headers, then re-raised
            await send({"type": "http.response.start", "status": 500,
                        "headers": [*LEAN_HEADERS[:-1], *INTERNAL_ERROR[1]]})
            await send({"type": "http.response.body", "body": INTERNAL_ERROR[0]})
        raise


async def _replay(app: ReceiverApp, scope: Scope, body: bytes, receive: Callable[[], Awaitable[Message]],
                  send: Callable[[Message], Awaitable[None]]) -> None:
    """FastAPI serves the request, its body (already read) handed over again; then the connection's own events."""
    replayed = False

    async def again() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    await FastAPI.__call__(app, scope, again, send)
