"""Leads: create one, send it journey and lifecycle events, read its nudges."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Cursor, Id, Limit, tenant_row
from dashboard.api.fields import STRING
from domain.journeys import store as journey_store
from domain.journeys import views as journey_views
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.support import pages

router = APIRouter(prefix="/api/v1/leads", tags=["leads"])


class LeadIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipient_ref: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    advisor_ref: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")


class LeadEventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # the steps are published; another name is answered 422 unknown_step, listing them
    event: str = Field(min_length=1, max_length=64,
                       json_schema_extra={"enum": [*JOURNEY_STEPS, *LIFECYCLE_EVENTS]})
    event_id: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$",
                                 description="the producer's id: the same id again is a duplicate")
    occurred_at: Annotated[AwareDatetime | None, STRING] = Field(default=None,
                                                               description="when it happened (default: now)")


@router.post("", status_code=201)
async def new_lead(body: LeadIn, p: Auth) -> JSONResponse:
    lid = await asyncio.to_thread(journey_store.create_lead, p.tenant_id, body.recipient_ref, body.advisor_ref)
    return JSONResponse({"lead_id": lid, "current_step": None}, status_code=201)


@router.post("/{lead_id}/events")
async def lead_event(lead_id: Id, body: LeadEventIn, p: Auth) -> JSONResponse:
    r = await asyncio.to_thread(lambda: journey_store.record_lead_event(
        p.tenant_id, lead_id, body.event, event_id=body.event_id, occurred_at=body.occurred_at))
    if r.outcome == "not_found":
        return JSONResponse({"error": "not_found"}, status_code=404)
    if r.outcome == "unknown_event":
        return JSONResponse({"error": "unknown_step", "event": body.event, "steps": list(JOURNEY_STEPS),
                             "lifecycle_events": list(LIFECYCLE_EVENTS)}, status_code=422)
    return JSONResponse({
        "lead_id": lead_id, "outcome": r.outcome, "current_step": r.current_step, "intent_id": r.intent_id,
        "cancelled_intent_id": r.cancelled_intent_id,
        "scheduled_for": r.scheduled_for.isoformat() if r.scheduled_for else None,
        "notification_ids": list(r.notification_ids), "event_id": r.event_id, "reason": r.reason,
        "decision": r.decision})


@router.get("")
async def list_leads(p: Auth, limit: Limit = 50, cursor: Cursor = None,
                     recipient: Annotated[str | None, Query(min_length=1, max_length=64,
                                                            description="part of the lead's or advisor's ref")] = None,
                     step: Annotated[str | None, Query(json_schema_extra={"enum": [*JOURNEY_STEPS, "none"]},
                                                       pattern="^(" + "|".join([*JOURNEY_STEPS, "none"]) + ")$",
                                                       description="the furthest step ('none': not started)")] = None,
                     ) -> dict[str, Any]:
    """Newest first, each with its furthest step and its live nudge. `next_cursor` (null on the last page) fetches
    the next, older page."""
    page = await asyncio.to_thread(pages.leads, p.tenant_id, recipient or "", step, limit, cursor)
    return {"items": page.rows, "next_cursor": pages.next_cursor(page)}


@router.get("/{lead_id}")
async def get_lead(lead_id: Id, p: Auth) -> dict[str, Any]:
    return await tenant_row(journey_views.lead_detail, p.tenant_id, lead_id)
