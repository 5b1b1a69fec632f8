"""The relay's window: Redis is only a wake-up, and the relay keeps only a window of them per lane.

Invariants: one scan enqueues at most `window` wake-ups per lane — that lane's oldest owed rows — and never a second
one for a row whose job is live; as rows are settled the next scan brings in the following ones, in id order; a
flushed Redis is rebuilt by the next scan; a long bulk backlog never keeps another lane's rows out of their window.
A NOTIFY makes the relay scan only the lanes it names (a one-time code's commit never makes it read the bulk
lane's window); the periodic scan covers every lane. The dead-job check of a whole window of overdue rows is one
Redis round trip on one connection, not one connection per row. Those are the per-row path's (`per_row_lanes`);
a batched lane gets no job per row: one wake-up per scan while it owes a due row, none when it owes nothing.
"""

from __future__ import annotations

import asyncio
import time

import sqlalchemy as sa
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix

from domain.db import get_engine
from domain.delivery import wakeups
from domain.delivery.queue import LANES, NOTIFY_CHANNEL, job_id, queue_name, wake_channel
from domain.delivery.wakeups import arq_pool
from domain.settings import get_settings
from jobs.relay import listen, notified_lanes, scan_once

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




def test_relay_keeps_a_window_of_wake_ups_per_lane_in_id_order_and_loses_none(relay_stopped, db, redis_db,
        per_row_lanes):
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


def test_a_stranded_job_is_enqueued_again_and_a_live_or_running_one_is_left_alone(relay_stopped, db, redis_db,
                                                                                   per_row_lanes):
    """A job whose data is in Redis but which is neither queued nor in progress will never run, and arq refuses to
    enqueue its id again while the data exists: the relay's scan drops the data and enqueues the row again (chaos,
    seed 1693532603: a run given up as dead ended after the id was enqueued again and took the new run's queue
    entry with it; the row stayed owed through the whole drain). A queued job and a running one are left as they
    are."""
    stranded, queued, running = _owed("high", 3, "strand-")

    async def run() -> None:
        pool = await arq_pool()
        try:
            assert (await scan_once(pool, lanes={"high"}))[1] == 3
            await pool.zrem(queue_name("high"), job_id(stranded), job_id(running))  # what the foreign finish did
            await pool.psetex(in_progress_key_prefix + job_id(running), 60_000, b"1")  # a worker runs this one
            assert await pool.exists(job_key_prefix + job_id(stranded))
            assert (await scan_once(pool, lanes={"high"}))[1] == 1, "only the stranded job is enqueued again"
            assert await _queued(pool, "high") == {stranded, queued}
            assert (await scan_once(pool, lanes={"high"}))[1] == 0, "and once"
        finally:
            await pool.aclose()

    asyncio.run(run())


def test_a_batched_lane_is_woken_once_per_scan_and_gets_no_job_per_row(relay_stopped, db, redis_db,
                                                                         batched_lanes):
    """Batched lanes (critical, high, normal): the scan enqueues no arq job for their rows; it
    publishes one wake-up per lane that owes a due row, however many it owes, and none for a lane that owes
    nothing; the bulk lane keeps its window of per-row wake-ups."""
    _owed("critical", 5, "bw-c-")
    _owed("high", 3, "bw-h-")
    bulk = _owed("bulk", 3, "bw-b-")

    async def run() -> None:
        pool = await arq_pool()
        ps = pool.pubsub()
        try:
            db_index = wakeups.redis_db(pool)
            channels = {wake_channel(lane, db_index): lane for lane in LANES}
            await ps.subscribe(*channels)
            _, enqueued = await scan_once(pool, limit=20, window=WINDOW)
            assert enqueued == 1 + 1 + len(bulk), "one wake-up per batched lane that owes, one job per bulk row"
            assert await _queued(pool, "critical") == set() and await _queued(pool, "high") == set()
            assert await _queued(pool, "bulk") == set(bulk)
            woken: list[str] = []
            deadline = time.monotonic() + 10
            while "bulk" not in woken:  # published last, in lane order: every earlier wake-up came before it
                assert time.monotonic() < deadline, f"wake-ups seen: {woken}"
                m = await ps.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if m is not None:
                    woken.append(channels[m["channel"].decode() if isinstance(m["channel"], bytes) else m["channel"]])
            assert woken == ["critical", "high", "bulk"], "the normal lane owes nothing: not woken"
        finally:
            await ps.aclose()
            await pool.aclose()

    asyncio.run(run())


