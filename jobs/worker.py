"""Lane workers: `outbox worker --lane X` runs one arq worker for one lane's queue.

On a batched lane (`OUTBOX_BATCH_LANES`, every lane by default) the work is done by the drain loops the worker
starts beside arq (jobs/batches.py); arq then runs only the bulk lane's campaign fan-outs. On a lane delivered row
by row, one arq job per owed row: `deliver(notification_id, created_at)` (the row's month: its claim reads that
partition alone) — pace (bulk only), claim, send, record, each a call into the domain or jobs/attempt.py. Redis
only carries the wake-up; the row is the record of what is owed.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from datetime import UTC, datetime
from typing import Any, Final

import httpx
from arq import Retry
from arq.worker import func

from domain import faults, logs
from domain.campaigns import fan_out as campaign_fan_out
from domain.delivery import fair_plan, long_way, plan, ratelimit, retry, store, store_batch
from domain.delivery.queue import (
    DELIVER_TASK,
    FAN_OUT_TASK,
    RATE_KEY,
    TENANT_RATE_KEY,
    job_timeout_seconds,
    queue_name,
)
from domain.delivery.wakeups import redis_settings
from domain.settings import get_settings
from jobs import attempt, batches
from jobs.wake import LaneWorker

# A claim that matched nothing while its row is still claimable on a running lane is tried again at once, this many
# tries of the job at most (the lane was resumed between the claim and the check; anything else the scan settles).
UNCLAIMED_RETRIES: Final = 20
# CPU priority per lane (added niceness; 0 = the default): on a machine the lanes share, the scheduler gives a
# one-time code's worker the core before a campaign's (evidence/bench.md, lanes: a busy bulk worker at the same
# priority made a code wait for CPU). The worker's own PostgreSQL backends get the same priority when they run on
# this machine (domain/delivery/priority.py).
LANE_NICENESS: Final[dict[str, int]] = {"critical": 0, "high": 0, "normal": 5, "bulk": 10}
# Jobs at once per worker: bulk runs wider (its pace is the shared token bucket, not the worker); the other lanes
# stay responsive.
MAX_JOBS: Final[dict[str, int]] = {"bulk": 32}
MAX_JOBS_DEFAULT: Final = 10

log = logs.get_logger("outbox.worker")


async def deliver(ctx: dict[str, Any], notification_id: int, created_at: datetime | None = None) -> str:
    """One owed row by its id (and its month, `created_at`, when the wake-up carries it: the claim then reads that
    partition of the ledger alone; a job enqueued without it claims by id). Returns what became of it."""
    logs.bind_here(notification_id=notification_id, lane=ctx["lane"])  # this job's task only
    if ctx["lane"] == "bulk" and (not_now := await _pace(ctx, notification_id, created_at)):
        return not_now
    claim_started = time.monotonic()
    got = await store.claim(ctx["db"], notification_id, get_settings().lease_seconds, datetime.now(UTC),
                            ctx["worker_name"], created_at)
    if got is None:
        return await _unclaimed(ctx, notification_id)
    _bind(got)
    faults.hit("after_worker_claim")
    if isinstance(got, plan.Suppressed):  # settled at claim: suppressed, or FAILED with its attempts used up
        await attempt.refresh_views(ctx, got.claim)
        return "failed" if isinstance(got, plan.Exhausted) else "suppressed"
    if isinstance(got, plan.Deferred):
        raise Retry(defer=max(1.0, (got.until - datetime.now(UTC)).total_seconds()))
    faults.hit("before_remote_call")
    attempted = await attempt.send_ready(ctx, got, claim_started)
    if attempted is None:  # too little lease left, or its endpoint gone since the claim: the next claim settles it
        raise Retry(defer=0.05)
    return await _record(ctx, attempted)


async def _pace(ctx: dict[str, Any], notification_id: int, created_at: datetime | None) -> str | None:
    """A bulk row waits for its tenant's moment and its channel's token before it is claimed (no lease is held
    while it waits). Counted from its start until it passes the channel's bucket (jobs/wake.py `BeforeTheBucket`);
    a capped tenant's job sleeping for its own moment is not (it waits for its tenant, not for the lane). Returns
    why the job ends unclaimed ("not_owed", "paced"), or None: claim it now."""
    before = ctx.get("before_the_bucket")
    if before is not None:
        before.enter()
    try:
        route = await store.channel_of(ctx["db"], notification_id, created_at)
        if route is None:
            return "not_owed"
        if before is not None:
            before.leave()
        try:
            allowed = await take_tenant_token(ctx["redis"], route)
        finally:
            if before is not None:
                before.enter()
        if not allowed:
            return "paced"  # nothing claimed, nothing to fence: the row stays owed in PostgreSQL
        await take_bulk_token(ctx["redis"], route.channel, get_settings().bulk_rate_per_second)
        return None
    finally:
        if before is not None:
            before.leave()


async def _unclaimed(ctx: dict[str, Any], notification_id: int) -> str:
    """The claim matched nothing: a paused lane's row waits in the queue; one resumed since the claim is tried
    again at once; anything else (done, leased by another worker, not yet due) the relay's scan brings back."""
    paused, claimable = await store.unclaimed(ctx["db"], notification_id, ctx["lane"])
    if paused:
        raise Retry(defer=1.0)  # the row stays QUEUED; the card shows pending until resume
    if claimable and ctx.get("job_try", 1) < UNCLAIMED_RETRIES:
        raise Retry(defer=0.05)
    return "not_owed"


