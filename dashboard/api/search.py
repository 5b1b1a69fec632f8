"""Find anything by anything: `GET /api/v1/search?q=` — a recipient ref, name, phone, email, message id (`4940`,
`#4940`), job id (`n-4940`), provider reference, event id or order number. Tenant-scoped: another tenant's row is
exactly no hit. The query is never logged or stored."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from dashboard.api.deps import Auth
from dashboard.api.errors import ApiError
from domain.support.query import MAX_QUERY_CHARS, QUERY_PATTERN, QueryRefused
from domain.support.search import search as find

router = APIRouter(prefix="/api/v1/search", tags=["support"])

Q = Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, pattern=QUERY_PATTERN,
                         description="a ref, name, phone, email, message id (4940, #4940), job id (n-4940), "
                                     "provider reference, event id or order number")]


@router.get("")
async def search(q: Q, p: Auth) -> dict[str, Any]:
    """`items`: recipients (with their cross-channel answer and latest messages), orders, events and messages
    (with their answer in plain words), each with `matched_by` and the dashboard `href`."""
    try:
        return await asyncio.to_thread(find, p.tenant_id, q, datetime.now(UTC))
    except QueryRefused as exc:
        raise ApiError(422, exc.code, field="q", detail=exc.message) from None
