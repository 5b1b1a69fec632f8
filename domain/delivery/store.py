"""The workers' store: the claim, the record and what an attempt reads, on one async psycopg 3 pool. One store, one
driver: the common case in a few round trips, and everything else — the long way (long_way.py: a floor rule that
settles, a cap, the money short, a stale token, a late truth, a receipt pending) — a branch of the same transaction
on the same connection (`domain.db.run_sync`: the long way's sync steps awaited through a greenlet on this loop, no
thread, no second connection).

Why not SQLAlchemy for the common case: through it most of a claim's time was not its statements but Session and
pool bookkeeping, the pre-ping's round trip and a thread hop per call (the profile is in evidence/bench.md). Here a
claim is BEGIN + `CLAIM` in one pipelined round trip, then `TAKE`, then COMMIT; a record is BEGIN + `RECORD_*` +
`PENDING_RECEIPTS` in one, then COMMIT; every statement is prepared on its connection.

A dropped connection: no pre-ping here (it costs a round trip per transaction); a broken connection fails its
transaction, the pool drops it and checks the others, and the call is made once more on another connection
(`_again`): nothing of the first committed, or it did and the second finds the row no longer owed (its lease is
ours: it runs out).

One pool per process; each lane runs in its own worker processes, so a one-time code never shares a pool (nor a
CPU queue) with bulk work.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from domain.db import libpq_url, run_sync
from domain.delivery import long_way, priority, sql, sql_record
from domain.delivery.plan import Claim, ClaimResult, Ready, SendContext, claim_params, plan
from domain.delivery.retry import Retry, RetryDecision, Succeeded
from domain.endpoints import store as endpoints

log = logging.getLogger("outbox.delivery")

Pool = AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]


T = TypeVar("T")


async def _again(pool: Pool, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call`, and once more if its transaction failed for want of its connection or as a deadlock's victim: rolled
    back whole either way, so running it again from the start is safe. Before the second try every idle connection
    of the pool is checked (`pool.check()`: a broken one is replaced): a restart or a failover ends all of them at
    once, and the pool discards only the one that failed — the second try would take another dead one."""
    try:
        return await call()
    except psycopg.OperationalError as exc:
        log.warning("%s failed (%s); once more", what, type(exc).__name__)
    await pool.check()
    return await call()


async def open_pool(database_url: str, name: str, max_size: int = 10, niceness: int = 0,
                    prepared: bool = True) -> Pool:
    """An open pool of prepared-statement connections (no check on checkout: see the module's note). `niceness`:
    each connection's backend, if it runs on this machine, at that CPU priority (domain/delivery/priority.py).
    `prepared=False`, for a pool through PgBouncer in transaction mode: no statement is prepared server-side
    (`prepare_threshold=None`: PgBouncer 1.18 hands each transaction whichever server connection is free, where
    a statement prepared on another does not exist), and no backend is reniced (the pid a client sees there is
    PgBouncer's, not a backend's, and the backends are shared by every lane)."""

    async def configure(conn: psycopg.AsyncConnection[DictRow]) -> None:
        priority.renice_backend(conn.info.backend_pid, conn.info.host, niceness)

    renice = niceness > 0 and prepared
    pool: Pool = AsyncConnectionPool(
        libpq_url(database_url), min_size=1, max_size=max_size, name=name, open=False, timeout=10,
        connection_class=psycopg.AsyncConnection[DictRow], configure=configure if renice else None,
        kwargs={"row_factory": dict_row, "prepare_threshold": 0 if prepared else None, "application_name": name})
    await pool.open(wait=True, timeout=30)
    return pool


async def channel_of(pool: Pool, notification_id: int,
                     created_at: datetime | None = None) -> long_way.BulkRoute | None:
    stmt = sql.CHANNEL_OF.pg if created_at is None else sql.CHANNEL_OF_IN_MONTH.pg

    async def read() -> long_way.BulkRoute | None:
        async with pool.connection() as conn:
            row = await (await conn.execute(stmt, {"id": notification_id, "created_at": created_at})).fetchone()
            return None if row is None else long_way.BulkRoute.from_mapping(row)

    return await _again(pool, "channel_of", read)


async def claim(pool: Pool, notification_id: int, lease_seconds: float, now: datetime,
                worker: str, created_at: datetime | None = None) -> ClaimResult | None:
    """long_way.claim: the common case in two round trips and a commit, the long way in the same transaction; None:
    not owed now. `created_at`: the row's month, when its wake-up carries it (`sql.CLAIM_IN_MONTH`: that partition
    alone)."""
    async def once() -> ClaimResult | None:
        try:
            return await _claim(pool, notification_id, lease_seconds, now, worker, created_at, abort_refused=True)
        except psycopg.errors.InvalidTextRepresentation as exc:  # a refused bulk take: rolled back whole
            if sql.TAKE_REFUSED not in str(exc):
                raise
        return await _claim(pool, notification_id, lease_seconds, now, worker, created_at, abort_refused=False)

    return await _again(pool, "claim", once)


