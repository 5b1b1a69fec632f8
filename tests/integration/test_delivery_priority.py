"""A lane worker's PostgreSQL backends run at its lane's CPU priority (domain/delivery/priority.py), on real
PostgreSQL on this machine.

Invariants: every connection of a pool opened with a niceness is served by a local PostgreSQL backend at that
niceness (so a campaign's claims and records never compete at full weight with a one-time code's); a pool opened
without one leaves its backends as they are; nothing but a local PostgreSQL process is ever reniced — not this
process, not a backend named by a remote host — and a priority is only ever lowered, never raised.
"""

from __future__ import annotations

import asyncio
import os

from domain.delivery import hot, priority
from domain.settings import get_settings


async def _backend_niceness(pool: hot.Pool, n: int) -> list[int]:
    """The niceness of the backends behind `n` connections held at once (so they are `n` distinct ones)."""
    conns = [await pool.getconn() for _ in range(n)]
    try:
        return [os.getpriority(os.PRIO_PROCESS, c.info.backend_pid) for c in conns]
    finally:
        for c in conns:
            await pool.putconn(c)


def test_a_lanes_pool_is_served_by_backends_at_its_niceness_and_no_other_process_is_reniced(db: str) -> None:
    async def run() -> None:
        bulk = await hot.open_pool(get_settings().database_url, "outbox-test-bulk", max_size=3, niceness=10)
        code = await hot.open_pool(get_settings().database_url, "outbox-test-code", max_size=2)
        try:
            assert await _backend_niceness(bulk, 3) == [10, 10, 10]
            assert await _backend_niceness(code, 2) == [0, 0], "a critical worker's backends keep the default"
            async with bulk.connection() as c:  # already lower than asked: never raised
                assert priority.renice_backend(c.info.backend_pid, c.info.host, 5)
                assert os.getpriority(os.PRIO_PROCESS, c.info.backend_pid) == 10
        finally:
            await bulk.close()
            await code.close()

    asyncio.run(run())
    mine = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert not priority.renice_backend(os.getpid(), "127.0.0.1", 15), "not a PostgreSQL process: left alone"
    assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == mine
    assert not priority.renice_backend(1, "db.example.internal", 15), "a remote backend is not this machine's"
    assert priority.is_local("/var/run/postgresql") and priority.is_local("::1") and not priority.is_local(None)
