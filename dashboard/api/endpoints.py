"""Webhook endpoints per tenant (Svix's model): create (201, the `whsec_…` secret answered once), list, read, disable,
enable, delete, rotate (both secrets sign for 24 h), and send a test event (a signed `outbox.test` through the real
delivery path; one owed at a time). In development, an endpoint pointed at the mock receiver has its secret handed to
the mock (domain/endpoints/mock.py), so its events verify there. A URL to a loopback, private, link-local or metadata
address is refused (422 `url_not_allowed`), and checked again after DNS at send time (domain/endpoints/urls.py)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Cursor, Id, Limit, maybe_pool, tenant_row
from dashboard.api.errors import ApiError
from dashboard.api.fields import NOTE_DOC, NOTE_MAX, NoteIn, note_of
from domain.delivery.wakeups import enqueue_after_commit
from domain.endpoints import mock, store, urls
from domain.orders import trial
from domain.orders.policy import EVENT_TYPES
from domain.support import pages

router = APIRouter(prefix="/api/v1/endpoints", tags=["webhook endpoints"])
EVENTS = sorted(EVENT_TYPES.values())


class EndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=8, max_length=urls.MAX_URL, pattern=r"^https?://[^\s]+$",
                     description="https:// (or http://) to a public address; checked again after DNS on each send")
    description: str = Field("", max_length=200)
    event_types: list[str] | None = Field(
        None, min_length=1, max_length=len(EVENTS), description="omitted: every event type",
        json_schema_extra={"items": {"type": "string", "enum": [*EVENTS]}, "uniqueItems": True})


class Health(BaseModel):
    attempts_24h: int = Field(description="attempts that succeeded or failed in the last 24 hours")
    success_rate_24h: float | None = Field(description="share of those that succeeded (null: no attempt)")
    last_success_at: datetime | None
    last_error: str | None = Field(description="error class of the last failed attempt (timeout, connection, "
                                                "server_error, url_not_allowed, …)")
    last_error_at: datetime | None


class EndpointOut(BaseModel):
    id: int
    url: str
    description: str
    event_types: list[str] | None
    enabled: bool
    created_at: datetime
    updated_at: datetime
    rotating_until: datetime | None = Field(description="the previous secret still signs until then")
    disabled_reason: str | None = Field(description="who disabled it, or why it was disabled automatically")
    failure_streak: int = Field(description="failed attempts in a row since the last success")
    breaker_open_until: datetime | None = Field(
        description="its circuit breaker is open: sends are deferred, not attempted, until then")
    health: Health


class EndpointWithSecret(EndpointOut):
    secret: str = Field(description="whsec_…: shown in this answer only — store it now")


def event_types_problem(event_types: list[str] | None) -> str | None:
    """Why a list of event types is refused (None: it is fine; None as the list: every type). The page's add form
    asks this too."""
    if event_types is not None:
        unknown = sorted(set(event_types) - set(EVENTS))
        if not event_types or unknown or len(set(event_types)) != len(event_types):
            return f"event_types: each once, from {', '.join(EVENTS)}"
    return None


def _checked(body: EndpointIn) -> None:
    problem = event_types_problem(body.event_types)
    if problem:
        raise ApiError(422, "invalid_request", field="event_types", detail=problem)


@router.post("", status_code=201, response_model=EndpointWithSecret)
async def create(body: EndpointIn, p: Auth) -> JSONResponse:
    _checked(body)
    verdict = await asyncio.to_thread(urls.check, body.url, urls.dev_allowlist())
    if isinstance(verdict, urls.Refused):
        raise ApiError(422, "url_not_allowed", field="url", detail=f"url: {verdict.reason}; nothing was created")
    row = await asyncio.to_thread(store.create, p.tenant_id, body.url, body.description, body.event_types,
                                  p.actor_ref)
    await asyncio.to_thread(mock.hand_over, p.tenant_id, int(row["id"]), body.url, row["secret"])
    return JSONResponse(EndpointWithSecret(**row).model_dump(mode="json"), status_code=201)


class EndpointPage(BaseModel):
    items: list[EndpointOut]
    next_cursor: str | None = Field(description="fetches the next, older page; null on the last page")


@router.get("", response_model=EndpointPage)
async def list_endpoints(p: Auth, limit: Limit = 50, cursor: Cursor = None) -> dict[str, Any]:
    """Newest first, never a secret. `next_cursor` (null on the last page) fetches the next, older page."""
    page = await asyncio.to_thread(pages.endpoints, p.tenant_id, limit, cursor)
    return {"items": [EndpointOut(**r) for r in page.rows], "next_cursor": pages.next_cursor(page)}


@router.get("/{endpoint_id}", response_model=EndpointOut)
async def get(endpoint_id: Id, p: Auth) -> dict[str, Any]:
    return await tenant_row(store.get, p.tenant_id, endpoint_id)


async def _enabled(p: Any, endpoint_id: int, on: bool, body: NoteIn | None) -> dict[str, Any]:
    note = note_of(body)
    row = await asyncio.to_thread(lambda: store.set_enabled(p.tenant_id, endpoint_id, on, p.actor_ref, note=note))
    if row is None:
        raise ApiError(404, "not_found")
    return row


@router.post("/{endpoint_id}/disable", response_model=EndpointOut)
async def disable(endpoint_id: Id, p: Auth, body: NoteIn | None = None) -> dict[str, Any]:
    """Its events stop going out (owed ones are suppressed); one audit row with the optional note."""
    return await _enabled(p, endpoint_id, False, body)


@router.post("/{endpoint_id}/enable", response_model=EndpointOut)
async def enable(endpoint_id: Id, p: Auth, body: NoteIn | None = None) -> dict[str, Any]:
    return await _enabled(p, endpoint_id, True, body)


@router.post("/{endpoint_id}/rotate", response_model=EndpointWithSecret)
async def rotate(endpoint_id: Id, p: Auth, body: NoteIn | None = None) -> dict[str, Any]:
    """A new secret (in this answer only); the old one keeps signing beside it for 24 hours. One audit row."""
    note = note_of(body)
    row = await asyncio.to_thread(lambda: store.rotate(p.tenant_id, endpoint_id, p.actor_ref, note=note))
    if row is None:
        raise ApiError(404, "not_found")
    await asyncio.to_thread(mock.hand_over, p.tenant_id, endpoint_id, str(row["url"]), row["secret"])
    return row


class TestEventOut(BaseModel):
    endpoint_id: int
    event_id: str = Field(description="the test event's id: its webhook-id and Idempotency-Key")
    notification_id: int = Field(description="its ledger row: GET /api/v1/notifications/{id} shows its attempts")
    event_type: str = Field(description="outbox.test")


@router.post("/{endpoint_id}/test", status_code=202, response_model=TestEventOut,
             responses={409: {"description": "the endpoint is disabled (`endpoint_disabled`), or a test event to it "
                                             "is still owed (`test_owed`): nothing was sent"}})
async def send_test(endpoint_id: Id, p: Auth) -> JSONResponse:
    """A signed `outbox.test` event to this endpoint only, through the real delivery path (ledger row, lane
    workers, signing, retries). One owed at a time; one audit row. 202: it is owed; its attempts show on the
    notification."""
    await asyncio.to_thread(mock.hand_over_current, p.tenant_id, endpoint_id)  # development: the mock verifies
    got = await asyncio.to_thread(trial.send_test_event, p.tenant_id, endpoint_id, p.actor_ref)
    if isinstance(got, trial.Refused):
        if got.code == "not_found":
            raise ApiError(404, "not_found")
        if got.notification_id is not None:
            raise ApiError(409, got.code, detail=got.words, notification_id=got.notification_id)
        raise ApiError(409, got.code, detail=got.words)
    await enqueue_after_commit(await maybe_pool(), got.owed)
    return JSONResponse(TestEventOut(endpoint_id=endpoint_id, event_id=str(got.event_id),
                                     notification_id=got.notification_id, event_type=trial.EVENT_TYPE
                                     ).model_dump(mode="json"), status_code=202)


@router.delete("/{endpoint_id}", status_code=204, response_class=Response)
async def delete(endpoint_id: Id, p: Auth,
                 note: str = Query("", max_length=NOTE_MAX, description=NOTE_DOC)) -> Response:
    """Gone for good: it receives nothing more. One audit row with the optional note (a query parameter: many
    clients send no body with DELETE)."""
    why = note.strip()
    if not await asyncio.to_thread(lambda: store.delete(p.tenant_id, endpoint_id, p.actor_ref, note=why)):
        raise ApiError(404, "not_found")
    return Response(status_code=204)
