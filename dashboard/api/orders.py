"""Orders: create, list, read, and the three commands (approve, cancel, fulfill) with the revision the caller saw."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth, Cursor, Id, Limit, maybe_pool, tenant_row
from dashboard.api.fields import NOTE_MAX, JsonInt
from domain.access.auth import Principal
from domain.delivery.wakeups import after_commit
from domain.orders import views as order_views
from domain.orders.commands import Committed, NotFound, create_order, execute_order_command
from domain.orders.policy import COMMANDS, OrderStatus, Reject
from domain.support import pages

router = APIRouter(prefix="/api/v1/orders", tags=["orders"])


class TransitionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_revision: JsonInt = Field(ge=0, le=2**31 - 1)
    request_id: str = Field(min_length=1, max_length=100)
    note: str = Field("", max_length=NOTE_MAX, description="why; a cancel keeps it in the audit log with the "
                                                           "key's actor and the time")


class TransitionOut(BaseModel):
    order_id: int
    status: str
    revision: int
    event_id: uuid.UUID


class OrderIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer_ref: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    amount_cents: JsonInt = Field(ge=0, le=10**12)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")


async def _transition(p: Principal, order_id: int, command: str, body: TransitionIn) -> JSONResponse:
    result = await asyncio.to_thread(
        execute_order_command, tenant_id=p.tenant_id, order_id=order_id, command=command,
        expected_revision=body.expected_revision, actor_ref=p.actor_ref, request_id=body.request_id,
        note=body.note.strip())
    if isinstance(result, NotFound):
        return JSONResponse({"error": "not_found"}, status_code=404)
    if isinstance(result, Reject):
        if result.error == "optimistic_conflict":
            return JSONResponse({"error": "optimistic_conflict", "current_revision": result.current_revision},
                                status_code=409)
        return JSONResponse({"error": result.error, "current_status": result.current_status,
                             "requested": command}, status_code=422)
    assert isinstance(result, Committed)
    await after_commit(await maybe_pool(), result)
    return JSONResponse(TransitionOut(order_id=order_id, status=result.status, revision=result.revision,
                                      event_id=result.event_id).model_dump(mode="json"))


def _command_route(command: str) -> Callable[[int, TransitionIn, Principal], Awaitable[JSONResponse]]:
    async def route(order_id: Id, body: TransitionIn, p: Auth) -> JSONResponse:
        return await _transition(p, order_id, command, body)

    route.__name__ = command
    return route


for _command in COMMANDS:
    router.add_api_route(f"/{{order_id}}/{_command}", _command_route(_command), methods=["POST"],
                         response_model=TransitionOut, responses={409: {}, 422: {}, 404: {}, 401: {}})


@router.post("", status_code=201)
async def create(body: OrderIn, p: Auth) -> JSONResponse:
    oid = await asyncio.to_thread(create_order, tenant_id=p.tenant_id, customer_ref=body.customer_ref,
                                  amount_cents=body.amount_cents, currency=body.currency)
    return JSONResponse({"order_id": oid, "status": "authorized", "revision": 1}, status_code=201)


@router.get("")
async def list_orders(p: Auth, status: OrderStatus | None = None, limit: Limit = 50,
                      cursor: Cursor = None) -> dict[str, Any]:
    """Newest first. `next_cursor` (null on the last page) fetches the next, older page."""
    page = await asyncio.to_thread(pages.orders, p.tenant_id, status, limit, cursor)
    return {"items": page.rows, "next_cursor": pages.next_cursor(page)}


@router.get("/{order_id}")
async def get_order(order_id: Id, p: Auth) -> dict[str, Any]:
    return await tenant_row(order_views.get_order, p.tenant_id, order_id)
