"""Find anything by anything: `GET /api/v1/search?q=` — a recipient ref, name, phone, email, message id (`4940`,
`#4940`), job id (`n-4940`), provider reference, event id or order number (`913`, `#913`: a `#N` offers the
message N and the order N when both exist). Tenant-scoped: another tenant's row is
exactly no hit. The query is never logged or stored; `POST /api/v1/search {"q"}` keeps a phone or an email out of
URLs (and so out of every proxy's access log)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.deps import Auth
from dashboard.api.errors import ApiError
from domain.support.query import MAX_QUERY_CHARS, QUERY_PATTERN, QueryRefused
from domain.support.search import search as find

router = APIRouter(prefix="/api/v1/search", tags=["support"])

Q = Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, pattern=QUERY_PATTERN,
                         description="a ref, name, phone, email, message id (4940, #4940), job id (n-4940), "
                                     "provider reference, event id or order number (913, #913)")]


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=QUERY_PATTERN)


@router.get("")
async def search(q: Q, p: Auth) -> dict[str, Any]:
    """`items`: recipients (with their cross-channel answer and latest messages), orders, events, messages (with
    their answer in plain words), leads (by their ref or their advisor's) and campaigns (by id or name), each with
    `kind`, `matched_by` and the dashboard `href`."""
    return await _find(q, p.tenant_id)


@router.post("", responses={200: {"description": "the same answer as GET, the query kept out of the URL"}})
async def search_body(body: SearchIn, p: Auth) -> dict[str, Any]:
    """The same search with the query in the body: for phones and emails, which should not sit in URLs."""
    return await _find(body.q, p.tenant_id)


async def _find(q: str, tenant_id: int) -> dict[str, Any]:
    try:
        return await asyncio.to_thread(find, tenant_id, q, datetime.now(UTC))
    except QueryRefused as exc:
        raise ApiError(422, exc.code, field="q", detail=exc.message) from None
