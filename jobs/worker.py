"""Lane workers: `outbox worker --lane X` runs one arq worker for one lane's queue.

The task is thin: claim (a lease in PostgreSQL), floor rules, send, classify (pure), record — each a domain call.
Redis only carries the wake-up `deliver(notification_id, created_at)` (the row's month: its claim reads that
partition alone); the row is the record of what is owed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import sys
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Final

import httpx
import psycopg
from arq import Retry
from arq.worker import func

from domain import faults, logs
from domain.campaigns import fan_out as campaign_fan_out
from domain.delivery import claims, fairshare, hot, ratelimit
from domain.delivery.claims import Claim, Ready
from domain.delivery.queue import (
    DELIVER_TASK,
    FAN_OUT_TASK,
    RATE_KEY,
    TENANT_RATE_KEY,
    job_timeout_seconds,
    queue_name,
)
from domain.delivery.retry import Outcome, decide_retry
from domain.delivery.retry import Retry as RetryDecision
from domain.delivery.signing import signed_headers
from domain.delivery.wakeups import publish_refresh, redis_settings
from domain.endpoints import store as endpoints
from domain.endpoints import urls
from domain.endpoints.signing import signed_headers_all
from domain.orders.envelope import canonical_json
from domain.settings import get_settings
from jobs.wake import Doorbell, LaneWorker

HTTP_TIMEOUT = httpx.Timeout(connect=2.0, read=5.0, write=5.0, pool=2.0)
# One attempt has one deadline, shorter than its lease: the attempt is recorded (as a timeout, under its own claim
# token) before another worker may claim the row. httpx's timeouts are per phase and would not bound it.
ATTEMPT_SHARE_OF_LEASE = 0.75


# Less than this share of the lease left after the claim (a slow claim: lock waits, a loaded machine): do not
# start a send that could only time out half-sent; give the attempt back and try again at once.
MIN_SEND_SHARE_OF_LEASE = 0.2
# A claim that matched nothing while its row is still claimable on a running lane is tried again at once, this many
# tries of the job at most (the lane was resumed between the claim and the check; anything else the scan settles).
UNCLAIMED_RETRIES = 20


def attempt_deadline(lease_seconds: float) -> float:
    """Seconds one send may take: a share of the lease, leaving the rest for the claim and the record."""
    return max(0.05, lease_seconds * ATTEMPT_SHARE_OF_LEASE)


async def take_tenant_token(redis: Any, route: claims.BulkRoute) -> bool:
    """A capped tenant's moment (`OUTBOX_BULK_TENANT_RATE`, or the tenant's own rate), reserved and slept until;
    False: none near enough — the job ends unclaimed and the relay's next scan wakes the row again, in fair order
    (domain/delivery/fair.py). Uncapped: True at once (the channel's bucket paces it, fair queueing orders it)."""
    s = get_settings()
    rate = fairshare.tenant_rate(s.bulk_rate_per_second, s.bulk_tenant_rate, route.tenant_rate)
    if rate >= s.bulk_rate_per_second:
        return True
    wait = await ratelimit.reserve(redis, f"{TENANT_RATE_KEY}{route.tenant_id}", rate, fairshare.reserve_ahead(rate))
    if wait < 0:
        return False
    await asyncio.sleep(wait)
    return True


# A token bucket per provider channel, shared by every bulk worker (domain/delivery/ratelimit.py). Taken BEFORE the claim:
# waiting for a token never holds a lease.
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


async def send(ctx: dict[str, Any], c: Claim, contact: str | None, text: str | None,
               deadline: float, target: endpoints.SendTarget | None = None) -> tuple[Outcome, str | None]:
    try:
        async with asyncio.timeout(deadline):
            if target is not None:
                return await _post_endpoint(ctx, c, target)
            return await _post(ctx, c, contact, text)
    except TimeoutError:  # the attempt's deadline (the receiver may have accepted it: the next claim asks again)
        return Outcome(None, error="timeout"), None


async def _post(ctx: dict[str, Any], c: Claim, contact: str | None, text: str | None) -> tuple[Outcome, str | None]:
    s = get_settings()
    client: httpx.AsyncClient = ctx["http"]
    try:
        if c.channel == "webhook":
            assert c.event_id is not None and c.envelope is not None
            body = canonical_json(c.envelope.wire()).decode()
            headers = signed_headers(s.webhook_secret, str(c.event_id), body)
            headers["Idempotency-Key"] = str(c.event_id)
            r = await client.post(f"{s.receiver_url}/webhooks/orders", content=body, headers=headers)
            data = _safe_json(r)
            return Outcome(r.status_code, body_status=data.get("status"), excerpt=r.text[:200]), data.get("result_ref")
        r = await client.post(f"{s.receiver_url}/providers/{c.channel}/messages", json={
            "to": contact, "template": c.template, "body": text, "idempotency_key": claims.idempotency_key(c),
        })
        data = _safe_json(r)
        return Outcome(r.status_code, body_status=data.get("status"), excerpt=r.text[:200]), data.get("reference")
    except httpx.TimeoutException:
        return Outcome(None, error="timeout"), None
    except httpx.TransportError:
        return Outcome(None, error="connection"), None


async def _post_endpoint(ctx: dict[str, Any], c: Claim, target: endpoints.SendTarget) -> tuple[Outcome, str | None]:
    """A tenant endpoint's webhook: its URL checked again after a fresh DNS lookup (a name re-pointed at an
    internal address is refused, and nothing is sent), then one POST to the very address checked, signed with
    every live secret of the endpoint. The event id stays the webhook-id: receivers deduplicate on it."""
    try:
        async with asyncio.timeout(DNS_DEADLINE_S):
            verdict = await _look_up(c.tenant_id, target.url)
    except TimeoutError:
        return Outcome(None, error="connection",
                       excerpt=f"the endpoint's name did not resolve within {DNS_DEADLINE_S:.0f} s"), None
    if isinstance(verdict, urls.Refused):
        return Outcome(None, error="url_not_allowed", excerpt=f"refused before sending: {verdict.reason}"), None
    assert c.event_id is not None and c.envelope is not None
    body = canonical_json(c.envelope.wire()).decode()
    headers = signed_headers_all(list(target.secrets), str(c.event_id), body)
    headers.update({"Idempotency-Key": str(c.event_id), "content-type": "application/json"})
    req = urls.pinned(target.url, verdict)
    if req.host:
        headers["Host"] = req.host
    client: httpx.AsyncClient = ctx["http"]
    try:  # the answer is read up to a bound: a tenant's endpoint must not fill a shared worker's memory
        async with client.stream("POST", req.url, content=body, headers=headers, follow_redirects=False,
                                 extensions={"sni_hostname": req.sni} if req.sni else None) as r:
            head = b""
            async for chunk in r.aiter_bytes():
                head += chunk
                if len(head) >= ENDPOINT_ANSWER_MAX:
                    break
    except httpx.TimeoutException:
        return Outcome(None, error="timeout"), None
    except httpx.TransportError as exc:  # what failed, kept as the excerpt: a TLS failure reads as one
        return Outcome(None, error="connection", excerpt=f"{type(exc).__name__}: {exc}"[:200]), None
    text = head[:ENDPOINT_ANSWER_MAX].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = {}
    data = parsed if isinstance(parsed, dict) else {}
    return Outcome(r.status_code, body_status=data.get("status"), excerpt=text[:200]), data.get("result_ref")


# Bytes of a tenant endpoint's answer read at most (its status, and a JSON answer's `status` if it is that short).
ENDPOINT_ANSWER_MAX: Final = 64 * 1024
# A tenant's endpoint is looked up in DNS on threads of its own, within a deadline: a resolver that hangs (a
# tenant's name served by a dead DNS server waits out the system's timeouts, 5 s × attempts × servers) must not
# take the default executor's few threads (min(32, cores + 4)), which every database call of this worker uses.
# A lookup past its deadline still holds its thread until the resolver gives up, so one tenant may hold at most
# DNS_PER_TENANT of the pool's threads (counting those): a tenant whose names hang waits behind its own lookups only,
# never fills the pool — else every other tenant's lookups queued behind its hung ones, ran out their deadline
# unstarted, and each counted as a failure of an innocent endpoint (its breaker opened, then auto-disable).
DNS_POOL: Final = ThreadPoolExecutor(max_workers=8, thread_name_prefix="endpoint-dns")
DNS_PER_TENANT: Final = 2
DNS_DEADLINE_S: Final = 5.0
_dns_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


async def _look_up(tenant_id: int, url: str) -> urls.Allowed | urls.Refused:
    """`urls.addresses_for_send` on DNS_POOL, once this tenant has a thread free (its gate is released when the
    lookup's thread is done, not when its caller gave up waiting)."""
    loop = asyncio.get_running_loop()
    gate = _dns_gates.setdefault(loop, {}).setdefault(tenant_id, asyncio.Semaphore(DNS_PER_TENANT))
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


def _safe_json(r: httpx.Response) -> dict[str, Any]:
    try:
        data = r.json()
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


async def armed_from_ops(ctx: dict[str, Any], point: str) -> None:
    """Development only: a one-shot fault armed on /ops ends this process at `point`, like OUTBOX_FAULT does."""
    if await faults.take_armed_crash(ctx["redis"], ctx["lane"], point):
        print(f"fault injected point={point} (armed from ops) pid={os.getpid()}", file=sys.stderr, flush=True)
        os._exit(faults.EXIT_CODE)


log = logs.get_logger("outbox.worker")


async def deliver(ctx: dict[str, Any], notification_id: int, created_at: datetime | None = None) -> str:
    """One owed row by its id (and its month, `created_at`, when the wake-up carries it: the claim then reads that
    partition of the ledger alone; a job enqueued without it claims by id)."""
    s = get_settings()
    lane: str = ctx["lane"]
    logs.bind_here(notification_id=notification_id, lane=lane)  # this job's task only
    if lane == "bulk":
        # Counted from its start until it passes the channel's bucket (jobs/wake.py `BeforeTheBucket`); a capped
        # tenant's job sleeping for its own moment is not (it waits for its tenant, not for the lane).
        before = ctx.get("before_the_bucket")
        if before is not None:
            before.enter()
        try:
            route = await hot.channel_of(ctx["db"], notification_id, created_at)
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
            await take_bulk_token(ctx["redis"], route.channel, s.bulk_rate_per_second)
        finally:
            if before is not None:
                before.leave()
    now = datetime.now(UTC)
    claim_started = time.monotonic()
    claimed = await hot.claim(ctx["db"], notification_id, s.lease_seconds, now, ctx["worker_name"], created_at)
    if claimed is None:
        paused, claimable = await hot.unclaimed(ctx["db"], notification_id, lane)
        if paused:
            raise Retry(defer=1.0)  # the row stays QUEUED; the card shows pending until resume
        if claimable and ctx.get("job_try", 1) < UNCLAIMED_RETRIES:
            # Paused at the claim, resumed since (a job ending here would leave the row to the relay's next scan).
            raise Retry(defer=0.05)
        return "not_owed"  # already done, leased by another worker, or not yet due: the scan will bring it back
    c = claimed.claim
    logs.bind_here(tenant=c.tenant_id, event_id=str(c.event_id) if c.event_id else None, attempt=c.attempts,
                   request_id=c.envelope.request_id if c.envelope else None, channel=c.channel)
    log.info("claimed", result=type(claimed).__name__.lower())
    faults.hit("after_worker_claim")
    if isinstance(claimed, claims.Suppressed):  # settled at claim: suppressed, or FAILED with its attempts used up
        await _refresh(ctx, c)
        return "failed" if isinstance(claimed, claims.Exhausted) else "suppressed"
    if isinstance(claimed, claims.Deferred):
        raise Retry(defer=max(1.0, (claimed.until - now).total_seconds()))
    faults.hit("before_remote_call")
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    deadline = attempt_deadline(s.lease_seconds) - (time.monotonic() - claim_started)
    if deadline < s.lease_seconds * MIN_SEND_SHARE_OF_LEASE:
        await asyncio.to_thread(claims.give_back, c)
        raise Retry(defer=0.05)
    target = None
    if c.endpoint_id is not None:  # read now, never carried in the job: the URL and the live secrets
        target = await asyncio.to_thread(endpoints.send_target, c.tenant_id, c.endpoint_id)
        if target is None:  # disabled or deleted since the claim: the next claim settles it with that reason
            await asyncio.to_thread(claims.give_back, c)
            raise Retry(defer=0.05)
    outcome, ref = await send(ctx, c, claimed.contact, claimed.body, deadline, target)
    latency_ms = (time.perf_counter() - t0) * 1000
    if outcome.status_code is not None and 200 <= outcome.status_code < 300:
        await armed_from_ops(ctx, "after_remote_accept_before_local_ack")
        faults.hit("after_remote_accept_before_local_ack")
    decision = decide_retry(outcome, c.attempts, c.max_attempts, s.backoff_base, s.backoff_cap, ctx["rng"])
    result = await hot.record(
        ctx["db"], c, decision, worker=ctx["worker_name"], started=started,
        status_code=outcome.status_code, latency_ms=latency_ms, provider_reference=ref, excerpt=outcome.excerpt)
    log.info("attempt recorded", result=result, status_code=outcome.status_code, error_class=outcome.error,
             latency_ms=round(latency_ms, 1), retry_in=getattr(decision, "delay_seconds", None))
    faults.hit("after_local_ack")
    await _refresh(ctx, c)
    if isinstance(decision, RetryDecision) and result != "code_expired":  # a code's retry never outlives it
        raise Retry(defer=decision.delay_seconds)
    return result


# ---- batched lanes (OUTBOX_BATCH_LANES): resident drain loops ---------------------------------------------------
# Sends in flight at once per tenant endpoint, and per (tenant, channel) towards the system's receiver/providers:
# one tenant's slow endpoint holds a few of a batch's sends, never the worker's whole client.
SENDS_PER_ENDPOINT: Final = 4
SENDS_PER_TENANT_CHANNEL: Final = 16
HTTP_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0)


