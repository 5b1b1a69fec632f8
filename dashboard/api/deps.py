"""What every route may depend on: the authenticated principal and the backend's one arq pool (`dashboard.pool`,
shared with the pages)."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from typing import Annotated, Any

from arq import ArqRedis
from fastapi import Depends, Path, Query, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dashboard.api.errors import API_KEY, API_KEY_REFUSED, ApiError, unauthorized
from dashboard.api.guard import client_of
from dashboard.pool import maybe_pool as maybe_pool  # re-exported: the routes take the pool from here
from dashboard.pool import redis_pool as redis_pool
from domain.access.auth import Principal, principal_for_key
from domain.delivery import ratelimit
from domain.delivery.queue import API_RATE_KEY
from domain.settings import get_settings

# Unknown keys per client address: a burst of 20, then one every 3 s; beyond it 429 before any database lookup.
# (Behind a reverse proxy that is not in OUTBOX_TRUSTED_PROXIES every caller shares the proxy's address: a flood of
# bad keys then slows everyone's *unknown* keys — a valid key is only refused while that address is over its budget.)
UNKNOWN_KEY_KEY = "outbox:rate:unknown-key:"  # + the client address
UNKNOWN_KEY_RATE, UNKNOWN_KEY_BURST = 1 / 3, 20.0
# Keys this process authenticated in the last few seconds skip the unknown-key gate: a flood of bad keys from one
# address (a reverse proxy: everyone's address) never refuses a key that is in use. A revoked key stops working
# within KNOWN_KEY_SECONDS.
KNOWN_KEY_SECONDS, KNOWN_KEY_MAX = 10.0, 10_000
_known: dict[str, tuple[float, Principal]] = {}
bearer = HTTPBearer(auto_error=False, description="an API key from `outbox apikey create --tenant T`")


async def authenticate(authorization: str | None, client: str) -> Principal:
    """Tenant and actor come from the bearer key, never from the body. Called by `guard.ApiKeyGate` from the
    headers alone, before the body is read."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise unauthorized(API_KEY, detail="send Authorization: Bearer <api key>")
    key = authorization[7:].strip()
    digest = hashlib.sha256(key.encode()).hexdigest()
    pool = await maybe_pool()
    known = _known.get(digest)
    if known is not None and known[0] > time.monotonic():
        p: Principal | None = known[1]
    else:
        bucket = UNKNOWN_KEY_KEY + client
        await _throttled(pool, ratelimit.peek, bucket, UNKNOWN_KEY_RATE, UNKNOWN_KEY_BURST,
                         "too many unknown api keys from this address")
        p = await asyncio.to_thread(principal_for_key, key)
        if p is None:
            await _throttled(pool, ratelimit.take, bucket, UNKNOWN_KEY_RATE, UNKNOWN_KEY_BURST, None)
            raise unauthorized(API_KEY_REFUSED, detail="unknown or revoked api key")
        if len(_known) >= KNOWN_KEY_MAX:
            _known.clear()
        _known[digest] = (time.monotonic() + KNOWN_KEY_SECONDS, p)
    assert p is not None
    rate = get_settings().api_rate_per_second
    await _throttled(pool, ratelimit.take, API_RATE_KEY + digest[:24], rate,
                     2 * rate, f"more than {rate:g} requests per second for this key")
    return p


async def principal(request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None) -> Principal:
    """The principal the gate authenticated before the body was read (or, for a route reached some other way,
    authenticated here: never without a key)."""
    p = request.scope.get("state", {}).get("principal")
    if isinstance(p, Principal):
        return p
    return await authenticate(request.headers.get("authorization"), client_of(request.scope))


async def _throttled(pool: ArqRedis | None, op: Any, bucket: str, rate: float, burst: float,
                     what: str | None) -> None:
    """One token bucket in Redis (every backend shares it). Redis down: let the request through — PostgreSQL, not
    Redis, is what must stay consistent, and refusing every caller would be an outage. `what` None: only count."""
    if pool is None:
        return
    try:
        wait = await op(pool, bucket, rate, burst)
    except Exception:
        return
    if wait > 0 and what is not None:
        raise ApiError(429, "rate_limited", headers={"Retry-After": str(max(1, math.ceil(wait)))},
                       detail=f"{what}; retry after the given seconds")


def needs_key(route: APIRoute) -> bool:
    """Whether a route depends (at any depth) on the API-key principal."""
    stack = [route.dependant]
    while stack:
        d = stack.pop()
        if d.call is principal:
            return True
        stack.extend(d.dependencies)
    return False


Auth = Annotated[Principal, Depends(principal)]
# A row id in a path: within PostgreSQL's integer (a larger one is a 422, never a database error).
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]
# A keyset cursor (an id of a bigint column) in a query: beyond bigint is a 422, never a database error.
Cursor = Annotated[int | None, Query(ge=1, le=2**63 - 1, description="`next_cursor` of the page before (opaque)")]
# A page's size: 1-500 (more is a 422, never a silent cut).
Limit = Annotated[int, Query(ge=1, le=500, description="rows per page (at most 500)")]


async def tenant_row(query: Any, tenant_id: int, key: Any) -> dict[str, Any]:
    """A tenant-scoped read: another tenant's row and a missing row both answer 404 (no existence leak)."""
    row: dict[str, Any] | None = await asyncio.to_thread(query, tenant_id, key)
    if row is None:
        raise ApiError(404, "not_found")
    return row
