"""Receiver: the mock outside world, in its own process with its own database, settings, signing and migrations.
It imports nothing of ours (an import-linter contract says so): `python -m receiver serve` runs it.

- POST /webhooks/orders: Standard Webhooks signature verified with the reference library; the effect is applied
  once per (event_id, effect_type) — a duplicate gets 200 `already_processed` and the same `result_ref`, a reused id
  with a different body gets 409 `identity_conflict`.
- POST /providers/{whatsapp|sms|email}/messages: returns a provider reference (idempotent by idempotency_key), then
  POSTs a signed delivery receipt back to the app a little later.
- /faults: switchable faults (503 for the next N calls, 422, slow responses, accept-then-hang).
- GET /effects/{event_id} and GET /invariants: what it applied, read through its HTTP API (never by a join).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi import BackgroundTasks, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sqlalchemy.dialects.postgresql import insert as pg_insert

from receiver import db
from receiver.db import provider_messages, webhook_deliveries, webhook_effects
from receiver.settings import get_settings
from receiver.signing import WebhookVerificationError, digest, signed_headers, verify

log = logging.getLogger("outbox.receiver")
PROVIDERS = ("whatsapp", "sms", "email")
EFFECT_TYPE = "customer_webhook"
SUPPORTED_SCHEMAS = (1,)


class FaultRequest(BaseModel):
    fail_503: int = 0  # the next N calls answer 503
    fail_422: int = 0  # the next N calls answer 422 unsupported_schema
    slow_seconds: float = 0.0  # every call waits this long first
    accept_then_hang: int = 0  # the next N effects are applied, then the response never comes
    accept_then_drop: int = 0  # the next N effects are applied, then the connection dies mid-response
    receipt_delay: float = 0.3  # providers post their receipt this long after accepting


@dataclass
class FaultState:
    config: FaultRequest = field(default_factory=FaultRequest)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, name: str) -> bool:
        """Consume one shot of a counted fault."""
        with self.lock:
            n = getattr(self.config, name)
            if n > 0:
                setattr(self.config, name, n - 1)
                return True
            return False


FAULTS = FaultState()
PROVIDER_POOLS = {p: ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"provider-{p}") for p in PROVIDERS}
app = FastAPI(title="Outbox mock receiver", version="1.0", docs_url="/docs")


@app.post("/faults", response_model=None)
def set_faults(f: FaultRequest) -> dict[str, Any] | JSONResponse:
    """Replace every switch at once; `{}` clears them all. Absent (404) unless RECEIVER_FAULTS is on."""
    if not get_settings().faults:
        return JSONResponse({"error": "not_found"}, status_code=404)
    with FAULTS.lock:
        FAULTS.config = f.model_copy()
    return f.model_dump()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _record_delivery(event_id: uuid.UUID, outcome: str) -> None:
    with db.engine().begin() as c:
        c.execute(webhook_deliveries.insert().values(event_id=event_id, outcome=outcome))


def apply_effect(event_id: uuid.UUID, request_digest: str) -> tuple[str, str]:
    """Returns (outcome, result_ref): outcome is accepted | already_processed | identity_conflict."""
    with db.engine().begin() as c:
        row = c.execute(pg_insert(webhook_effects).values(
            event_id=event_id, effect_type=EFFECT_TYPE, request_digest=request_digest,
            result_ref="fx-" + secrets.token_hex(4),
        ).on_conflict_do_nothing(constraint="webhook_effects_once").returning(webhook_effects.c.result_ref)).first()
        if row is not None:
            outcome, result_ref = "accepted", row.result_ref
        else:
            prior = c.execute(sa.select(webhook_effects.c.request_digest, webhook_effects.c.result_ref).where(
                webhook_effects.c.event_id == event_id, webhook_effects.c.effect_type == EFFECT_TYPE)).one()
            outcome = "already_processed" if prior.request_digest == request_digest else "identity_conflict"
            result_ref = prior.result_ref
        c.execute(webhook_deliveries.insert().values(event_id=event_id, outcome=outcome))
    return outcome, result_ref


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
    if FAULTS.config.slow_seconds:
        await asyncio.sleep(FAULTS.config.slow_seconds)
    if FAULTS.take("fail_503"):
        await asyncio.to_thread(_record_delivery, event_id, "503")
        return JSONResponse({"error": "unavailable"}, status_code=503)
    if FAULTS.take("fail_422") or data.get("schema_version") not in SUPPORTED_SCHEMAS:
        await asyncio.to_thread(_record_delivery, event_id, "422")
        return JSONResponse({"error": "unsupported_schema"}, status_code=422)
    outcome, result_ref = await asyncio.to_thread(apply_effect, event_id, digest(data))
    log.info("webhook", extra={"event_id": str(event_id), "outcome": outcome, "result_ref": result_ref,
                               "tenant": data.get("tenant_id")})
    if outcome == "identity_conflict":
        log.warning("identity conflict event_id=%s", event_id)
        return JSONResponse({"error": "identity_conflict", "result_ref": result_ref}, status_code=409)
    if outcome == "accepted" and FAULTS.take("accept_then_hang"):
        await asyncio.sleep(3600)  # the effect is applied; the caller will time out and must retry
    if outcome == "accepted" and FAULTS.take("accept_then_drop"):
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
def effects(event_id: uuid.UUID) -> dict[str, Any]:
    with db.engine().connect() as c:
        fx = c.execute(sa.select(webhook_effects.c.result_ref).where(webhook_effects.c.event_id == event_id)
                       ).scalars().all()
        calls = c.execute(sa.select(sa.func.count()).select_from(webhook_deliveries).where(
            webhook_deliveries.c.event_id == event_id)).scalar_one()
    return {"event_id": str(event_id), "effects": len(fx), "result_refs": list(fx), "deliveries": calls}


@app.get("/invariants")
def invariants() -> dict[str, int]:
    """Each count must be 0: `outbox check` and the tests read the receiver's invariant here."""
    with db.engine().connect() as c:
        return {name: int(c.execute(sa.text(q)).scalar_one()) for name, q in db.INVARIANTS.items()}


