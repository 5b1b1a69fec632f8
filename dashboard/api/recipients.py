"""Recipients: create, read, change (opt-outs per channel, quiet hours, cap — each change kept), and "why didn't they
get it?" (`GET /api/v1/recipients/{id}/messages`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Id, tenant_row
from dashboard.api.errors import ApiError
from domain import queries, recipients

router = APIRouter(prefix="/api/v1/recipients", tags=["recipients"])

Ref = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")]
Email = Annotated[str, Field(max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")]
Phone = Annotated[str, Field(pattern=r"^\+?[0-9][0-9 ]{5,19}$")]


class QuietHours(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: time
    end: time


class RecipientIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: Ref
    display_name: str = Field(min_length=1, max_length=100)
    email: Email | None = None
    phone: Phone | None = None
    timezone: str = Field(default="UTC", max_length=64)
    quiet_hours: QuietHours | None = None
    daily_cap: int | None = Field(default=None, ge=0, le=10_000)
    opted_out_channels: list[str] = Field(default_factory=list, max_length=10)


class RecipientPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    display_name: str | None = Field(default=None, min_length=1, max_length=100)
    email: Email | None = None
    phone: Phone | None = None
    timezone: str | None = Field(default=None, max_length=64)
    quiet_hours: QuietHours | None = None  # null clears them
    daily_cap: int | None = Field(default=None, ge=0, le=10_000)  # null removes the cap
    opted_out_channels: list[str] | None = Field(default=None, max_length=10)


def _values(body: BaseModel) -> dict[str, Any]:
    """Only the fields the caller sent; quiet hours become their two columns."""
    values = {k: getattr(body, k) for k in body.model_fields_set}
    if "quiet_hours" in values:
        qh = values.pop("quiet_hours")
        values["quiet_start"], values["quiet_end"] = (qh.start, qh.end) if qh else (None, None)
    if values.get("timezone") is None:
        values.pop("timezone", None)
    return values


async def _guard(call: Any, *args: Any) -> Any:
    try:
        return await asyncio.to_thread(call, *args)
    except recipients.RecipientError as exc:
        raise ApiError(422, "invalid_request", field=exc.field, detail=exc.message) from None
    except recipients.DuplicateRecipient as exc:
        raise ApiError(409, "duplicate_ref", recipient_id=exc.recipient_id,
                       detail="a recipient with this ref exists") from None


@router.post("", status_code=201)
async def create(body: RecipientIn, p: Auth) -> JSONResponse:
    values = _values(body)
    values.setdefault("ref", body.ref)
    values.setdefault("display_name", body.display_name)
    row = await _guard(recipients.create, p.tenant_id, values, p.actor_ref)
    return JSONResponse(jsonable_encoder(_public(row)), status_code=201)


@router.get("/{recipient_id}")
async def get(recipient_id: Id, p: Auth) -> dict[str, Any]:
    return _public(await tenant_row(recipients.get, p.tenant_id, recipient_id))


@router.patch("/{recipient_id}")
async def patch(recipient_id: Id, body: RecipientPatch, p: Auth) -> dict[str, Any]:
    row = await _guard(recipients.update, p.tenant_id, recipient_id, _values(body), p.actor_ref)
    if row is None:
        raise ApiError(404, "not_found")
    return _public(row)


@router.get("/{recipient_id}/messages")
async def messages(recipient_id: Id, p: Auth, limit: Annotated[int, Query(ge=1, le=500)] = 100,
                   before_id: Annotated[int | None, Query(ge=1)] = None) -> dict[str, Any]:
    out = await asyncio.to_thread(queries.recipient_messages, p.tenant_id, recipient_id, datetime.now(UTC), limit,
                                  before_id)
    if out is None:
        raise ApiError(404, "not_found")
    return out


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}