def _bind(got: plan.ClaimResult) -> None:
    claim = got.claim
    logs.bind_here(tenant=claim.tenant_id, event_id=str(claim.event_id) if claim.event_id else None,
                   attempt=claim.attempts, request_id=claim.envelope.request_id if claim.envelope else None,
                   channel=claim.channel)
    log.info("claimed", result=type(got).__name__.lower())


async def _record(ctx: dict[str, Any], attempted: store_batch.Attempted) -> str:
    """The attempt's outcome recorded under its claim's token; a retry goes back to arq with its backoff."""
    if attempted.status_code is not None and 200 <= attempted.status_code < 300:
        await attempt.armed_from_ops(ctx, "after_remote_accept_before_local_ack")
        faults.hit("after_remote_accept_before_local_ack")
    result = await store.record(ctx["db"], attempted.claim, attempted.decision, **attempted.kw(ctx["worker_name"]))
    log.info("attempt recorded", result=result, status_code=attempted.status_code, error_class=attempted.error,
             latency_ms=round(attempted.latency_ms, 1), retry_in=getattr(attempted.decision, "delay_seconds", None))
    faults.hit("after_local_ack")
    await attempt.refresh_views(ctx, attempted.claim)
    if isinstance(attempted.decision, retry.Retry) and result != "code_expired":  # a code's retry never outlives it
        raise Retry(defer=attempted.decision.delay_seconds)
    return result


async def take_tenant_token(redis: Any, route: long_way.BulkRoute) -> bool:
    """A capped tenant's moment (`OUTBOX_BULK_TENANT_RATE`, or the tenant's own rate), reserved and slept until;
    False: none near enough — the job ends unclaimed and the relay's next scan wakes the row again, in fair order
    (domain/delivery/fair_queue.py). Uncapped: True at once (the channel's bucket paces it, fair queueing orders it)."""
    settings = get_settings()
    rate = fair_plan.tenant_rate(settings.bulk_rate_per_second, settings.bulk_tenant_rate, route.tenant_rate)
    if rate >= settings.bulk_rate_per_second:
        return True
    wait = await ratelimit.reserve(redis, f"{TENANT_RATE_KEY}{route.tenant_id}", rate, fair_plan.reserve_ahead(rate))
    if wait < 0:
        return False
    await asyncio.sleep(wait)
    return True


# A token bucket per provider channel, shared by every bulk worker (domain/delivery/ratelimit.py). Taken BEFORE the
# claim: waiting for a token never holds a lease.
async def take_bulk_token(redis: Any, channel: str, rate: float) -> float:
    """Wait for one token of the channel's bulk bucket; returns the seconds waited."""
    waited = 0.0
    burst = max(1.0, rate / 10)  # a tenth of a second's worth: smooth, never a thundering start
    while True:
        wait = await ratelimit.take(redis, f"{RATE_KEY}:{channel}", rate, burst)
        if wait <= 0:
            return waited
        await asyncio.sleep(wait)
        waited += wait


async def fan_out_campaign(ctx: dict[str, Any], campaign_id: int) -> int:
    """Ledger a campaign's recipients in batches (bulk lane). Re-running it resumes where it stopped."""
    return await asyncio.to_thread(campaign_fan_out.fan_out, campaign_id)


def settings_for(lane: str) -> dict[str, Any]:
    async def startup(ctx: dict[str, Any]) -> None:
        ctx["lane"] = lane
        ctx["http"] = httpx.AsyncClient(timeout=attempt.HTTP_TIMEOUT, limits=attempt.HTTP_LIMITS)
        ctx["worker_name"] = f"{socket.gethostname()}:{os.getpid()}:{lane}"
        ctx["rng"] = random.Random()
        # The claim/record path's own pool, one per lane worker process (domain/delivery/store.py).
        # Its backends at the lane's CPU priority too, when PostgreSQL runs on this machine (LANE_NICENESS).
        # Through PgBouncer (OUTBOX_PGBOUNCER_URL): unprepared, its backends shared and never reniced.
        settings = get_settings()
        ctx["db"] = await store.open_pool(settings.pooled_database_url, f"outbox-worker-{lane}",
                                          niceness=LANE_NICENESS.get(lane, 0), prepared=not settings.pgbouncer_url)
        await batches.start_drains(ctx)  # a batched lane's resident loops (the arq worker runs beside them)

    async def shutdown(ctx: dict[str, Any]) -> None:
        await batches.stop_drains(ctx)
        await ctx["http"].aclose()
        await ctx["db"].close()

    return {
        "functions": [func(deliver, name=DELIVER_TASK)] + (
            [func(fan_out_campaign, name=FAN_OUT_TASK)] if lane == "bulk" else []),
        "queue_name": queue_name(lane),
        "redis_settings": redis_settings(),
        "on_startup": startup,
        "on_shutdown": shutdown,
        "max_jobs": MAX_JOBS.get(lane, MAX_JOBS_DEFAULT),
        "job_timeout": job_timeout_seconds(lane),
        "max_tries": 1_000_000,  # attempts are counted in PostgreSQL, not by arq
        "keep_result": 0,  # lets the relay re-enqueue the same job id once a job finished
        # An idle lane waits for a wake-up (jobs/wake.py); this poll only runs while due jobs it cannot start yet
        # sit in its queue.
        "poll_delay": 0.005 if lane == "critical" else 0.05,
        "handle_signals": True,
    }


def run_worker(lane: str, burst: bool = False) -> None:
    os.nice(LANE_NICENESS.get(lane, 0))
    worker = LaneWorker(lane, **settings_for(lane), burst=burst)  # woken by each enqueue, not by a tight poll
    worker.run()
