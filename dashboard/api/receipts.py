"""Provider delivery receipts: signed (Standard Webhooks), applied once per receipt id."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from dashboard.api.deps import maybe_pool
from dashboard.api.errors import RECEIPT_SIGNATURE, unauthorized
from domain.delivery.receipts import apply_receipt
from domain.delivery.signing import WebhookVerificationError, verify
from domain.delivery.wakeups import publish_refresh
from domain.settings import get_settings

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])
log = logging.getLogger("outbox.receipts")
PROVIDERS = ("whatsapp", "sms", "email")


@router.post("/{provider}")
async def receipt(provider: str, request: Request) -> JSONResponse:
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    body = await request.body()
    try:
        data = verify(get_settings().receipt_secret, body, dict(request.headers))
        rid, ref, outcome = str(data["receipt_id"]), str(data["provider_reference"]), str(data["outcome"])
        client_ref = data.get("client_reference")
    except (WebhookVerificationError, ValueError, KeyError, TypeError, AttributeError):
        raise unauthorized(RECEIPT_SIGNATURE, "bad_signature") from None
    if request.headers.get("webhook-id") != rid:
        raise unauthorized(RECEIPT_SIGNATURE, "bad_signature") from None
    try:
        r = await asyncio.to_thread(apply_receipt, provider, rid, ref, outcome,
                                    str(client_ref) if client_ref is not None else None)
    except ValueError as exc:
        return JSONResponse({"error": "invalid_receipt", "detail": str(exc)}, status_code=422)
    if r.status == "unknown_reference":
        return JSONResponse({"error": "unknown_reference"}, status_code=404)
    if r.status == "pending":  # kept: settled with its row, however it is settled (domain/delivery/receipts.py)
        return JSONResponse({"status": "pending"}, status_code=202)
    if r.status == "applied" and r.order_id is not None and r.tenant_id is not None:
        pool = await maybe_pool()
        if pool is not None:
            try:
                await publish_refresh(pool, r.tenant_id, r.order_id, -1, None, kind="notification")
            except Exception as exc:  # a refresh hint only: views reload on reconnect
                log.warning("refresh publish failed: %s", type(exc).__name__)
    return JSONResponse({"status": r.status})
