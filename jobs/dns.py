"""A tenant endpoint's name looked up at send time, on threads of its own, within a deadline, a few per tenant.

A resolver that hangs (a tenant's name served by a dead DNS server waits out the system's timeouts, 5 s × attempts ×
servers) must not take the default executor's few threads (min(32, cores + 4)), which every database call of the
worker uses. A lookup past its deadline still holds its thread until the resolver gives up, so one tenant may hold
at most `DNS_PER_TENANT` of the pool's threads (counting those): a tenant whose names hang waits behind its own
lookups only, never fills the pool — else every other tenant's lookups queued behind its hung ones, ran out their
deadline unstarted, and each counted as a failure of an innocent endpoint (its breaker opened, then auto-disable).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from domain.endpoints import urls

DNS_POOL: Final = ThreadPoolExecutor(max_workers=8, thread_name_prefix="endpoint-dns")
DNS_PER_TENANT: Final = 2
DNS_DEADLINE_S: Final = 5.0
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


async def look_up(tenant_id: int, url: str) -> urls.Allowed | urls.Refused:
    """`urls.addresses_for_send` on DNS_POOL, once this tenant has a thread free (its gate is released when the
    lookup's thread is done, not when its caller gave up waiting)."""
    loop = asyncio.get_running_loop()
    gate = _gates.setdefault(loop, {}).setdefault(tenant_id, asyncio.Semaphore(DNS_PER_TENANT))
    await gate.acquire()
    try:
        done = DNS_POOL.submit(urls.addresses_for_send, url, urls.dev_allowlist())
    except BaseException:
        gate.release()
        raise

    def release(_: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: its gates went with it
            loop.call_soon_threadsafe(gate.release)

    done.add_done_callback(release)
    return await asyncio.wrap_future(done)