def _gate(ctx: dict[str, Any], c: Claim) -> asyncio.Semaphore:
    gates: dict[tuple[int, str], asyncio.Semaphore] = ctx.setdefault("send_gates", {})
    key = (c.tenant_id, f"endpoint:{c.endpoint_id}" if c.endpoint_id is not None else c.channel)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = asyncio.Semaphore(
            SENDS_PER_ENDPOINT if c.endpoint_id is not None else SENDS_PER_TENANT_CHANNEL)
    return gate


async def _send_one(ctx: dict[str, Any], r: Ready, claim_started: float,
                    not_before: float | None = None) -> hot.Attempted | None:
    """One row of a batch: sent within what is left of its attempt's deadline (counted from the batch's claim),
    or given back (None) when too little is left, or its tenant endpoint is gone since the claim. `not_before`: a
    capped tenant's bulk row waits for the moment reserved for it (a monotonic time, a fraction of a second away)."""
    s = get_settings()
    c = r.claim
    if not_before is not None and (wait := not_before - time.monotonic()) > 0:
        await asyncio.sleep(wait)
    target = None
    if c.endpoint_id is not None:  # read now, never carried anywhere: the URL and the live secrets
        target = await asyncio.to_thread(endpoints.send_target, c.tenant_id, c.endpoint_id)
    if c.endpoint_id is None or target is not None:
        async with _gate(ctx, c):
            deadline = attempt_deadline(s.lease_seconds) - (time.monotonic() - claim_started)
            if deadline >= s.lease_seconds * MIN_SEND_SHARE_OF_LEASE:
                started = datetime.now(UTC)
                t0 = time.perf_counter()
                outcome, ref = await send(ctx, c, r.contact, r.body, deadline, target)
                latency_ms = (time.perf_counter() - t0) * 1000
                decision = decide_retry(outcome, c.attempts, c.max_attempts, s.backoff_base, s.backoff_cap,
                                        ctx["rng"])
                log.debug("attempted", notification_id=c.id, status_code=outcome.status_code,
                          error_class=outcome.error, latency_ms=round(latency_ms, 1))
                return hot.Attempted(c, decision, started, outcome.status_code, latency_ms, ref, outcome.excerpt)
    # Not sent: the attempt is given back and the row is owed again at once (the loop claims it next).
    await asyncio.to_thread(claims.give_back, c)
    return None


