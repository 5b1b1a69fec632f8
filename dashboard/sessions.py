"""Sessions that outlive their backend: with several dashboard backends, Reflex keeps each tab's state in
Redis and, to catch a duplicated tab, treats a tab's token as taken while Redis holds a socket record for it. A
backend that dies outright (SIGKILL, OOM, its machine gone) never deletes its records, so they stay for
`redis_token_expiration` (an hour): the tab reconnecting to another backend would be handed a NEW token — an empty
session, logged out.

So each backend process holds one Redis connection named after its token manager's instance. Redis drops a
connection the moment its process dies (the kernel closes the socket), so "is that instance alive?" is "is a client
of that name connected?" — no heartbeat period to wait out. When a tab connects, a socket record whose instance is
not connected is dropped before Reflex looks for a duplicate: the tab keeps its token, and with it its session, on
whichever backend it reaches. A record of a live instance is left alone (a duplicated tab still gets its own token).
One backend with in-memory state: nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
from collections.abc import Awaitable
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from reflex.utils.token_manager import RedisTokenManager
from reflex_base.config import get_config

log = logging.getLogger("outbox.sessions")
NAME_PREFIX = "outbox-dash-"


async def keep_sessions_portable(app: Any) -> None:
    """Lifespan task of every backend process: adopt dead instances' tabs; stay connected under our name."""
    tm = getattr(app.event_namespace, "_token_manager", None)
    url = get_config().redis_url
    if not isinstance(tm, RedisTokenManager) or not url:
        return
    _adopt_orphaned_tokens(tm)
    delay = 0.5
    while True:
        conn = aioredis.Redis.from_url(url, client_name=NAME_PREFIX + tm.instance_id)
        try:
            while True:
                await cast(Awaitable[bool], conn.ping())  # redis-py types sync|async
                delay = 0.5
                await asyncio.sleep(5)  # keeps the named connection open (and notices Redis going away)
        except (RedisError, OSError) as e:
            log.warning("dashboard presence connection lost (%s); reconnecting", type(e).__name__)
        finally:
            with contextlib.suppress(Exception):
                await conn.aclose()
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)


async def _connected_instances(tm: RedisTokenManager) -> set[str]:
    clients = await tm.redis.client_list()
    return {str(c.get("name", ""))[len(NAME_PREFIX):] for c in clients
            if str(c.get("name", "")).startswith(NAME_PREFIX)}


def _adopt_orphaned_tokens(tm: RedisTokenManager) -> None:
    original = tm.link_token_to_sid

    async def link_token_to_sid(token: str, sid: str) -> str | None:
        if tm.token_to_socket.get(token) is None:  # not a reconnection to this very instance
            with contextlib.suppress(RedisError, pickle.UnpicklingError, AttributeError):
                key = tm._get_redis_key(token)
                raw = await tm.redis.get(key)
                owner = pickle.loads(raw).instance_id if raw else None  # Reflex's own record, read as Reflex does
                if owner and owner != tm.instance_id and owner not in await _connected_instances(tm):
                    log.info("tab reconnected from a backend that is gone: it keeps its session")
                    await tm.redis.delete(key)
        return await original(token, sid)

    tm.link_token_to_sid = link_token_to_sid  # type: ignore[method-assign]
