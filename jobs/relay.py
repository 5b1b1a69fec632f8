"""Relay: woken by PostgreSQL LISTEN/NOTIFY, plus a periodic recovery scan.

Both paths run the same claim (`wakeups.scan_owed`, FOR UPDATE SKIP LOCKED over the partial index of owed rows) and
enqueue each row with `_job_id` = its notification id. A row with a live job is not enqueued twice, so Redis can be
flushed at any moment and the next scan rebuilds every wake-up from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix
from psycopg.rows import TupleRow

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import UnitOfWork, libpq_url
from domain.delivery import fair_plan, fair_queue, views, wakeups
from domain.delivery.queue import LANES, NOTIFY_CHANNEL, job_id, job_timeout_seconds
from domain.delivery.wakeups import arq_pool, enqueue, enqueue_fan_out
from domain.ledger.owed import OwedRow
from domain.retention.partitions import ensure_partitions
from domain.settings import get_settings
from jobs.wake import LISTEN_LANES

log = logging.getLogger("outbox.relay")
# How often the relay makes sure next months' partitions exist (a catalog read when they do).
PARTITIONS_EVERY_S = 3600.0
CHART_POINTS_EVERY_S = 60.0
# A failed scan (Redis away; every Redis call is bounded, domain/delivery/wakeups.py) is tried again this soon,
# doubling with each failure in a row up to the scan interval.
SCAN_RETRY_S = 0.5


def claim_owed(after: int = 0, limit: int = 500, horizon_seconds: float = 1.0,
               lane: str | None = None) -> list[ScannedRow]:
    """A keyset page of owed, due rows: of one lane (the relay), or of every lane in id order (the benchmark)."""
    with UnitOfWork() as uow:
        rows = wakeups.scan_owed(uow, after=after, limit=limit, horizon_seconds=horizon_seconds,
                                 lease_seconds=get_settings().lease_seconds, lane=lane)
        uow.commit()  # the SKIP LOCKED claim only needs to last while we read; enqueue is idempotent
    return [ScannedRow(OwedRow(r.id, r.lane, job_id(r.id), created_at=r.created_at), r.lease_expired, r.overdue,
                       r.tenant_id,
                       str(r.event_id) if r.event_id else None) for r in rows]


def claim_bulk_window(window: int, horizon_seconds: float = 1.0, limit: int = 500) -> list[ScannedRow]:
    """The bulk lane's window, shared between tenants and their campaigns (domain/delivery/fair_queue.py)."""
    return [ScannedRow(OwedRow(r.id, r.lane, job_id(r.id), f"{r.tenant_id}:{r.campaign_id or 0}", gap,
                               created_at=r.created_at),
                       r.lease_expired, r.overdue, r.tenant_id)
            for r, gap in fair_queue.scan_bulk_window(window, horizon_seconds, limit)]


@dataclass(frozen=True)
class ScannedRow:
    """`lease_expired`: a worker claimed it and died. `overdue`: due for longer than a lease and never claimed —
    if arq marks its job in progress, the worker that took it died before claiming."""

    row: OwedRow
    lease_expired: bool
    overdue: bool
    tenant: int | None = None  # for the log line only: one event is followed across processes by its id
    event_id: str | None = None


async def wake(redis: ArqRedis, scanned: list[ScannedRow]) -> int:
    """Enqueue the rows whose job is gone; each is one log line naming its notification id, event id, tenant and
    lane, so `grep <event id>` follows an event through the relay too. Returns the wake-ups enqueued."""
    gone = {r.notification_id for r in await wakeups.without_live_job(redis, [s.row for s in scanned])}
    if not gone:
        return 0
    for s in scanned:
        if s.row.notification_id in gone:
            log.info("wake-up enqueued", extra={
                "notification_id": s.row.notification_id, "event_id": s.event_id, "tenant": s.tenant,
                "lane": s.row.lane, "job_id": s.row.job_id, "why": "lease expired" if s.lease_expired else "owed"})
    return await enqueue(redis, [s.row for s in scanned if s.row.notification_id in gone])


async def forget_dead_jobs(redis: ArqRedis, scanned: list[ScannedRow]) -> int:
    """arq keeps a dead worker's job marked in progress for job_timeout + 10 s. PostgreSQL is the authority that
    the worker is gone: drop those keys so the same job id runs again now. Waiting jobs are left alone."""
    dead = [s.row.job_id for s in scanned if s.lease_expired]
    overdue = [s.row for s in scanned if s.overdue]
    if overdue:
        # A row can be overdue merely because it waited in a long queue; its job being in progress proves a dead
        # worker only once it has been in progress for longer than a lease without claiming (arq sets the key
        # for job_timeout + 10 s, so the time left says how long it has run).
        # One pipelined round trip for the page: a 40,000-row campaign keeps a whole window overdue, and one PTTL
        # per row gathered concurrently opened one Redis connection each (2,000 per scan, every scan).
        lease_ms = get_settings().lease_seconds * 1000
        async with redis.pipeline(transaction=False) as pipe:
            for r in overdue:
                pipe.pttl(in_progress_key_prefix + r.job_id)
            ttls = await pipe.execute()
        dead += [r.job_id for r, ttl in zip(overdue, ttls, strict=True)
                 if ttl > 0 and (job_timeout_seconds(r.lane) + 10) * 1000 - ttl > lease_ms]
    if dead:
        await redis.delete(*[p + j for j in dead for p in (job_key_prefix, in_progress_key_prefix)])
    return len(dead)