# Once a batch's first send has its answer, the others answered within this window are recorded with it; a send
# still out after it (a slow endpoint, a provider's timeout) is recorded in a later group: it never holds the
# batch's answered rows (their latency, their leases) until the slowest answer or timeout.
RECORD_WINDOW_S: Final = 0.005
# An idle loop's shortest sleep before it claims a row that came due (a due row a claim skipped, locked by
# another, must not make it spin).
NEXT_DUE_FLOOR_S: Final = 0.01


# The bulk lane's window is wider: its commits are what a one-time code's commit queues behind (WAL flushes), and a
# campaign's rows have no one waiting on their latency — a batch's answers recorded in one or two statements, not
# one per 5 ms of answers.
BULK_RECORD_WINDOW_S: Final = 0.1


async def _as_answered(sends: Iterable[Awaitable[hot.Attempted | None]],
                       window: float = RECORD_WINDOW_S) -> AsyncGenerator[list[hot.Attempted], None]:
    """The sends' attempts in groups, as they are answered: each group is what answered within `window` of
    the group's first answer (given-back rows, None, are left out)."""
    pending = {asyncio.ensure_future(s) for s in sends}
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                more, pending = await asyncio.wait(pending, timeout=window)
                done |= more
            group = [a for a in (t.result() for t in done) if a is not None]
            if group:
                yield group
    finally:
        for t in pending:  # the caller stopped early (an error recording): the rest's leases run out
            t.cancel()