def test_a_notify_scans_only_the_lanes_it_names_and_the_interval_scan_every_lane(relay_stopped, db, redis_db,
        per_row_lanes):
    bulk = _owed("bulk", 30, "scope-b-")
    codes = _owed("critical", 2, "scope-c-")

    async def run() -> None:
        pool = await arq_pool()
        conn = await listen(get_settings().database_url)
        try:
            with get_engine().begin() as c:  # one commit, two NOTIFYs: one scan serves the burst
                c.execute(sa.text(f"SELECT pg_notify('{NOTIFY_CHANNEL}', 'critical'), "
                                  f"pg_notify('{NOTIFY_CHANNEL}', 'high')"))
            lanes = await notified_lanes(conn, 10.0)
            assert lanes == {"critical", "high"}
            assert await notified_lanes(conn, 0.05) == set(), "nothing more was notified"
            await scan_once(pool, lanes=lanes)
            assert await _queued(pool, "critical") == set(codes)
            assert await _queued(pool, "bulk") == set(), "a code's NOTIFY does not read the bulk lane's window"

            with get_engine().begin() as c:
                c.execute(sa.text(f"SELECT pg_notify('{NOTIFY_CHANNEL}', 'no-such-lane')"))
            assert await notified_lanes(conn, 10.0) is None, "an unknown payload asks for a full scan"
            await scan_once(pool)  # the interval's (or that) full scan
            assert await _queued(pool, "bulk") == set(bulk)
        finally:
            await conn.close()
            await pool.aclose()

    asyncio.run(run())


def test_a_window_of_overdue_rows_is_checked_for_dead_jobs_in_one_round_trip(relay_stopped, db, redis_db,
        per_row_lanes):
    lease = get_settings().lease_seconds
    ids = _owed("normal", 300, "dead-")
    with get_engine().begin() as c:  # due for longer than a lease and never claimed: each one's worker may be dead
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() - make_interval(secs => :s) "
                          "WHERE id = ANY(:i)"), {"s": 2 * lease, "i": ids})
    dead, waiting = ids[:150], ids[150:]
    for i in dead:  # in progress for (job_timeout + 10 s) - 1 s: far longer than a lease without claiming
        redis_db.set(in_progress_key_prefix + job_id(i), b"1", px=1000)
        redis_db.set(job_key_prefix + job_id(i), b"x", px=600_000)
    for i in waiting:  # in progress for a second only: a long queue, not a dead worker
        redis_db.set(in_progress_key_prefix + job_id(i), b"1", px=69_000)
        redis_db.set(job_key_prefix + job_id(i), b"x", px=600_000)

    async def run() -> None:
        pool = await arq_pool()
        try:
            before = int(redis_db.info("clients")["connected_clients"])
            await scan_once(pool, window=300, lanes={"normal"})
            during = int(redis_db.info("clients")["connected_clients"])
            assert during - before <= 5, f"{during - before} Redis connections opened for one scan"
            assert not any(redis_db.exists(in_progress_key_prefix + job_id(i)) for i in dead)
            assert await _queued(pool, "normal") >= set(dead), "each dead worker's row woken again"
            assert all(redis_db.exists(in_progress_key_prefix + job_id(i)) for i in waiting), "waiting jobs left"
        finally:
            await pool.aclose()

    asyncio.run(run())
