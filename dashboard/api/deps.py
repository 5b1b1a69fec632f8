"""What every route may depend on: the authenticated principal and the backend's one arq pool."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from arq import ArqRedis
from fastapi import Depends, Header, Path

from dashboard.api.errors import ApiError
from domain.auth import Principal, principal_for_key
from domain.wakeups import arq_pool

_pool: ArqRedis | None = None
_pool_lock = asyncio.Lock()


async def redis_pool() -> ArqRedis:
    """One arq pool per backend worker, created on first use (mounted apps get no lifespan)."""
    global _pool
    async with _pool_lock:
        if _pool is None:
            _pool = await arq_pool()
    return _pool


async def maybe_pool() -> ArqRedis | None:
    """The pool, or None while Redis is down: after-commit work is best-effort, the relay catches up."""
    try:
        return await redis_pool()
    except Exception:
        return None


async def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
    """Tenant and actor come from the bearer key, never from the body."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise ApiError(401, "unauthorized", detail="send Authorization: Bearer <api key>")
    p = await asyncio.to_thread(principal_for_key, authorization[7:].strip())
    if p is None:
        raise ApiError(401, "unauthorized", detail="unknown or revoked api key")
    return p


Auth = Annotated[Principal, Depends(principal)]
# A row id in a path: within PostgreSQL's integer (a larger one is a 422, never a database error).
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]


async def tenant_row(query: Any, tenant_id: int, key: Any) -> dict[str, Any]:
    """A tenant-scoped read: another tenant's row and a missing row both answer 404 (no existence leak)."""
    row: dict[str, Any] | None = await asyncio.to_thread(query, tenant_id, key)
    if row is None:
        raise ApiError(404, "not_found")
    return row