class ProviderMessageIn(BaseModel):
    to: str
    template: str
    body: str | None = None  # the rendered text; a real provider would deliver it (never stored here)
    vars: dict[str, Any] = {}
    idempotency_key: str
    # Ignored: receipts go only to the configured app URL, never to an address a caller names.
    callback_url: str | None = None


def _store_message(provider: str, m: ProviderMessageIn) -> tuple[str, bool]:
    with db.engine().begin() as c:
        row = c.execute(pg_insert(provider_messages).values(
            provider=provider, reference=f"{provider}-{uuid.uuid4().hex[:12]}", idempotency_key=m.idempotency_key,
            to_address_hash=hashlib.sha256(m.to.encode()).hexdigest()[:16],
        ).on_conflict_do_nothing(index_elements=["idempotency_key"]).returning(provider_messages.c.reference)).first()
        if row is not None:
            return row.reference, True
        ref = c.execute(sa.select(provider_messages.c.reference).where(
            provider_messages.c.idempotency_key == m.idempotency_key)).scalar_one()
    return ref, False


async def send_receipt(provider: str, reference: str, outcome: str, client_reference: str) -> None:
    """Signed like any Standard Webhook, posted to the configured app only; retried while the app has not yet
    recorded the send. `client_reference` echoes the sender's idempotency key, as real providers echo metadata."""
    await asyncio.sleep(FAULTS.config.receipt_delay)
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


_client: httpx.AsyncClient | None = None


def _receipt_client() -> httpx.AsyncClient:
    """One pooled client for every receipt (a client per receipt costs a connection each)."""
    global _client
    if _client is None:
        _client = httpx.AsyncClient(timeout=5, limits=httpx.Limits(max_connections=20))
    return _client


@app.post("/providers/{provider}/messages")
async def provider_message(provider: str, m: ProviderMessageIn, tasks: BackgroundTasks) -> JSONResponse:
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    if FAULTS.take("fail_503"):
        return JSONResponse({"error": "unavailable"}, status_code=503)
    # Each provider is its own company with its own capacity: an email blast never queues an SMS behind it.
    ref, fresh = await asyncio.get_running_loop().run_in_executor(PROVIDER_POOLS[provider], _store_message, provider, m)
    log.info("provider message", extra={"provider": provider, "reference": ref, "fresh": fresh})
    if fresh:
        outcome = "failed" if "bounce" in m.to else "delivered"
        tasks.add_task(send_receipt, provider, ref, outcome, m.idempotency_key)
    return JSONResponse({"status": "accepted" if fresh else "already_processed", "reference": ref},
                        status_code=201 if fresh else 200)
