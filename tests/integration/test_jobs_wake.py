"""Lane workers sleep until woken (jobs/wake.py), against a real Redis.

Invariants: an enqueue through `wakeups.enqueue` wakes an idle worker at once (long before its idle poll); a job
whose hint was lost (enqueued by arq alone) is still started, by the idle poll; a hint on another Redis database's
channel wakes nobody here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from arq import ArqRedis, create_pool
from arq.worker import func

from domain.delivery import wakeups
from domain.delivery.queue import DELIVER_TASK, job_id, queue_name, wake_channel
from domain.ledger.owed import OwedRow
from jobs import wake
from tests.conftest import TEST_REDIS_URL


@pytest.fixture
async def idle_worker(redis_db, monkeypatch):  # type: ignore[no-untyped-def]
    """A critical-lane LaneWorker in this process whose idle poll is 4 s; yields (pool, started: id -> monotonic)."""
    monkeypatch.setattr(wake, "IDLE_WAIT", 4.0)
    started: dict[int, float] = {}

    async def mark(ctx: dict[str, Any], notification_id: int) -> None:
        started[notification_id] = time.monotonic()

    settings = wakeups.redis_settings(TEST_REDIS_URL)
    w = wake.LaneWorker("critical", functions=[func(mark, name=DELIVER_TASK)], queue_name=queue_name("critical"),
                        redis_settings=settings, poll_delay=0.005, keep_result=0, handle_signals=False)
    task = asyncio.create_task(w.async_run())
    pool: ArqRedis = await create_pool(settings)
    channel = wake_channel("critical", wakeups.redis_db(pool))
    deadline = time.monotonic() + 10
    while not (await pool.pubsub_numsub(channel))[0][1]:  # subscribed: it is listening
        assert time.monotonic() < deadline, "the worker never subscribed to its wake channel"
        await asyncio.sleep(0.02)
    while not (w.waiting and not w._wake.is_set()):  # past the poll its subscription woke: asleep for IDLE_WAIT
        assert time.monotonic() < deadline, "the worker never went to sleep"
        await asyncio.sleep(0.005)
    yield pool, started
    # Stop only once the job it started has finished: cancelling arq mid-finish raises CancelledError out of its
    # shielded bookkeeping into this teardown (seen once in a full run).
    deadline = time.monotonic() + 10
    while w.job_tasks and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    with contextlib.suppress(asyncio.CancelledError):
        await w.close()
    await pool.aclose()


async def _until(started: dict[int, float], nid: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while nid not in started:
        assert time.monotonic() < deadline, f"job {nid} not started within {timeout}s"
        await asyncio.sleep(0.005)
    return started[nid]


async def test_an_enqueue_wakes_the_idle_worker_long_before_its_poll(idle_worker) -> None:  # type: ignore[no-untyped-def]
    pool, started = idle_worker
    t0 = time.monotonic()
    assert await wakeups.enqueue(pool, [OwedRow(1, "critical", job_id(1))]) == 1
    assert await _until(started, 1, 3.0) - t0 < 2.0  # the idle poll is 4 s away


async def test_a_lost_hint_costs_one_idle_poll_not_the_job(idle_worker) -> None:  # type: ignore[no-untyped-def]
    pool, started = idle_worker
    t0 = time.monotonic()
    await pool.enqueue_job(DELIVER_TASK, 2, _job_id=job_id(2), _queue_name=queue_name("critical"))  # no hint
    await pool.publish(wake_channel("critical", wakeups.redis_db(pool) + 1), "")  # another database's hint
    assert await _until(started, 2, 12.0) - t0 > 1.0  # not woken: started by the idle poll