async def deliver_batch(ctx: dict[str, Any], size: int) -> int:
    """One batch of a batched lane: claim up to `size` due rows (one statement, one commit), settle the uncommon
    ones the long way, send the rest concurrently, record every outcome (one statement per kind, one commit).
    Returns the rows claimed (0: nothing due). The fault points come in the per-row path's order, per batch."""
    s = get_settings()
    lane: str = ctx["lane"]
    if lane == "bulk":
        return await deliver_bulk_batch(ctx, size)
    now = datetime.now(UTC)
    claim_started = time.monotonic()
    batch = await hot.claim_batch(ctx["db"], lane, size, s.lease_seconds, now)
    if not len(batch):
        return 0
    return await _run_batch(ctx, batch, now, claim_started)


async def _run_batch(ctx: dict[str, Any], batch: hot.Batch, now: datetime, claim_started: float,
                     not_before: dict[int, float] | None = None, window: float = RECORD_WINDOW_S) -> int:
    """A claimed batch, from the claim's commit to its records: the long way's rows settled, the rest sent and
    recorded in groups as they are answered."""
    lane: str = ctx["lane"]
    worker: str = ctx["worker_name"]
    not_before = not_before or {}
    bell: Doorbell | None = ctx.get("batch_wake")
    if bell is not None:  # a wake-up naming only these rows, arriving late, rings no claim (jobs/wake.py)
        bell.note_claimed([r.claim.id for r in batch.ready] + [c.id for c, _, _ in batch.long_way])
    faults.hit("after_worker_claim")
    ready = list(batch.ready)
    settled: list[Claim] = []
    for c, x, refused in batch.long_way:  # each fenced by its claim's token, in a transaction of its own
        got = await asyncio.to_thread(claims.settle_claimed, c, x, now, worker, refused)
        if isinstance(got, Ready):
            ready.append(got)
        elif isinstance(got, claims.Suppressed):
            settled.append(got.claim)
        # Deferred: its next_attempt_at says when; a drain loop claims it then.
    faults.hit("before_remote_call")
    attempted: list[hot.Attempted] = []
    outcomes: dict[int, str] = {}
    # aclosing: an error recording one group closes the generator here, at once, so its unanswered sends are
    # cancelled now (their leases run out) rather than whenever the generator is collected.
    sends = (_send_one(ctx, r, claim_started, not_before.get(r.claim.id)) for r in ready)
    async with contextlib.aclosing(_as_answered(sends, window)) as answered:
        async for group in answered:
            if any(a.status_code is not None and 200 <= a.status_code < 300 for a in group):
                await armed_from_ops(ctx, "after_remote_accept_before_local_ack")
                faults.hit("after_remote_accept_before_local_ack")
            outcomes.update(await hot.record_batch(ctx["db"], group, worker))
            faults.hit("after_local_ack")
            attempted += group
    await asyncio.gather(*[_refresh(ctx, c) for c in settled + [a.claim for a in attempted]])
    counts: dict[str, int] = {}
    for result in outcomes.values():
        counts[result] = counts.get(result, 0) + 1
    # One line per batch; it names every row and event it recorded, so `grep <event id>` still finds the worker.
    log.info("batch recorded", lane=lane, claimed=len(batch), long_way=len(batch.long_way),
             settled_at_claim=len(settled), given_back=len(ready) - len(attempted),
             ms=round((time.monotonic() - claim_started) * 1000, 1),
             notification_ids=sorted(outcomes), tenants=sorted({a.claim.tenant_id for a in attempted}),
             event_ids=[str(a.claim.event_id) for a in attempted if a.claim.event_id is not None], **counts)
    for nid, result in outcomes.items():
        log.debug("attempt recorded", notification_id=nid, result=result)
    return len(batch)


