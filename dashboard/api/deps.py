"""What every route may depend on: the authenticated principal and the backend's one arq pool."""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Annotated, Any

from arq import ArqRedis
from fastapi import Depends, Header, Path

from dashboard.api.errors import ApiError
from domain import ratelimit
from domain.auth import Principal, principal_for_key
from domain.queue import API_RATE_KEY
from domain.settings import get_settings
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
    key = authorization[7:].strip()
    p = await asyncio.to_thread(principal_for_key, key)
    if p is None:
        raise ApiError(401, "unauthorized", detail="unknown or revoked api key")
    await _rate_limit(key)
    return p


async def _rate_limit(key: str) -> None:
    """One token bucket per API key in Redis (every backend shares it). Redis down: let the request through —
    PostgreSQL, not Redis, is what must stay consistent, and refusing every caller would be an outage."""
    rate = get_settings().api_rate_per_second
    pool = await maybe_pool()
    if pool is None:
        return
    try:
        wait = await ratelimit.take(pool, API_RATE_KEY + hashlib.sha256(key.encode()).hexdigest()[:24], rate, 2 * rate)
    except Exception:
        return
    if wait > 0:
        raise ApiError(429, "rate_limited", headers={"Retry-After": str(max(1, math.ceil(wait)))},
                       detail=f"more than {rate:g} requests per second for this key; retry after the given seconds")


Auth = Annotated[Principal, Depends(principal)]
# A row id in a path: within PostgreSQL's integer (a larger one is a 422, never a database error).
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]


async def tenant_row(query: Any, tenant_id: int, key: Any) -> dict[str, Any]:
    """A tenant-scoped read: another tenant's row and a missing row both answer 404 (no existence leak)."""
    row: dict[str, Any] | None = await asyncio.to_thread(query, tenant_id, key)
    if row is None:
        raise ApiError(404, "not_found")
    return row
