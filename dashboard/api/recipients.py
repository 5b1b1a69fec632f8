"""Recipients: create, read, change (opt-outs per channel, quiet hours, cap — each change kept), and "why didn't they
get it?" (`GET /api/v1/recipients/{id}/messages`)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, time
from typing import Annotated, Any
from zoneinfo import available_timezones

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dashboard.api.deps import Auth, Cursor, Id, Limit, tenant_row
from dashboard.api.errors import ApiError
from dashboard.api.fields import INTEGER
from domain.ledger import recipients
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.support import ledger as support_ledger
from domain.support import pages

router = APIRouter(prefix="/api/v1/recipients", tags=["recipients"])

Ref = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")]
# `\s` differs between regex flavours (the validator's counts U+0085 as space, JSON Schema's ECMA flavour counts
# U+FEFF): both are excluded by name, so the published pattern and the validator agree on every string.
Email = Annotated[str, Field(max_length=254, pattern=r"^[^@\s\x00\x85\ufeff]+@[^@\s\x00\x85\ufeff]+$")]
Phone = Annotated[str, Field(pattern=r"^\+?[0-9][0-9 ]{5,19}$")]
# An IANA zone, never an offset: the published enum is exactly what the domain accepts (it names the field otherwise)
ZONES = sorted(available_timezones() | {"UTC"})
Timezone = Annotated[str, Field(max_length=64, json_schema_extra={"enum": ZONES},
                                description="an IANA zone such as Asia/Kolkata (never an offset like +05:30)")]
Cap = Annotated[int, Field(ge=0, le=10_000), INTEGER]
Channel = Annotated[str, Field(json_schema_extra={"enum": list(PEOPLE_CHANNELS)})]


TIME_OF_DAY = r"^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?$"


def _time_of_day(schema: dict[str, Any]) -> None:
    """Published as what is accepted: JSON Schema's `format: time` would allow an offset."""
    schema.pop("format", None)
    schema["pattern"] = TIME_OF_DAY


class QuietHours(BaseModel):
    """Times of day in the recipient's own `timezone` (an IANA zone): an offset here would be a second, conflicting
    zone (and an out-of-range one cannot even be stored), so it is refused, never silently dropped."""

    model_config = ConfigDict(extra="forbid")
    start: time = Field(description="HH:MM[:SS], no offset: the zone is the recipient's timezone",
                        json_schema_extra=_time_of_day)
    end: time = Field(description="HH:MM[:SS], no offset: the zone is the recipient's timezone",
                      json_schema_extra=_time_of_day)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _plain_time_of_day(cls, v: Any) -> Any:
        if isinstance(v, str) and not re.match(TIME_OF_DAY, v):
            if re.match(r"^[0-9:.]+(Z|[+-][0-9:]+)$", v):
                raise ValueError("a time of day without an offset (quiet hours follow the recipient's IANA "
                                 "timezone, e.g. Asia/Kolkata)")
            raise ValueError("a time of day as HH:MM or HH:MM:SS")
        if not isinstance(v, str | time):
            raise ValueError("a time of day as HH:MM or HH:MM:SS")
        return v

    @field_validator("start", "end")
    @classmethod
    def _no_offset(cls, v: time) -> time:
        if v.tzinfo is not None:
            raise ValueError("a time of day without an offset (quiet hours follow the recipient's IANA timezone, "
                             "e.g. Asia/Kolkata)")
        return v


class RecipientIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: Ref
    display_name: str = Field(min_length=1, max_length=100)
    email: Email | None = None
    phone: Phone | None = None
    timezone: Timezone = "UTC"
    quiet_hours: QuietHours | None = None
    daily_cap: Cap | None = None
    opted_out_channels: list[Channel] = Field(default_factory=list, max_length=10)


class RecipientPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # absent: unchanged. A name and the opt-out list cannot be null (the columns are NOT NULL).
    display_name: str = Field(default=None, min_length=1, max_length=100)  # type: ignore[assignment]  # None = absent (unchanged); a sent null fails str
    email: Email | None = None
    phone: Phone | None = None
    timezone: Timezone | None = None
    quiet_hours: QuietHours | None = None  # null clears them
    daily_cap: Cap | None = None  # null removes the cap
    opted_out_channels: list[Channel] = Field(default=None, max_length=10)  # type: ignore[arg-type]  # None = absent (unchanged); a sent null fails the list type


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


@router.get("")
async def list_recipients(p: Auth, limit: Limit = 50, cursor: Cursor = None,
                          q: Annotated[str | None, Query(min_length=1, max_length=64,
                                                         description="part of a ref or name")] = None,
                          ) -> dict[str, Any]:
    """Newest first. `next_cursor` (null on the last page) fetches the next, older page."""
    page = await asyncio.to_thread(pages.recipients, p.tenant_id, q or "", limit, cursor)
    return {"items": [jsonable_encoder(_public(r)) for r in page.rows], "next_cursor": pages.next_cursor(page)}


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
                   cursor: Cursor = None,
                   before_id: Annotated[Cursor, Query(deprecated=True, description="the old name of `cursor`")] = None,
                   ) -> dict[str, Any]:
    """Newest first, each with its answer in plain words. `next_cursor` (null on the last page) fetches the next,
    older page."""
    out = await asyncio.to_thread(support_ledger.recipient_messages, p.tenant_id, recipient_id, datetime.now(UTC),
                                  limit, cursor or before_id)
    if out is None:
        raise ApiError(404, "not_found")
    return out


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}
