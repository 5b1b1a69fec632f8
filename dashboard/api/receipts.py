"""Provider delivery receipts: signed (Standard Webhooks), applied once per receipt id."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from dashboard.api.deps import maybe_pool
from dashboard.api.errors import RECEIPT_SIGNATURE, unauthorized
from dashboard.api.guard import hostile
from domain.delivery.receipts import MAX_BATCH, OUTCOMES, Receipt, apply_receipts
from domain.delivery.signing import WebhookVerificationError, verify
from domain.delivery.wakeups import publish_refresh
from domain.settings import get_settings

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])
log = logging.getLogger("outbox.receipts")
PROVIDERS = ("whatsapp", "sms", "email")


class _Invalid(Exception):
    """A signed body of the wrong shape: the field at fault (a dotted path, `receipts[i].x` in a batch) and why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} {why}")
        self.field, self.why = field, why


def _text(value: Any, field: str, *, optional: bool = False) -> str | None:
    """A string field as it came: never another JSON type read through `str()` (a `null` receipt id is no "None")."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _Invalid(field, "must be a non-empty string" + (" or null" if optional else ""))
    return value


def _receipts(data: Any) -> tuple[str, list[Receipt]]:
    """The id a signed body must be signed under and the receipts it carries: one receipt (its id is the webhook
    id) or a batch (`batch_id` is the webhook id, `receipts` a list of 1 to MAX_BATCH receipts). Anything else:
    `_Invalid`, naming the field — a string PostgreSQL cannot keep too, whatever the content type it came as (the
    API's guard reads JSON content types only; a provider's post may carry none)."""
    if not isinstance(data, dict):
        raise _Invalid("body", "must be a receipt or a batch of receipts (a JSON object)")
    for field, why in hostile(data, ""):
        raise _Invalid(field or "body", why)
    if "receipts" in data:
        signed_as = _text(data.get("batch_id"), "batch_id")
        items = data["receipts"]
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            raise _Invalid("receipts", f"must be a list of 1 to {MAX_BATCH} receipts")
        paths = [f"receipts[{i}]" for i in range(len(items))]
    else:
        signed_as, items, paths = _text(data.get("receipt_id"), "receipt_id"), [data], [""]
    out = []
    for item, path in zip(items, paths, strict=True):
        if not isinstance(item, dict):
            raise _Invalid(path, "must be a receipt (a JSON object)")
        at = f"{path}." if path else ""
        rid, ref, outcome = (str(_text(item.get(name), at + name))
                             for name in ("receipt_id", "provider_reference", "outcome"))
        if outcome not in OUTCOMES:
            raise _Invalid(at + "outcome", "must be delivered or failed")
        out.append(Receipt(rid, ref, outcome, _text(item.get("client_reference"), at + "client_reference",
                                                    optional=True)))
    return str(signed_as), out


@router.post("/{provider}")
async def receipt(provider: str, request: Request) -> JSONResponse:
    """One receipt, or a provider's batch of them (one transaction: domain/delivery/receipts.py `apply_receipts`).
    A batch answers 200 with a status per receipt, in order; a single receipt answers as it always has. A bad
    signature, or one under another id than the body's own: 401. A signed body of the wrong shape: 422 naming the
    field, nothing kept."""
    if provider not in PROVIDERS:
        return JSONResponse({"error": "unknown_provider"}, status_code=404)
    body = await request.body()
    try:
        data = verify(get_settings().receipt_secret, body, dict(request.headers))
    except (WebhookVerificationError, ValueError, KeyError, TypeError, AttributeError):
        raise unauthorized(RECEIPT_SIGNATURE, "bad_signature") from None
    try:
        signed_as, receipts = _receipts(data)
    except _Invalid as bad:
        return JSONResponse({"error": "invalid_receipt", "field": bad.field,
                             "detail": f"{bad.field} {bad.why}; nothing was changed"}, status_code=422)
    if request.headers.get("webhook-id") != signed_as:
        raise unauthorized(RECEIPT_SIGNATURE, "bad_signature")
    batch = "receipts" in data
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
