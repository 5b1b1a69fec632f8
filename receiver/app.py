"""Receiver: `outbox receiver` runs this as its own process, with its own tables (schema `receiver`).

- POST /webhooks/orders: Standard Webhooks signature verified with the reference library; the effect is applied
  once per (event_id, effect_type) — a duplicate gets 200 `already_processed` and the same `result_ref`, a reused id
  with a different body gets 409 `identity_conflict`.
- POST /providers/{whatsapp|sms|email}/messages: returns a provider reference (idempotent by idempotency_key), then
  POSTs a signed delivery receipt back to the app a little later.
- /faults: switchable faults (503 for the next N calls, 422, slow responses, accept-then-hang).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi import BackgroundTasks, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from domain.db import UnitOfWork
from domain.envelope import body_digest
from domain.settings import get_settings
from domain.signing import WebhookVerificationError, signed_headers, verify

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
app = FastAPI(title="Outbox mock receiver", version="1.0", docs_url="/docs")


@app.post("/faults")
def set_faults(f: FaultRequest) -> dict[str, Any]:
    """Replace every switch at once; `{}` clears them all."""
    with FAULTS.lock:
        FAULTS.config = f.model_copy()
    return f.model_dump()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _record_delivery(event_id: uuid.UUID, outcome: str) -> None:
    with UnitOfWork() as uow:
        uow.execute(sa.text("INSERT INTO receiver.webhook_deliveries (event_id, outcome) VALUES (:e, :o)"),
                    {"e": event_id, "o": outcome})
        uow.commit()


def apply_effect(event_id: uuid.UUID, digest: str) -> tuple[str, str]:
    """Returns (outcome, result_ref): outcome is accepted | already_processed | identity_conflict."""
    with UnitOfWork() as uow:
        ref = "fx-" + secrets.token_hex(4)
        row = uow.execute(sa.text(
            "INSERT INTO receiver.webhook_effects (event_id, effect_type, request_digest, result_ref) "
            "VALUES (:e, :t, :d, :r) ON CONFLICT (event_id, effect_type) DO NOTHING RETURNING result_ref"),
            {"e": event_id, "t": EFFECT_TYPE, "d": digest, "r": ref}).first()
        if row is not None:
            outcome, result_ref = "accepted", row.result_ref
        else:
            prior = uow.execute(sa.text(
                "SELECT request_digest, result_ref FROM receiver.webhook_effects "
                "WHERE event_id = :e AND effect_type = :t"), {"e": event_id, "t": EFFECT_TYPE}).one()
            outcome = "already_processed" if prior.request_digest == digest else "identity_conflict"
            result_ref = prior.result_ref
        uow.execute(sa.text("INSERT INTO receiver.webhook_deliveries (event_id, outcome) VALUES (:e, :o)"),
                    {"e": event_id, "o": outcome})
        uow.commit()
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
    outcome, result_ref = await asyncio.to_thread(apply_effect, event_id, body_digest(data))
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
    with UnitOfWork() as uow:
        fx = uow.execute(sa.text("SELECT result_ref FROM receiver.webhook_effects WHERE event_id = :e"),
                         {"e": event_id}).scalars().all()
        calls = uow.execute(sa.text("SELECT count(*) FROM receiver.webhook_deliveries WHERE event_id = :e"),
                            {"e": event_id}).scalar_one()
    return {"event_id": str(event_id), "effects": len(fx), "result_refs": list(fx), "deliveries": calls}


class ProviderMessageIn(BaseModel):
    to: str
    template: str
    vars: dict[str, Any] = {}
    idempotency_key: str
    callback_url: str


def _store_message(provider: str, m: ProviderMessageIn) -> tuple[str, bool]:
    with UnitOfWork() as uow:
        ref = f"{provider}-{uuid.uuid4().hex[:12]}"
        row = uow.execute(sa.text(
            "INSERT INTO receiver.provider_messages (provider, reference, idempotency_key, to_address_hash) "
            "VALUES (:p, :r, :k, :h) ON CONFLICT (idempotency_key) DO NOTHING RETURNING reference"),
            {"p": provider, "r": ref, "k": m.idempotency_key,
             "h": hashlib.sha256(m.to.encode()).hexdigest()[:16]}).first()
        if row is None:
            ref = uow.execute(sa.text("SELECT reference FROM receiver.provider_messages WHERE idempotency_key = :k"),
                              {"k": m.idempotency_key}).scalar_one()
        uow.commit()
    return ref, row is not None


async def send_receipt(provider: str, reference: str, outcome: str, callback_url: str) -> None:
    """Signed like any Standard Webhook; retried while the app has not yet recorded the send."""
    await asyncio.sleep(FAULTS.config.receipt_delay)
    receipt_id = f"rcpt-{reference}"
    body = json.dumps({"receipt_id": receipt_id, "provider_reference": reference, "outcome": outcome})
    async with httpx.AsyncClient(timeout=5) as client:
        for attempt in range(20):
            try:
                r = await client.post(callback_url, content=body,
                                      headers=signed_headers(get_settings().receipt_secret, receipt_id, body))
                if r.status_code < 300 or r.status_code in (400, 401, 404):
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(min(0.25 * (attempt + 1), 2.0))


@app.post("/providers/{provider}/messages")
async def provider_message(provider: str, m: ProviderMessageIn, tasks: BackgroundTasks) -> JSONResponse:
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    if FAULTS.take("fail_503"):
        return JSONResponse({"error": "unavailable"}, status_code=503)
    ref, fresh = await asyncio.to_thread(_store_message, provider, m)
    if fresh:
        outcome = "failed" if "bounce" in m.to else "delivered"
        tasks.add_task(send_receipt, provider, ref, outcome, m.callback_url)
    return JSONResponse({"status": "accepted" if fresh else "already_processed", "reference": ref},
                        status_code=201 if fresh else 200)