async def _claim(pool: Pool, notification_id: int, lease_seconds: float, now: datetime, worker: str,
                 created_at: datetime | None, *, abort_refused: bool) -> ClaimResult | None:
    """One claim transaction. `abort_refused` (the bulk lane): the take and the COMMIT in one round trip, a refused take
    failing the whole transaction (`sql.TAKE_OR_ABORT`; the caller claims again without it)."""
    stmt = sql.CLAIM.pg if created_at is None else sql.CLAIM_IN_MONTH.pg
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        row = await (await conn.execute(stmt, claim_params(notification_id, lease_seconds, now,
                                                           created_at))).fetchone()
        if row is None:
            return None
        claim, context = Claim.from_mapping(row), SendContext.from_mapping(row)
        take = plan(claim, context, now)
        if take is None:  # the long way decides, in this transaction
            return await run_sync(conn, long_way.take_or_decide, claim, context, None, now, worker)
        if not take.takes_nothing:
            if claim.lane == "bulk" and abort_refused:
                # The take and the COMMIT in one round trip: the tenant's balance row (its codes take it too)
                # is held only while the server runs them, never across a busy bulk worker's next turn.
                await conn.execute(sql.TAKE_OR_ABORT.pg, take.params(claim))
                return Ready(claim, take.contact, take.body)
            got = await (await conn.execute(sql.TAKE.pg, take.params(claim))).fetchone()
            assert got is not None  # one row, always: what it took
            if not (got["slot_ok"] and got["paid"]):
                return await run_sync(conn, long_way.refused_take, claim, bool(got["slot_ok"]), worker, now)
        return Ready(claim, take.contact, take.body)


async def unclaimed(pool: Pool, notification_id: int, lane: str) -> tuple[bool, bool]:
    """After a claim that matched nothing: (the lane is paused, the row is claimable on a running lane)."""
    async with pool.connection() as conn:
        row = await (await conn.execute(sql.UNCLAIMED.pg, {"id": notification_id, "lane": lane})).fetchone()
        assert row is not None
        return bool(row["paused"]), bool(row["claimable"])


async def next_due_in(pool: Pool, lane: str) -> float | None:
    """Seconds until the lane's next unleased owed row is due (0: due now); None: nothing owed that is not leased."""
    async with pool.connection() as conn:
        row = await (await conn.execute(sql.NEXT_DUE_IN_LANE.pg, {"lane": lane})).fetchone()
        return None if row is None or row["due_in_s"] is None else max(0.0, float(row["due_in_s"]))


async def record(pool: Pool, claim: Claim, decision: RetryDecision, *, worker: str, started: datetime,
                 status_code: int | None, latency_ms: float, provider_reference: str | None,
                 excerpt: str | None = None) -> str:
    """long_way.record: an accepted send or a retry of a row still ours in one round trip and a commit; anything
    else (a stale token, a late truth, a receipt pending, a failure, a tenant endpoint's answer: its breaker moves)
    the long way, in the same transaction."""
    kw: dict[str, Any] = {"worker": worker, "started": started, "status_code": status_code,
                          "latency_ms": latency_ms, "provider_reference": provider_reference, "excerpt": excerpt}

    async def once() -> str:
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            if not isinstance(decision, Succeeded | Retry) or claim.endpoint_id is not None:
                return await run_sync(conn, long_way.record_on, claim, decision, **kw)
            stmt = sql_record.RECORD_SENT.pg if isinstance(decision, Succeeded) else sql_record.RECORD_RETRY.pg
            done = await conn.execute(stmt, long_way.record_params(claim, decision, **kw))
            # Its own snapshot, after the row's lock.
            pending = await conn.execute(sql_record.PENDING_RECEIPTS.pg, {"id": claim.id})
            answer, owed = await done.fetchone(), await pending.fetchone()
            matched = bool(answer and answer["matched"])
            if matched and not (owed and owed["pending"]):
                if isinstance(decision, Retry):
                    return "retry"
                return "already_processed" if decision.already_processed else "sent"
            return await run_sync(conn, long_way.record_on, claim, decision, matched=matched, **kw)

    return await _again(pool, "record", once)


async def give_back(pool: Pool, claim: Claim) -> bool:
    """long_way.give_back: the attempt given back unsent (too little of the lease left, the endpoint gone)."""
    async def once() -> bool:
        async with pool.connection() as conn, conn.transaction():
            return await run_sync(conn, long_way.give_back_on, claim)

    return await _again(pool, "give_back", once)


async def send_target(pool: Pool, tenant_id: int, endpoint_id: int) -> endpoints.SendTarget | None:
    """A tenant endpoint's URL and live secrets, read at send time (never carried in a job or a claim)."""
    async def once() -> endpoints.SendTarget | None:
        async with pool.connection() as conn, conn.transaction():
            return await run_sync(conn, endpoints.send_target_on, tenant_id, endpoint_id)

    return await _again(pool, "send_target", once)
