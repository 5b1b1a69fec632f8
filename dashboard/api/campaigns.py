"""Campaigns on the bulk lane: start one (202, the fan-out runs in the background), follow its progress, cancel
what is still owed."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Cursor, Id, Limit, maybe_pool, tenant_row
from dashboard.api.errors import ApiError
from dashboard.api.fields import NOTE_DOC, NOTE_MAX, NoteIn, note_of
from domain.campaigns import fan_out as campaign_fan_out
from domain.campaigns import segments
from domain.campaigns import views as campaign_views
from domain.delivery.wakeups import wake_fan_out
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.ledger.send import SendRefused
from domain.support import pages

router = APIRouter(prefix="/api/v1/campaigns", tags=["campaigns"])


class CampaignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    # The enums are published (the domain still checks and answers unknown_segment / unknown_channel)
    segment: str = Field(min_length=1, max_length=64, description=", ".join(segments.SEGMENTS),
                         json_schema_extra={"enum": list(segments.SEGMENTS)})
    template: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_.]+$")
    channel: str = Field(min_length=1, max_length=16, json_schema_extra={"enum": list(PEOPLE_CHANNELS)})
    note: str = Field("", max_length=NOTE_MAX, description=NOTE_DOC)


@router.post("", status_code=202)
async def create(body: CampaignIn, p: Auth) -> JSONResponse:
    try:
        cid = await asyncio.to_thread(lambda: campaign_fan_out.create(
            tenant_id=p.tenant_id, name=body.name, segment=body.segment, template=body.template,
            channel=body.channel, actor_ref=p.actor_ref, note=body.note.strip()))
    except SendRefused as exc:
        raise ApiError(422, exc.code, detail=str(exc)) from None
    await wake_fan_out(await maybe_pool(), cid)
    return JSONResponse({"campaign_id": cid, "status": "ledgering"}, status_code=202)


@router.get("")
async def list_campaigns(p: Auth, limit: Limit = 50, cursor: Cursor = None,
                         channel: Literal["email", "sms", "whatsapp"] | None = None) -> dict[str, Any]:
    """Newest first, each with its progress. `next_cursor` (null on the last page) fetches the next, older page."""
    page = await asyncio.to_thread(pages.campaigns, p.tenant_id, channel, limit, cursor)
    return {"items": [{k: v for k, v in c.items() if k != "id"} for c in page.rows],
            "next_cursor": pages.next_cursor(page)}


@router.get("/{campaign_id}")
async def get(campaign_id: Id, p: Auth) -> dict[str, Any]:
    return await tenant_row(campaign_views.status, p.tenant_id, campaign_id)


@router.post("/{campaign_id}/cancel")
async def cancel(campaign_id: Id, p: Auth, body: NoteIn | None = None) -> dict[str, Any]:
    """Every message of it not yet sent is suppressed and refunded; cannot be undone. One audit row with the
    optional note."""
    note = note_of(body)
    n = await asyncio.to_thread(lambda: campaign_fan_out.cancel(p.tenant_id, campaign_id, actor_ref=p.actor_ref,
                                                                note=note))
    if n is None:
        raise ApiError(404, "not_found")
    return {"campaign_id": campaign_id, "suppressed": n, "status": "cancelled"}