# ---- the bulk lane in batches: the bucket's tokens and the fair share taken per batch, not per row ---------------
# The channels a tenant's one-by-one bulk messages (campaign 0) may be on; a campaign's flow is on its own channel.
BULK_CHANNELS: Final = ("email", "sms", "whatsapp", "webhook")
# How far ahead a capped tenant's moments are reserved for a batch (its rows wait for them, leased, this long at most).
BULK_CAP_AHEAD_S: Final = 0.25


def bulk_burst(rate: float) -> float:
    """A channel bucket's burst: a tenth of a second's worth (as `take_bulk_token`)."""
    return max(1.0, rate / 10)


async def deliver_bulk_batch(ctx: dict[str, Any], size: int) -> int:
    """One batch of the bulk lane. Its size is taken from the buckets: up to `size` tokens of each channel that
    owes (one Redis call), up to `size` moments of each capped tenant (`ratelimit.reserve_many`), then ONE claim
    (`hot.claim_bulk_batch`) of no more rows of a channel than its tokens, nor of a tenant than its moments, shared
    fairly between the lane's flows; what the claim did not use goes back to the buckets. No token, no claim: the
    loop sleeps until the next one (no lease is held while waiting). Returns the rows claimed (0: nothing due)."""
    s = get_settings()
    pool, redis, stop = ctx["db"], ctx["redis"], ctx["batch_stop"]
    rate = s.bulk_rate_per_second
    while not stop.is_set():
        flows = await hot.bulk_flows(pool)
        if not flows:
            return 0
        rates = {f.tenant_id: fairshare.tenant_rate(rate, s.bulk_tenant_rate, f.tenant_rate) for f in flows}
        moments: dict[int, list[float]] = {}
        for t, t_rate in sorted(rates.items()):
            if t_rate < rate:  # a capped tenant: its rows in this batch no more than its moments reserved
                moments[t] = await ratelimit.reserve_many(redis, f"{TENANT_RATE_KEY}{t}", t_rate,
                                                          min(BULK_CAP_AHEAD_S, fairshare.reserve_ahead(t_rate)), size)
        if len(moments) == len(rates) and not any(moments.values()):  # only capped tenants owe, none's moment is near
            await asyncio.sleep(min(1.0 / r for r in rates.values()) / 2)
            continue
        channels = sorted({ch for f in flows for ch in ((f.channel,) if f.channel else BULK_CHANNELS)})
        keys = {ch: f"{RATE_KEY}:{ch}" for ch in channels}
        taken = dict(zip(channels, await ratelimit.take_many(redis, list(keys.values()), rate, bulk_burst(rate),
                                                             size), strict=True))
        quotas = {ch: n for ch, (n, _) in taken.items()}
        if not any(quotas.values()):  # no token: the moments go back, and the loop waits for the next token
            for t, waits in moments.items():
                await ratelimit.unreserve(redis, f"{TENANT_RATE_KEY}{t}", rates[t], len(waits))
            await asyncio.sleep(min(w for _, w in taken.values()))
            continue
        now = datetime.now(UTC)
        claim_started = time.monotonic()
        batch = hot.Batch()
        try:
            batch = await hot.claim_bulk_batch(pool, flows, size, quotas, {t: len(m) for t, m in moments.items()},
                                               s.lease_seconds, now)
        finally:  # what the claim did not use goes back (all of it when the claim failed: its leases run out)
            claimed = [r.claim for r in batch.ready] + [c for c, _, _ in batch.long_way]
            used: dict[str, int] = {}
            for c in claimed:
                used[c.channel] = used.get(c.channel, 0) + 1
            await ratelimit.refund(redis, {keys[ch]: n - used.get(ch, 0) for ch, n in quotas.items()},
                                   bulk_burst(rate))
            not_before: dict[int, float] = {}
            for t, waits in moments.items():
                mine = sorted(c.id for c in claimed if c.tenant_id == t)
                not_before.update((i, claim_started + w) for i, w in zip(mine, waits, strict=False))
                await ratelimit.unreserve(redis, f"{TENANT_RATE_KEY}{t}", rates[t], len(waits) - len(mine))
        if not len(batch):
            short = [w for n, w in taken.values() if n == 0]
            if short:  # a channel without a token may owe the due rows: try again once it has one
                await asyncio.sleep(min(short))
                continue
            return 0
        await _run_batch(ctx, batch, now, claim_started, not_before, BULK_RECORD_WINDOW_S)
        return len(batch)
    return 0


