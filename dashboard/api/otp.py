"""One-time codes: ask for one (critical lane), check what the person typed. The code never appears in a
response, a job, a log or the dashboard."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Id, maybe_pool
from dashboard.api.errors import ApiError
from dashboard.api.fields import JsonInt
from domain.delivery.wakeups import enqueue_after_commit
from domain.ledger import otp
from domain.ledger.send import SendRefused

router = APIRouter(prefix="/api/v1/otp", tags=["one-time codes"])


class OtpIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipient_id: JsonInt = Field(ge=1, le=2**31 - 1)
    channel: Literal["sms", "whatsapp"]


class VerifyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(pattern=r"^[0-9]{6}$")


@router.post("", status_code=201)
async def request_code(body: OtpIn, p: Auth) -> JSONResponse:
    try:
        row = await asyncio.to_thread(otp.request, p.tenant_id, body.recipient_id, body.channel, datetime.now(UTC))
    except SendRefused as exc:
        raise ApiError(422, exc.code, detail=str(exc)) from None
    if row is None:
        raise ApiError(404, "not_found", detail="no such recipient")
    await enqueue_after_commit(await maybe_pool(), [row.owed()])
    return JSONResponse({"notification_id": row.notification_id, "lane": row.lane, "status": row.status},
                        status_code=201)


@router.post("/{notification_id}/verify")
async def verify(notification_id: Id, body: VerifyIn, p: Auth) -> JSONResponse:
    v = await asyncio.to_thread(otp.verify, p.tenant_id, notification_id, body.code, datetime.now(UTC))
    if v.outcome == "not_found":
        raise ApiError(404, "not_found")
    if v.outcome == "valid":
        return JSONResponse({"valid": True, "outcome": v.outcome})
    # refused: the common error shape (`error` = the outcome: invalid, used, expired, exhausted…)
    return JSONResponse({"error": f"code_{v.outcome}", "valid": False, "outcome": v.outcome}, status_code=422)
