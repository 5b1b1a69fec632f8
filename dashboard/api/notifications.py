"""The send API: one ledger row per message, written before anything is sent; the same dedupe key again answers
200 with the same row and sends nothing new."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Id, maybe_pool, tenant_row
from dashboard.api.errors import ApiError
from dashboard.api.fields import JsonInt, Scalar
from domain.delivery.wakeups import enqueue_after_commit
from domain.ledger import send as ledger_send
from domain.support import ledger as support_ledger

router = APIRouter(prefix="/api/v1/notifications", tags=["notifications"])


class NotificationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipient_id: JsonInt = Field(ge=1, le=2**31 - 1)
    channel: Literal["email", "sms", "whatsapp"]
    template: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_.]+$")
    lane: Literal["high", "normal", "bulk"] = "normal"  # critical is for one-time codes only
    data: dict[str, Scalar] = Field(default_factory=dict, description="flat values the template renders")
    subject_period: str = Field(min_length=1, max_length=100,
                                description="what the message is about, e.g. 2026-11-29 or order-913-approved")


@router.post("", status_code=201, responses={200: {"description": "already ledgered: the same row, nothing sent"}})
async def send(body: NotificationIn, p: Auth) -> JSONResponse:
    try:
        row = await asyncio.to_thread(
            lambda: ledger_send.send(tenant_id=p.tenant_id, recipient_id=body.recipient_id, channel=body.channel,
                                template=body.template, lane=body.lane, data=body.data,
                                subject_period=body.subject_period))
    except ledger_send.SendRefused as exc:
        raise ApiError(422, exc.code, detail=str(exc)) from None
    if row is None:
        raise ApiError(404, "not_found", detail="no such recipient")
    if row.created:
        await enqueue_after_commit(await maybe_pool(), [row.owed()])
    return JSONResponse({"notification_id": row.notification_id, "status": row.status, "lane": row.lane,
                         "job_id": row.job_id, "created": row.created}, status_code=201 if row.created else 200)


@router.get("/{notification_id}")
async def get(notification_id: Id, p: Auth) -> dict[str, Any]:
    return await tenant_row(lambda t, i: support_ledger.notification_detail(t, i, datetime.now(UTC)), p.tenant_id,
                            notification_id)