async def drain(ctx: dict[str, Any], index: int) -> None:
    """A resident drain loop of a batched lane (K of them per lane worker, `Settings.batch_shape`).

    Each turn clears the lane's wake event BEFORE it claims. Why nothing owed is ever slept through: a row is
    published (`wakeups.wake_lanes`) only after the transaction that made it owed committed — and on the critical
    lane that transaction's NOTIFY, read by the worker itself (jobs/wake.py `_listen_pg`), is delivered only once it
    committed — and the event is set when that publish or NOTIFY arrives. Either the set came before this loop's clear — then the claim that follows the
    clear starts after the commit and sees the row (or another loop's claim took it) — or it comes after the
    clear, and the event stays set, so the wait below returns at once and the loop claims again. A publish lost
    altogether (Redis away) costs loop 0's idle poll (`OUTBOX_BATCH_IDLE_POLL`) or the relay's next scan, which
    publishes again.
    A full batch sets the event itself: the lane's other loops join in while more may be due.
    Retries need no wake-up: RECORD_RETRY sets next_attempt_at, and loop 0's poll claims the row once it is due.
    A paused lane: the claim's guard skips its rows; the loop just waits."""
    s = get_settings()
    size, _ = s.batch_shape(ctx["lane"])
    wake: Doorbell = ctx["batch_wake"]
    stop: asyncio.Event = ctx["batch_stop"]
    poll = s.batch_idle_poll if index == 0 and s.batch_idle_poll > 0 else None
    failures = 0
    worked = False  # the last turns claimed something: a retry this loop recorded may come due before any ring
    while not stop.is_set():
        wake.clear()
        try:
            got = await deliver_batch(ctx, size)
            failures = 0
        except asyncio.CancelledError:
            raise
        except Exception:  # the database away, a bug in one batch: its leases run out; the loop goes on
            failures += 1
            log.exception("batch failed", lane=ctx["lane"], loop=index)
            await asyncio.sleep(min(1.0, 0.05 * 2 ** min(failures, 5)))
            continue
        if got:
            worked = True
            if got >= size:
                wake.set()
            continue
        timeout, worked = await _idle_wait(ctx, poll, worked), False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()


