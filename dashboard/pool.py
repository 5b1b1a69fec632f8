"""The backend process's one arq pool (Redis): the HTTP API's after-commit wake-ups and rate limits and the pages'
publishes and enqueues share it. Created on first use, since the API is mounted into Reflex and gets no lifespan."""

from __future__ import annotations

import asyncio

from arq import ArqRedis

from domain.delivery.wakeups import arq_pool

_pool: ArqRedis | None = None
_pool_lock = asyncio.Lock()


async def redis_pool() -> ArqRedis:
    """The pool, created once per backend process."""
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
