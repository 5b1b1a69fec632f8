"""A batched lane's worker (`OUTBOX_BATCH_LANES`): resident drain loops beside the arq worker, each claiming up to
N due rows of its lane in one statement, sending them concurrently and recording their outcomes in groups as they
are answered (domain/delivery/store_batch.py holds the statements' store; jobs/attempt.py makes each row's attempt).

A loop's turn: `drain` clears the lane's doorbell and calls `deliver_batch` — `claim_batch` (or, on the bulk lane,
`deliver_bulk_batch`: the buckets' tokens and the fair share taken first), then `_run_batch`: the long way for the
rows the claim could not settle, every other row sent (`_send_one`), and each group of answers recorded in one
transaction. Nothing due: the loop sleeps on the doorbell (jobs/wake.py `Doorbell`) until a wake-up, or the lane's
next due row.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Iterable
from datetime import UTC, datetime
from typing import Any, Final

import psycopg

from domain import faults, logs
from domain.delivery import fair_plan, plan, ratelimit, store, store_batch
from domain.delivery.plan import Claim, Ready
from domain.delivery.queue import RATE_KEY, TENANT_RATE_KEY
from domain.settings import get_settings
from jobs import attempt
from jobs.wake import Doorbell

log = logs.get_logger("outbox.worker")

# Sends in flight at once per tenant endpoint, and per (tenant, channel) towards the system's receiver/providers:
# one tenant's slow endpoint holds a few of a batch's sends, never the worker's whole client.
SENDS_PER_ENDPOINT: Final = 4
SENDS_PER_TENANT_CHANNEL: Final = 16


def _gate(ctx: dict[str, Any], claim: Claim) -> asyncio.Semaphore:
    gates: dict[tuple[int, str], asyncio.Semaphore] = ctx.setdefault("send_gates", {})
    key = (claim.tenant_id, f"endpoint:{claim.endpoint_id}" if claim.endpoint_id is not None else claim.channel)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = asyncio.Semaphore(
            SENDS_PER_ENDPOINT if claim.endpoint_id is not None else SENDS_PER_TENANT_CHANNEL)
    return gate


async def _send_one(ctx: dict[str, Any], ready: Ready, claim_started: float,
                    not_before: float | None = None) -> store_batch.Attempted | None:
    """One row of a batch (`attempt.send_ready`, in its turn among the sends to its tenant's endpoint or channel);
    None: given back. `not_before`: a capped tenant's bulk row waits for the moment reserved for it (a monotonic
    time, a fraction of a second away)."""
    if not_before is not None and (wait := not_before - time.monotonic()) > 0:
        await asyncio.sleep(wait)
    got = await attempt.send_ready(ctx, ready, claim_started, _gate(ctx, ready.claim))
    if got is not None:
        log.debug("attempted", notification_id=ready.claim.id, status_code=got.status_code, error_class=got.error,
                  latency_ms=round(got.latency_ms, 1))
    return got


# Once a batch's first send has its answer, the others answered within this window are recorded with it; a send
# still out after it (a slow endpoint, a provider's timeout) is recorded in a later group: it never holds the
# batch's answered rows (their latency, their leases) until the slowest answer or timeout.
RECORD_WINDOW_S: Final = 0.005
# An idle loop's shortest sleep before it claims a row that came due (a due row a claim skipped, locked by
# another, must not make it spin).
NEXT_DUE_FLOOR_S: Final = 0.01
# A loop that just worked and could not read when the lane's next row comes due reads again this soon.
NEXT_DUE_RETRY_S: Final = 0.1


# The bulk lane's window is wider: its commits are what a one-time code's commit queues behind (WAL flushes), and a
# campaign's rows have no one waiting on their latency — a batch's answers recorded in one or two statements, not
# one per 5 ms of answers.
BULK_RECORD_WINDOW_S: Final = 0.1


async def _as_answered(sends: Iterable[Awaitable[store_batch.Attempted | None]],
                       window: float = RECORD_WINDOW_S) -> AsyncGenerator[list[store_batch.Attempted], None]:
    """The sends' attempts in groups, as they are answered: each group is what answered within `window` of
    the group's first answer (given-back rows, None, are left out)."""
    pending = {asyncio.ensure_future(send) for send in sends}
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
        for task in pending:  # the caller stopped early (an error recording): the rest's leases run out
            task.cancel()


async def deliver_batch(ctx: dict[str, Any], size: int) -> int:
    """One batch of a batched lane: claim up to `size` due rows (one statement, one commit), settle the uncommon
    ones the long way, send the rest concurrently, record every outcome (one statement per kind, one commit).
    Returns the rows claimed (0: nothing due). The fault points come in the per-row path's order, per batch."""
    settings = get_settings()
    lane: str = ctx["lane"]
    if lane == "bulk":
        return await deliver_bulk_batch(ctx, size)
    now = datetime.now(UTC)
    claim_started = time.monotonic()
    batch = await store_batch.claim_batch(ctx["db"], lane, size, settings.lease_seconds, now, ctx["worker_name"])
    if not len(batch):
        return 0
    return await _run_batch(ctx, batch, claim_started)