async def scan_once(redis: ArqRedis, limit: int = 500, window: int | None = None,
                    lanes: Iterable[str] | None = None) -> tuple[int, int]:
    """Returns (owed rows visited, wake-ups actually enqueued). `lanes`: only these (a NOTIFY names its lane);
    None: every lane.

    Per lane, the scan visits that lane's oldest owed rows up to the window (`OUTBOX_RELAY_WINDOW`) — on the bulk
    lane each tenant's and campaign's oldest, in a window of its own (`fair_plan.bulk_window`: a few scan
    intervals of the lane's pace), shared between them (fair_queue.py): Redis holds at most a window of wake-ups per
    lane, and a campaign of 40,000 rows costs each scan a window's worth of work, not 40,000 enqueue calls. Rows
    past the window are not lost: they are owed in PostgreSQL, in id order, and enter the window as the rows
    before them are sent."""
    s = get_settings()
    wanted = set(LANES if lanes is None else lanes)
    seen = enq = 0
    for lane in LANES:
        if lane not in wanted:
            continue
        lane_window = window or s.relay_window
        if lane == "bulk" and not wakeups.batched(lane):  # fair between tenants: each flow's oldest rows
            lane_window = window or fair_plan.bulk_window(s.relay_window, s.bulk_rate_per_second, s.scan_interval)
            rows = await asyncio.to_thread(claim_bulk_window, lane_window, 1.0, limit)
            await forget_dead_jobs(redis, rows)
            for i in range(0, len(rows), limit):  # the pipelined EXISTS page by page
                enq += await wake(redis, rows[i:i + limit])
            seen += len(rows)
            continue
        if wakeups.batched(lane):
            # A batched lane's drain loops claim its due rows themselves, oldest due first, a lease that ran out
            # included (the claim's guard takes it, the new token fences the dead worker out): the scan only wakes
            # the lane when it owes a due row, one publish, whatever its depth. The row read is handed to
            # `forget_dead_jobs` like any other (a per-row job left from before batching was switched on, marked
            # in progress by a dead worker, runs again).
            rows = await asyncio.to_thread(claim_owed, 0, 1, 1.0, lane)
            if rows:
                await forget_dead_jobs(redis, rows)
                await wakeups.wake_lanes(redis, [lane])
                first = rows[0]
                log.info("lane woken", extra={
                    "lane": lane, "why": "lease expired" if first.lease_expired else "owed",
                    "notification_id": first.row.notification_id, "event_id": first.event_id,
                    "tenant": first.tenant})
                seen += 1
                enq += 1
            continue
        after = visited = 0
        while visited < lane_window:  # keyset pages over the partial index (lane, id)
            page = min(limit, lane_window - visited)
            rows = await asyncio.to_thread(claim_owed, after, page, 1.0, lane)
            if not rows:
                break
            visited += len(rows)
            await forget_dead_jobs(redis, rows)
            enq += await wake(redis, rows)
            after = rows[-1].row.notification_id
            if len(rows) < page:
                break
        seen += visited
    if lanes is None or "bulk" in wanted:
        # A campaign whose fan-out stopped half way (its job lost with Redis, or its worker killed) is resumed.
        for campaign_id in await asyncio.to_thread(campaign_fan_out.unfinished):
            await enqueue_fan_out(redis, campaign_id)
    return seen, enq


def self_rung_lanes() -> set[str]:
    """The lanes whose drain loops are rung by the ledger's NOTIFY themselves (a batched lane of LISTEN_LANES)."""
    return {lane for lane in LISTEN_LANES if lane in get_settings().batched_lanes}


async def notified_lanes(conn: psycopg.AsyncConnection[TupleRow], timeout: float) -> set[str] | None:
    """Waits up to `timeout` for a NOTIFY; returns the lanes named by it and by every one already arrived (one
    scan serves a burst), `set()` if none came, None if one named no known lane (a full scan, to be safe)."""
    got: list[str] = []
    async for n in conn.notifies(timeout=timeout, stop_after=1):
        got.append(n.payload)
    if got:
        async for n in conn.notifies(timeout=0):  # drain what is already here, without waiting
            got.append(n.payload)
    lanes = set(got)
    return lanes if lanes <= set(LANES) else None


