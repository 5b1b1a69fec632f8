"""The workers' store on the hot path: the same statements as long_way.py (domain/delivery/sql.py, sql_record.py),
run on an async psycopg 3 pool instead of synchronous SQLAlchemy behind `asyncio.to_thread`.

Why a second store: through SQLAlchemy most of a claim's time was not its statements but Session and pool
bookkeeping, the pre-ping's round trip and a thread hop per call (the profile is in evidence/bench.md). Here a
claim is BEGIN + `CLAIM` in one pipelined round trip, then `TAKE`, then COMMIT; a record is BEGIN + `RECORD_*` +
`PENDING_RECEIPTS` in one, then COMMIT; every statement is prepared on its connection.

Only the common case is done here. Anything else — `plan` says no, the cap or the balance refuses, the record
matches nothing (a stale token, a late truth), a receipt is pending — rolls this transaction back whole and goes
the long way (long_way.py in a thread), which decides again on fresh rows in one transaction of its own: every fence
and every settlement stays where it was. So does a dropped connection: no pre-ping here (it costs a round trip
per transaction); a broken connection fails its transaction, the pool drops it, and the long way (whose engine
pre-pings) retries the claim or the record.

One pool per process; each lane runs in its own worker processes, so a one-time code never shares a pool (nor a
CPU queue) with bulk work.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from domain.db import libpq_url
from domain.delivery import long_way, priority, sql, sql_record
from domain.delivery.plan import Claim, ClaimResult, Ready, SendContext, claim_params, plan
from domain.delivery.retry import Retry, RetryDecision, Succeeded

log = logging.getLogger("outbox.delivery")

Pool = AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]


class _LongWay(Exception):
    """Roll the fast transaction back: the long way decides."""


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
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute(stmt, {"id": notification_id, "created_at": created_at})).fetchone()
            return None if row is None else long_way.BulkRoute.from_mapping(row)
    except psycopg.OperationalError as exc:
        log.warning("fast channel_of failed (%s); the long way", type(exc).__name__)
        return await asyncio.to_thread(long_way.channel_of, notification_id, None, created_at)


async def claim(pool: Pool, notification_id: int, lease_seconds: float, now: datetime,
                worker: str, created_at: datetime | None = None) -> ClaimResult | None:
    """long_way.claim, the common case in two round trips and a commit; None: not owed now. `created_at`: the row's
    month, when its wake-up carries it (`sql.CLAIM_IN_MONTH`: that partition alone)."""
    stmt = sql.CLAIM.pg if created_at is None else sql.CLAIM_IN_MONTH.pg
    try:
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            row = await (await conn.execute(stmt, claim_params(notification_id, lease_seconds, now,
                                                               created_at))).fetchone()
            if row is None:
                return None
            claim = Claim.from_mapping(row)
            take = plan(claim, SendContext.from_mapping(row), now)
            if take is None:
                raise _LongWay
            if not take.takes_nothing:
                if claim.lane == "bulk":
                    # The take and the COMMIT in one round trip: the tenant's balance row (its codes take it too)
                    # is held only while the server runs them, never across a busy bulk worker's next turn.
                    await conn.execute(sql.TAKE_OR_ABORT.pg, take.params(claim))
                    return Ready(claim, take.contact, take.body)
                got = await (await conn.execute(sql.TAKE.pg, take.params(claim))).fetchone()
                if got is None or not got["slot_ok"] or not got["paid"]:
                    raise _LongWay
            return Ready(claim, take.contact, take.body)
    except _LongWay:
        pass
    except psycopg.errors.InvalidTextRepresentation as exc:  # a refused bulk take: rolled back whole
        if sql.TAKE_REFUSED not in str(exc):
            raise
    except psycopg.OperationalError as exc:  # a dropped connection: nothing of ours committed, or it did
        log.warning("fast claim failed (%s); the long way", type(exc).__name__)
    return await asyncio.to_thread(long_way.claim, notification_id, lease_seconds, now, worker, None, created_at)


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
    """long_way.record: an accepted send or a retry of a row still ours in one round trip and a commit."""
    kw: dict[str, Any] = {"worker": worker, "started": started, "status_code": status_code,
                          "latency_ms": latency_ms, "provider_reference": provider_reference, "excerpt": excerpt}
    # A tenant endpoint's answer also moves its circuit breaker: the long way, in the record's transaction.
    if isinstance(decision, Succeeded | Retry) and claim.endpoint_id is None:
        stmt = sql_record.RECORD_SENT.pg if isinstance(decision, Succeeded) else sql_record.RECORD_RETRY.pg
        try:
            async with pool.connection() as conn, conn.pipeline(), conn.transaction():
                done = await conn.execute(stmt, long_way.record_params(claim, decision, **kw))
                # Its own snapshot, after the row's lock.
                pending = await conn.execute(sql_record.PENDING_RECEIPTS.pg, {"id": claim.id})
                matched, owed = await done.fetchone(), await pending.fetchone()
                if not matched or not matched["matched"] or not owed or owed["pending"]:
                    raise _LongWay
            if isinstance(decision, Retry):
                return "retry"
            return "already_processed" if decision.already_processed else "sent"
        except _LongWay:
            pass
        except psycopg.OperationalError as exc:
            log.warning("fast record failed (%s); the long way", type(exc).__name__)
    return await asyncio.to_thread(long_way.record, claim, decision, **kw)
