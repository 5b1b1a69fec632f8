"""The relay's window: Redis is only a wake-up, and the relay keeps only a window of them per lane.

Invariants: one scan enqueues at most `window` wake-ups per lane — that lane's oldest owed rows — and never a second
one for a row whose job is live; as rows are settled the next scan brings in the following ones, in id order; a
flushed Redis is rebuilt by the next scan; a long bulk backlog never keeps another lane's rows out of their window.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from arq import ArqRedis

from domain.db import get_engine
from domain.delivery.queue import job_id, queue_name
from domain.delivery.wakeups import arq_pool
from jobs.relay import scan_once

WINDOW = 50


def _owed(lane: str, n: int, tag: str) -> list[int]:
    with get_engine().begin() as c:
        return [int(i) for i in c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, reserved_cents) SELECT 42, 'webhook:tenant-42', 'webhook', :l, "
            "'x', '{}', :tag || g, 'QUEUED', 0, 0, 8, 0 FROM generate_series(1, :n) g RETURNING id"),
            {"l": lane, "n": n, "tag": tag}).scalars()]


def _settle(ids: list[int]) -> None:
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET status = 'DELIVERED' WHERE id = ANY(:i)"), {"i": ids})


async def _queued(pool: ArqRedis, lane: str) -> set[int]:
    return {int(j.decode().removeprefix("n-")) for j in await pool.zrange(queue_name(lane), 0, -1)}


async def _finish(pool: ArqRedis, ids: list[int]) -> None:
    """What a worker leaves behind once a job ran (keep_result=0): no job key, nothing queued."""
    await pool.delete(*[f"arq:job:{job_id(i)}" for i in ids])
    await pool.zrem(queue_name("bulk"), *[job_id(i) for i in ids])


@pytest.fixture
def only_this_relay(services):  # type: ignore[no-untyped-def]
    """The test drives the relay's scan itself: the session's relay process must not scan beside it."""
    relay = services.procs.get("relay")
    if relay is not None and relay.alive():
        relay.stop()
    yield
    services.relay()


def test_relay_keeps_a_window_of_wake_ups_per_lane_in_id_order_and_loses_none(only_this_relay, db, redis_db):
    bulk = _owed("bulk", 3 * WINDOW, "win-b-")
    codes = _owed("critical", 3, "win-c-")  # created after the whole bulk backlog: higher ids

    async def run() -> None:
        pool = await arq_pool()
        try:
            seen, enqueued = await scan_once(pool, limit=20, window=WINDOW)
            assert enqueued == WINDOW + 3, "a window of bulk, and every code despite 150 older bulk rows"
            assert await _queued(pool, "bulk") == set(bulk[:WINDOW]), "the bulk lane's OLDEST rows"
            assert await _queued(pool, "critical") == set(codes)
            assert seen == WINDOW + 3

            assert (await scan_once(pool, limit=20, window=WINDOW))[1] == 0, "live jobs are not enqueued twice"

            _settle(bulk[:WINDOW])
            await _finish(pool, bulk[:WINDOW])
            assert (await scan_once(pool, limit=20, window=WINDOW))[1] == WINDOW
            assert await _queued(pool, "bulk") == set(bulk[WINDOW:2 * WINDOW]), "the window slid, in id order"

            await pool.flushdb()  # every wake-up gone: PostgreSQL still owes the rows
            assert (await scan_once(pool, limit=20, window=WINDOW))[1] == WINDOW + 3
            assert await _queued(pool, "bulk") == set(bulk[WINDOW:2 * WINDOW])
            assert await _queued(pool, "critical") == set(codes)
        finally:
            await pool.aclose()

    asyncio.run(run())