async def listen(database_url: str, backoff_cap: float = 2.0) -> psycopg.AsyncConnection[TupleRow]:
    """A LISTEN connection, retried with capped backoff for as long as PostgreSQL is down (a restart must not end
    the relay: it is the process that rebuilds every wake-up afterwards)."""
    delay = 0.1
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(libpq_url(database_url), autocommit=True, connect_timeout=5)
            await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            return conn
        except psycopg.Error as exc:
            log.warning("cannot listen (%s); retrying in %.1fs", type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(backoff_cap, delay * 2)


async def keep_partitions_ahead(ahead: int) -> None:
    """Next months' partitions, created ahead (several relays may race: a lost race is retried next hour, and a
    row of a month not created yet waits in the DEFAULT partition meanwhile, never refused)."""
    try:
        made = await asyncio.to_thread(ensure_partitions, ahead)
        if made:
            log.info("partitions created", extra={"partitions": ",".join(made)})
    except Exception as exc:
        log.warning("partitions not ensured (%s); retrying in an hour", type(exc).__name__)


async def keep_chart_points() -> None:
    """/ops' chart points kept as they finish (a chart's first load then finds them; each is computed once, when
    it reads only the rows that left the owed set since its end). Off the relay's loop: a first run on a large
    ledger computes every point of the last week once."""
    try:
        kept = await asyncio.to_thread(views.keep_finished_points)
        if kept:
            log.info("chart points kept", extra={"points": kept})
    except Exception as exc:
        log.warning("chart points not kept (%s); retrying in a minute", type(exc).__name__)


def retry_in(failures: int, interval: float) -> float:
    """Seconds before a failed scan is tried again: SCAN_RETRY_S, doubling with each failure in a row, at most the
    interval. The exponent is bounded: failures in a row keep counting through a long outage (one a scan, one a
    NOTIFY), and 2.0 ** 1025 raised OverflowError out of the relay's loop."""
    return min(interval, SCAN_RETRY_S * 2.0 ** min(max(0, failures - 1), 16))


async def run_relay(interval: float | None = None, once: bool = False) -> None:
    s = get_settings()
    interval = interval or s.scan_interval
    redis = await arq_pool()
    if once:
        seen, enq = await scan_once(redis)
        print(f"recovery scan owed_due={seen} enqueued={enq}")
        return
    conn = await listen(s.database_url)
    log.info("relay listening on %s, scan every %.1fs", NOTIFY_CHANNEL, interval)
    last_scan = 0.0
    last_partitions = -PARTITIONS_EVERY_S
    last_points, points_task = -CHART_POINTS_EVERY_S, None
    failures = 0  # scans failed in a row
    while True:
        if time.monotonic() - last_partitions >= PARTITIONS_EVERY_S:
            await keep_partitions_ahead(s.partitions_ahead)
            last_partitions = time.monotonic()
        if time.monotonic() - last_points >= CHART_POINTS_EVERY_S and (points_task is None or points_task.done()):
            points_task, last_points = asyncio.create_task(keep_chart_points()), time.monotonic()
        # A NOTIFY scans only the lanes it names: a one-time code's commit must not make the relay read and lock
        # the bulk lane's window (and check its wake-ups in Redis) while that code is being claimed. Every lane
        # is scanned at the interval, whatever the NOTIFYs (the full scan is the recovery path).
        lanes: set[str] | None = set()
        try:
            lanes = await notified_lanes(conn, max(0.0, interval - (time.monotonic() - last_scan)))
        except Exception as exc:  # PostgreSQL restarted or the connection dropped: listen again, then scan
            log.warning("listen failed (%s); reconnecting", type(exc).__name__)
            await conn.close()
            conn = await listen(s.database_url)
            lanes = None  # NOTIFYs sent while we were away are gone: the full scan below finds their rows
        if lanes:
            # A lane whose worker hears the same NOTIFY itself (jobs/wake.py LISTEN_LANES: the critical lane) is
            # left to it: this scan's FOR UPDATE SKIP LOCKED on the row just committed made the worker's claim,
            # begun in the same millisecond, skip that row and sleep until the next ring (a one-time code's wake-up
            # p99). Its rows are in every full scan, the recovery path, as before.
            lanes -= self_rung_lanes()
        full = lanes is None or time.monotonic() - last_scan >= interval
        if full or lanes:
            try:
                seen, enq = await scan_once(redis, lanes=None if full else lanes)
                if enq:
                    log.info("relay %s", "scan" if full else "wake", extra={"owed_due": seen, "enqueued": enq})
                failures = 0
            except Exception as exc:  # Redis down: keep going, the next scan catches up
                failures += 1
                log.warning("scan failed: %s: %s; again in %.1fs", type(exc).__name__, str(exc)[:200],
                            retry_in(failures, interval))
            if failures:
                # A failed scan (full or a NOTIFY's) is followed by a full one soon, not after a whole interval; a
                # Redis call is bounded (wakeups.arq_pool), so a Redis that stays away costs a few seconds a try.
                last_scan = time.monotonic() - interval + retry_in(failures, interval)
            elif full:
                last_scan = time.monotonic()
