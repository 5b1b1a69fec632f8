"""The tenant's prepaid balance: read it with its run-out projection; top it up (the same reference credits once)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth
from dashboard.api.errors import ApiError
from dashboard.api.fields import NOTE_DOC, NOTE_MAX, JsonInt
from domain.ledger import metering

router = APIRouter(prefix="/api/v1/balance", tags=["balance"])


class TopUpIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount_cents: JsonInt = Field(ge=1, le=10**9)
    reference: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    note: str = Field("", max_length=NOTE_MAX, description=NOTE_DOC)


@router.get("")
async def balance(p: Auth) -> dict[str, Any]:
    return await asyncio.to_thread(metering.balance_view, p.tenant_id, datetime.now(UTC))


@router.post("/top-ups", status_code=201, responses={200: {"description": "this reference was credited before"}})
async def top_up(body: TopUpIn, p: Auth) -> JSONResponse:
    try:
        r = await asyncio.to_thread(lambda: metering.top_up(p.tenant_id, body.amount_cents, body.reference,
                                                            p.actor_ref, note=body.note.strip()))
    except metering.BalanceLimit as exc:
        raise ApiError(422, "balance_limit", field="amount_cents", detail=str(exc)) from exc
    return JSONResponse({"credited": r.credited, "balance_cents": r.balance_cents, "reference": body.reference},
                        status_code=201 if r.credited else 200)