async def _run_batch(ctx: dict[str, Any], batch: store_batch.Batch, claim_started: float,
                     not_before: dict[int, float] | None = None, window: float = RECORD_WINDOW_S) -> int:
    """A claimed batch, from the claim's commit to its records (the rows the long way settled unsent at the claim
    left as they are): the rest sent and recorded in groups as they are answered."""
    lane: str = ctx["lane"]
    worker: str = ctx["worker_name"]
    not_before = not_before or {}
    bell: Doorbell | None = ctx.get("batch_wake")
    if bell is not None:  # a wake-up naming only these rows, arriving late, rings no claim (jobs/wake.py)
        bell.note_claimed([c.id for c in batch.claims()])
    faults.hit("after_worker_claim")
    ready = list(batch.ready)
    # Deferred: its next_attempt_at says when; a drain loop claims it then.
    settled = [r.claim for r in batch.settled if isinstance(r, plan.Suppressed)]
    faults.hit("before_remote_call")
    attempted: list[store_batch.Attempted] = []
    outcomes: dict[int, str] = {}
    # aclosing: an error recording one group closes the generator here, at once, so its unanswered sends are
    # cancelled now (their leases run out) rather than whenever the generator is collected.
    sends = (_send_one(ctx, r, claim_started, not_before.get(r.claim.id)) for r in ready)
    async with contextlib.aclosing(_as_answered(sends, window)) as answered:
        async for group in answered:
            if any(a.status_code is not None and 200 <= a.status_code < 300 for a in group):
                await attempt.armed_from_ops(ctx, "after_remote_accept_before_local_ack")
                faults.hit("after_remote_accept_before_local_ack")
            outcomes.update(await store_batch.record_batch(ctx["db"], group, worker))
            faults.hit("after_local_ack")
            attempted += group
    await asyncio.gather(*[attempt.refresh_views(ctx, c) for c in settled + [a.claim for a in attempted]])
    counts: dict[str, int] = {}
    for result in outcomes.values():
        counts[result] = counts.get(result, 0) + 1
    # One line per batch; it names every row and event it recorded, so `grep <event id>` still finds the worker.
    log.info("batch recorded", lane=lane, claimed=len(batch), long_way=batch.long_way,
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
    (`store_batch.claim_bulk_batch`) of no more rows of a channel than its tokens, nor of a tenant than its moments,
    shared fairly between the lane's flows; what the claim did not use goes back to the buckets. No token, no claim: the
    loop sleeps until the next one (no lease is held while waiting). Returns the rows claimed (0: nothing due)."""
    settings = get_settings()
    pool, redis, stop = ctx["db"], ctx["redis"], ctx["batch_stop"]
    rate = settings.bulk_rate_per_second
    while not stop.is_set():
        flows = await store_batch.bulk_flows(pool)
        if not flows:
            return 0
        rates = {f.tenant_id: fair_plan.tenant_rate(rate, settings.bulk_tenant_rate, f.tenant_rate) for f in flows}
        moments: dict[int, list[float]] = {}
        for tenant_id, tenant_rate in sorted(rates.items()):
            if tenant_rate < rate:  # a capped tenant: its rows in this batch no more than its moments reserved
                moments[tenant_id] = await ratelimit.reserve_many(
                    redis, f"{TENANT_RATE_KEY}{tenant_id}", tenant_rate,
                    min(BULK_CAP_AHEAD_S, fair_plan.reserve_ahead(tenant_rate)), size)
        if len(moments) == len(rates) and not any(moments.values()):  # only capped tenants owe, none's moment is near
            await asyncio.sleep(min(1.0 / r for r in rates.values()) / 2)
            continue
        channels = sorted({ch for f in flows for ch in ((f.channel,) if f.channel else BULK_CHANNELS)})
        keys = {ch: f"{RATE_KEY}:{ch}" for ch in channels}
        taken = dict(zip(channels, await ratelimit.take_many(redis, list(keys.values()), rate, bulk_burst(rate),
                                                             size), strict=True))
        quotas = {ch: n for ch, (n, _) in taken.items()}
        if not any(quotas.values()):  # no token: the moments go back, and the loop waits for the next token
            for tenant_id, waits in moments.items():
                await ratelimit.unreserve(redis, f"{TENANT_RATE_KEY}{tenant_id}", rates[tenant_id], len(waits))
            await asyncio.sleep(min(w for _, w in taken.values()))
            continue
        now = datetime.now(UTC)
        claim_started = time.monotonic()
        batch = store_batch.Batch()
        try:
            capped = {t: len(m) for t, m in moments.items()}
            batch = await store_batch.claim_bulk_batch(pool, flows, size, quotas, capped, settings.lease_seconds, now,
                                                       ctx["worker_name"])
        finally:  # what the claim did not use goes back (all of it when the claim failed: its leases run out)
            claimed_rows = batch.claims()
            used: dict[str, int] = {}
            for claim in claimed_rows:
                used[claim.channel] = used.get(claim.channel, 0) + 1
            await ratelimit.refund(redis, {keys[ch]: n - used.get(ch, 0) for ch, n in quotas.items()},
                                   bulk_burst(rate))
            not_before: dict[int, float] = {}
            for tenant_id, waits in moments.items():
                mine = sorted(c.id for c in claimed_rows if c.tenant_id == tenant_id)
                not_before.update((i, claim_started + w) for i, w in zip(mine, waits, strict=False))
                await ratelimit.unreserve(redis, f"{TENANT_RATE_KEY}{tenant_id}", rates[tenant_id],
                                          len(waits) - len(mine))
        if not len(batch):
            short = [w for n, w in taken.values() if n == 0]
            if short:  # a channel without a token may owe the due rows: try again once it has one
                await asyncio.sleep(min(short))
                continue
            return 0
        await _run_batch(ctx, batch, claim_started, not_before, BULK_RECORD_WINDOW_S)
        return len(batch)
    return 0


async def drain(ctx: dict[str, Any], index: int) -> None:
    """A resident drain loop of a batched lane (K of them per lane worker, `Settings.batch_shape`).

    Each turn clears the lane's doorbell BEFORE it claims. Why nothing owed is ever slept through: a row is
    published (`wakeups.wake_lanes`) only after the transaction that made it owed committed — and on the critical
    lane that transaction's NOTIFY, read by the worker itself (jobs/wake.py `_listen_pg`), is delivered only once it
    committed — and the bell is rung when that publish or NOTIFY arrives. Either the ring came before this loop's
    clear — then the claim that follows the clear starts after the commit and sees the row (or another loop's claim
    took it) — or it comes after the clear, and the bell stays rung, so the wait below returns at once and the loop
    claims again. A Redis ring the critical lane drops (`Doorbell.ring_unless_claimed_since`) is one a claim begun
    after it arrived answered, or whose rows were all claimed — a claim that FAILED answered nothing, so it raises
    (domain/delivery/store_batch.py `_claim`, never an empty batch) and this loop claims again after its backoff instead
    of sleeping on the ring it took. A publish lost altogether (Redis away) costs loop
    0's idle poll (`OUTBOX_BATCH_IDLE_POLL`) or the relay's next scan, which publishes again.
    A full batch sets the event itself: the lane's other loops join in while more may be due.
    Retries need no wake-up: RECORD_RETRY sets next_attempt_at, and loop 0's poll claims the row once it is due.
    A paused lane: the claim's guard skips its rows; the loop just waits."""
    settings = get_settings()
    size, _ = settings.batch_shape(ctx["lane"])
    wake: Doorbell = ctx["batch_wake"]
    stop: asyncio.Event = ctx["batch_stop"]
    poll = settings.batch_idle_poll if index == 0 and settings.batch_idle_poll > 0 else None
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
        try:
            timeout, worked = await _idle_wait(ctx, poll, worked), False
        except psycopg.Error:  # the next due row unknown: after work, a retry just recorded may be it; look again
            timeout = NEXT_DUE_RETRY_S if worked else poll  # soon, still as a loop that worked (it must not forget)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()


async def _idle_wait(ctx: dict[str, Any], poll: float | None, after_work: bool = False) -> float | None:
    """How long an idle drain loop waits for a wake-up: loop 0 (the one with a poll) until the lane's next row
    comes due — a retry after its backoff, a lease that ran out — or its poll, whichever is first; another loop
    until woken, except just after it worked (`after_work`): then until the next row comes due too, once. Nothing
    is published when a retry comes due: a retry recorded by another loop than loop 0, while loop 0 slept on a
    wait it had computed before the retry existed, waited out loop 0's whole poll (a 30 s poll failed
    `test_a_retry_is_claimed_when_its_backoff_ends_not_at_the_next_idle_poll`). The read failing raises
    (`drain` looks again soon after work: a loop that forgot it worked slept through the retry it had just
    recorded)."""
    if poll is None and not after_work:
        return None
    due_in = await store.next_due_in(ctx["db"], ctx["lane"])
    if due_in is None:
        return poll
    due = max(NEXT_DUE_FLOOR_S, due_in)
    return due if poll is None else min(poll, due)


async def start_drains(ctx: dict[str, Any]) -> None:
    lane: str = ctx["lane"]
    if lane not in get_settings().batched_lanes:
        return
    ctx.setdefault("batch_wake", Doorbell())
    ctx["batch_stop"] = asyncio.Event()
    _, loops = get_settings().batch_shape(lane)
    ctx["drains"] = [asyncio.create_task(drain(ctx, i), name=f"drain-{lane}-{i}") for i in range(loops)]
    log.info("drain loops started", lane=lane, loops=loops, batch=get_settings().batch_shape(lane)[0])


async def stop_drains(ctx: dict[str, Any]) -> None:
    """Stop cleanly: each loop finishes the batch it holds (up to a lease), then ends; what is still running
    after that is cancelled (its rows' leases run out, like a killed worker's)."""
    tasks: list[asyncio.Task[None]] = ctx.pop("drains", [])
    if not tasks:
        return
    ctx["batch_stop"].set()
    ctx["batch_wake"].ring_all()
    _, pending = await asyncio.wait(tasks, timeout=min(get_settings().lease_seconds, 10.0))
    for task in pending:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
