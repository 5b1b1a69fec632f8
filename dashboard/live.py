"""Redis pub/sub for the pages: subscribe per open tab, hand each message to the page, stop when told.

The message carries identity and revision only; the page reloads authorized state from PostgreSQL.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis.asyncio as aioredis

from domain.settings import get_settings


async def arq() -> Any:
    """The backend worker's one arq pool (shared with the HTTP API) for after-commit publish and enqueue."""
    from dashboard.api.deps import redis_pool

    return await redis_pool()


_WATCHERS: dict[str, str] = {}  # client token -> the one watch that should keep running for that tab


def take_over_watch(client_token: str) -> Callable[[], bool]:
    """A newer page load (or reconnect) of the same tab supersedes its older watch; returns `still_wanted`."""
    me = uuid.uuid4().hex
    _WATCHERS[client_token] = me
    return lambda: _WATCHERS.get(client_token) == me


async def messages(channel: str, still_wanted: Callable[[], bool]) -> AsyncIterator[dict[str, Any]]:
    client = aioredis.Redis.from_url(get_settings().redis_url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
        while still_wanted():
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg is None:
                continue
            try:
                data = json.loads(msg["data"])
            except (ValueError, TypeError):
                continue
            data["received_at"] = time.time()
            yield data
    finally:
        await pubsub.aclose()
        await client.aclose()
