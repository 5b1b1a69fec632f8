"""Lane workers sleep until woken (jobs/wake.py), against a real Redis.

Invariants: an enqueue through `wakeups.enqueue` wakes an idle worker at once (long before its idle poll); a job
whose hint was lost (enqueued by arq alone) is still started, by the idle poll; a hint on another Redis database's
channel wakes nobody here. The bulk worker starts at most `BULK_STARTS_PER_READ` jobs from one read of its queue
and then reads it again at once, so a fairer-scored job enqueued meanwhile is not started after a whole stale read;
jobs it skips (marked in progress by a worker stopped mid-job) do not count, so they never stall the lane; and it
starts none while `BULK_BEFORE_THE_BUCKET` of its jobs wait for the channel's bucket (what waits beyond them waits in
Redis, in fair order), reading the queue again as soon as one passes.
A campaign's fan-out wakes the bulk lane like every other enqueue (an idle bulk worker starts it at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from arq import ArqRedis, create_pool
from arq.constants import in_progress_key_prefix
from arq.worker import func

from domain.delivery import wakeups
from domain.delivery.queue import DELIVER_TASK, job_id, queue_name, wake_channel
from domain.ledger.owed import OwedRow
from jobs import wake
from tests.conftest import TEST_REDIS_URL
from tests.integration.conftest import batch_lanes_set


@pytest.fixture
async def idle_worker(redis_db, monkeypatch, per_row_lanes):  # type: ignore[no-untyped-def]
    """A critical-lane LaneWorker in this process whose idle poll is 4 s; yields (pool, started: id -> monotonic).
    The per-row path (`per_row_lanes`): each enqueue is an arq job; `worker` is the LaneWorker itself."""
    monkeypatch.setattr(wake, "IDLE_WAIT", 4.0)
    started: dict[int, float] = {}

    async def mark(ctx: dict[str, Any], notification_id: int, created_at: Any = None) -> None:  # deliver's args
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
    monkeypatch.setattr(wake, "last_worker", w, raising=False)
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


async def test_a_batched_lanes_wake_up_sets_the_drain_loops_event_at_once(idle_worker) -> None:  # type: ignore[no-untyped-def]
    """A batched lane's enqueue makes no job: it publishes the lane's wake-up, which sets the event the lane's
    drain loops wait on (`LaneWorker.batch_wake`) at once — long before any idle poll."""
    pool, started = idle_worker
    w = wake.last_worker  # type: ignore[attr-defined]
    w.batch_wake.clear()
    with batch_lanes_set("critical"):
        t0 = time.monotonic()
        assert await wakeups.enqueue(pool, [OwedRow(7, "critical", job_id(7))]) == 1
        assert not await pool.exists(f"arq:job:{job_id(7)}"), "no per-row job on a batched lane"
        deadline = time.monotonic() + 3
        while not w.batch_wake.is_set():
            assert time.monotonic() < deadline, "the drain loops' event was never set"
            await asyncio.sleep(0.005)
        assert time.monotonic() - t0 < 2.0 and 7 not in started


async def test_a_lost_hint_costs_one_idle_poll_not_the_job(idle_worker) -> None:  # type: ignore[no-untyped-def]
    pool, started = idle_worker
    t0 = time.monotonic()
    await pool.enqueue_job(DELIVER_TASK, 2, _job_id=job_id(2), _queue_name=queue_name("critical"))  # no hint
    await pool.publish(wake_channel("critical", wakeups.redis_db(pool) + 1), "")  # another database's hint
    assert await _until(started, 2, 12.0) - t0 > 1.0  # not woken: started by the idle poll


async def test_the_bulk_worker_starts_a_few_jobs_per_read_of_its_queue_then_reads_it_again(redis_db) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()
    started: list[int] = []

    async def hold(ctx: dict[str, Any], notification_id: int) -> None:  # keeps its slot until the test ends
        started.append(notification_id)
        await release.wait()

    settings = wakeups.redis_settings(TEST_REDIS_URL)
    pool: ArqRedis = await create_pool(settings)
    w = wake.LaneWorker("bulk", functions=[func(hold, name=DELIVER_TASK)], queue_name=queue_name("bulk"),
                        redis_pool=pool, poll_delay=0.05, keep_result=0, handle_signals=False, max_jobs=32)
    try:
        for i in range(1, 11):
            await pool.enqueue_job(DELIVER_TASK, i, _job_id=job_id(i), _queue_name=queue_name("bulk"))
        # At the head of the queue, as many jobs as one read may start, each still marked in progress by a worker
        # stopped mid-job: arq skips them; they must not use up the read.
        stale = range(101, 101 + wake.BULK_STARTS_PER_READ)
        for i in stale:
            await pool.enqueue_job(DELIVER_TASK, i, _job_id=job_id(i), _queue_name=queue_name("bulk"))
            await pool.zadd(queue_name("bulk"), {job_id(i): i})  # scored first
            await pool.set(in_progress_key_prefix + job_id(i), b"1", px=600_000)
        read = await pool.zrangebyscore(queue_name("bulk"), min=float("-inf"), max=float("inf"))
        assert len(read) == 10 + len(stale) and read[0] == job_id(101).encode()
        w._wake.clear()
        await w.start_jobs(read)
        assert len(w.tasks) == wake.BULK_STARTS_PER_READ, "a read starts a few jobs, not all ten with slots free"
        assert not any(job_id(i) in w.tasks for i in stale), "marked in progress elsewhere: skipped"
        assert w._wake.is_set(), "slots still free: the queue is read again at once, not after a poll delay"
        await w.start_jobs(read)  # the next read: the jobs already running are skipped, the next few start
        assert len(w.tasks) == 2 * wake.BULK_STARTS_PER_READ
    finally:
        release.set()
        await asyncio.gather(*w.tasks.values(), return_exceptions=True)
        await w.close()


async def test_a_campaigns_fan_out_wakes_the_bulk_lane(redis_db) -> None:  # type: ignore[no-untyped-def]
    pool: ArqRedis = await create_pool(wakeups.redis_settings(TEST_REDIS_URL))
    pubsub = pool.pubsub()
    try:
        await pubsub.subscribe(wake_channel("bulk", wakeups.redis_db(pool)))
        assert await pubsub.get_message(timeout=5)  # the subscription's confirmation
        assert await wakeups.enqueue_fan_out(pool, 4242)
        woken = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
        assert woken is not None and woken["type"] == "message", "the bulk lane was not woken"
        assert not await wakeups.enqueue_fan_out(pool, 4242), "one fan-out job per campaign in flight"
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await pool.aclose()


async def test_the_bulk_worker_starts_nothing_while_enough_of_its_jobs_wait_for_the_bucket(redis_db) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()

    async def hold(ctx: dict[str, Any], notification_id: int) -> None:
        await release.wait()

    pool: ArqRedis = await create_pool(wakeups.redis_settings(TEST_REDIS_URL))
    w = wake.LaneWorker("bulk", functions=[func(hold, name=DELIVER_TASK)], queue_name=queue_name("bulk"),
                        redis_pool=pool, poll_delay=0.05, keep_result=0, handle_signals=False, max_jobs=32)
    try:
        for i in range(1, 4):
            await pool.enqueue_job(DELIVER_TASK, i, _job_id=job_id(i), _queue_name=queue_name("bulk"))
        read = await pool.zrangebyscore(queue_name("bulk"), min=float("-inf"), max=float("inf"))
        for _ in range(wake.BULK_BEFORE_THE_BUCKET):
            w.before_the_bucket.enter()
        await w.start_jobs(read)
        assert not w.tasks, "the jobs wait in Redis, in their order, not in worker slots"
        w._wake.clear()
        w.before_the_bucket.leave()  # one passed the bucket
        assert w._wake.is_set(), "room before the bucket: the queue is read again at once"
        await w.start_jobs(read)
        assert len(w.tasks) == 3
    finally:
        release.set()
        await asyncio.gather(*w.tasks.values(), return_exceptions=True)
        await w.close()