async def _idle_wait(ctx: dict[str, Any], poll: float | None, after_work: bool = False) -> float | None:
    """How long an idle drain loop waits for a wake-up: loop 0 (the one with a poll) until the lane's next row
    comes due — a retry after its backoff, a lease that ran out — or its poll, whichever is first; another loop
    until woken, except just after it worked (`after_work`): then until the next row comes due too, once. Nothing
    is published when a retry comes due: a retry recorded by another loop than loop 0, while loop 0 slept on a
    wait it had computed before the retry existed, waited out loop 0's whole poll (a 30 s poll failed
    `test_a_retry_is_claimed_when_its_backoff_ends_not_at_the_next_idle_poll`)."""
    if poll is None and not after_work:
        return None
    try:
        due_in = await hot.next_due_in(ctx["db"], ctx["lane"])
    except psycopg.Error:
        return poll
    if due_in is None:
        return poll
    due = max(NEXT_DUE_FLOOR_S, due_in)
    return due if poll is None else min(poll, due)


async def _start_drains(ctx: dict[str, Any]) -> None:
    lane: str = ctx["lane"]
    if lane not in get_settings().batched_lanes:
        return
    ctx.setdefault("batch_wake", Doorbell())
    ctx["batch_stop"] = asyncio.Event()
    _, loops = get_settings().batch_shape(lane)
    ctx["drains"] = [asyncio.create_task(drain(ctx, i), name=f"drain-{lane}-{i}") for i in range(loops)]
    log.info("drain loops started", lane=lane, loops=loops, batch=get_settings().batch_shape(lane)[0])


