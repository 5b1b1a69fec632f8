"""Provider delivery receipts: signed (Standard Webhooks), applied once per receipt id."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from dashboard.api.deps import maybe_pool
from dashboard.api.errors import RECEIPT_SIGNATURE, unauthorized
from domain.delivery.receipts import MAX_BATCH, Receipt, apply_receipts
from domain.delivery.signing import WebhookVerificationError, verify
from domain.delivery.wakeups import publish_refresh
from domain.settings import get_settings

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])
log = logging.getLogger("outbox.receipts")
PROVIDERS = ("whatsapp", "sms", "email")


def _receipts(data: Any, webhook_id: str | None) -> list[Receipt]:
    """The receipts a signed body carries: one receipt (its id is the webhook id) or a batch (`batch_id` is the
    webhook id, `receipts` a list of receipts). Anything else: ValueError."""
    if not isinstance(data, dict):
        raise ValueError("not a receipt")
    if "receipts" in data:
        if webhook_id != str(data["batch_id"]) or not isinstance(data["receipts"], list):
            raise ValueError("not a batch")
        items = data["receipts"]
    else:
        if webhook_id != str(data["receipt_id"]):
            raise ValueError("webhook id is not the receipt id")
        items = [data]
    out = []
    for item in items:
        client_ref = item.get("client_reference")
        out.append(Receipt(str(item["receipt_id"]), str(item["provider_reference"]), str(item["outcome"]),
                           str(client_ref) if client_ref is not None else None))
    return out


@router.post("/{provider}")
async def receipt(provider: str, request: Request) -> JSONResponse:
    """One receipt, or a provider's batch of them (one transaction: domain/delivery/receipts.py `apply_receipts`).
    A batch answers 200 with a status per receipt, in order; a single receipt answers as it always has."""
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    body = await request.body()
    try:
        data = verify(get_settings().receipt_secret, body, dict(request.headers))
        batch = isinstance(data, dict) and "receipts" in data
        receipts = _receipts(data, request.headers.get("webhook-id"))
    except (WebhookVerificationError, ValueError, KeyError, TypeError, AttributeError):
        raise unauthorized(RECEIPT_SIGNATURE, "bad_signature") from None
    if not receipts or len(receipts) > MAX_BATCH:
        return JSONResponse({"error": "invalid_receipt", "detail": f"a batch holds 1 to {MAX_BATCH} receipts"},
                            status_code=422)
    try:
        results = await asyncio.to_thread(apply_receipts, provider, receipts)
    except ValueError as exc:
        return JSONResponse({"error": "invalid_receipt", "detail": str(exc)}, status_code=422)
    await _refresh({(r.tenant_id, r.order_id) for r in results
                    if r.status == "applied" and r.tenant_id is not None and r.order_id is not None})
    if batch:
        return JSONResponse({"results": [{"receipt_id": rc.receipt_id, "status": r.status}
                                         for rc, r in zip(receipts, results, strict=True)]})
    r = results[0]
    if r.status == "unknown_reference":
        return JSONResponse({"error": "unknown_reference"}, status_code=404)
    if r.status == "pending":  # kept: settled with its row, however it is settled (domain/delivery/receipts.py)
        return JSONResponse({"status": "pending"}, status_code=202)
    return JSONResponse({"status": r.status})


async def _refresh(orders: set[tuple[int, int]]) -> None:
    """A refresh hint for each order whose message a receipt moved (open views reload; a hint lost is caught by
    their revision check)."""
    if not orders:
        return
    pool = await maybe_pool()
    if pool is None:
        return
    for tenant_id, order_id in sorted(orders):
        try:
            await publish_refresh(pool, tenant_id, order_id, -1, None, kind="notification")
        except Exception as exc:  # a refresh hint only: views reload on reconnect
            log.warning("refresh publish failed: %s", type(exc).__name__)