async def _stop_drains(ctx: dict[str, Any]) -> None:
    """Stop cleanly: each loop finishes the batch it holds (up to a lease), then ends; what is still running
    after that is cancelled (its rows' leases run out, like a killed worker's)."""
    tasks: list[asyncio.Task[None]] = ctx.pop("drains", [])
    if not tasks:
        return
    ctx["batch_stop"].set()
    ctx["batch_wake"].ring_all()
    _, pending = await asyncio.wait(tasks, timeout=min(get_settings().lease_seconds, 10.0))
    for t in pending:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def _refresh(ctx: dict[str, Any], c: Claim) -> None:
    if c.order_id is None:
        return
    try:
        await publish_refresh(ctx["redis"], c.tenant_id, c.order_id, -1, str(c.event_id), kind="notification")
    except Exception:  # transient by design
        pass


async def fan_out_campaign(ctx: dict[str, Any], campaign_id: int) -> int:
    """Ledger a campaign's recipients in batches (bulk lane). Re-running it resumes where it stopped."""
    return await asyncio.to_thread(campaign_fan_out.fan_out, campaign_id)


def settings_for(lane: str) -> dict[str, Any]:
    async def startup(ctx: dict[str, Any]) -> None:
        ctx["lane"] = lane
        ctx["http"] = httpx.AsyncClient(timeout=HTTP_TIMEOUT, limits=HTTP_LIMITS)
        ctx["worker_name"] = f"{socket.gethostname()}:{os.getpid()}:{lane}"
        ctx["rng"] = random.Random()
        # The claim/record path's own pool, one per lane worker process (domain/delivery/hot.py).
        # Its backends at the lane's CPU priority too, when PostgreSQL runs on this machine (LANE_NICENESS).
        # Through PgBouncer (OUTBOX_PGBOUNCER_URL): unprepared, its backends shared and never reniced.
        s = get_settings()
        ctx["db"] = await hot.open_pool(s.pooled_database_url, f"outbox-worker-{lane}",
                                        niceness=LANE_NICENESS.get(lane, 0), prepared=not s.pgbouncer_url)
        await _start_drains(ctx)  # a batched lane's resident loops (the arq worker runs beside them)

    async def shutdown(ctx: dict[str, Any]) -> None:
        await _stop_drains(ctx)
        await ctx["http"].aclose()
        await ctx["db"].close()

    return {
        "functions": [func(deliver, name=DELIVER_TASK)] + (
            [func(fan_out_campaign, name=FAN_OUT_TASK)] if lane == "bulk" else []),
        "queue_name": queue_name(lane),
        "redis_settings": redis_settings(),
        "on_startup": startup,
        "on_shutdown": shutdown,
        # Bulk runs wider (its pace is the shared token bucket, not the worker); the other lanes stay responsive.
        "max_jobs": 10 if lane != "bulk" else 32,
        "job_timeout": job_timeout_seconds(lane),
        "max_tries": 1_000_000,  # attempts are counted in PostgreSQL, not by arq
        "keep_result": 0,  # lets the relay re-enqueue the same job id once a job finished
        # An idle lane waits for a wake-up (jobs/wake.py); this poll only runs while due jobs it cannot start yet
        # sit in its queue.
        "poll_delay": 0.005 if lane == "critical" else 0.05,
        "handle_signals": True,
    }


# CPU priority per lane (added niceness; 0 = the default): on a machine the lanes share, the scheduler gives a
# one-time code's worker the core before a campaign's. Without it a 40k campaign's bulk worker, busy every
# millisecond, made a code wait for CPU: its p99 rose from 56 ms idle to 147 ms (evidence/bench.md, lanes). The
# worker's own PostgreSQL backends get the same priority when they run on this machine (domain/delivery/priority.py).
LANE_NICENESS: Final[dict[str, int]] = {"critical": 0, "high": 0, "normal": 5, "bulk": 10}


def run_worker(lane: str, burst: bool = False) -> None:
    os.nice(LANE_NICENESS.get(lane, 0))
    w = LaneWorker(lane, **settings_for(lane), burst=burst)  # woken by each enqueue, not by a tight poll
    w.run()
