"""The workers' store on the hot path: the same statements as claims.py (domain/delivery/sql.py, sql_record.py),
run on an async psycopg 3 pool instead of synchronous SQLAlchemy behind `asyncio.to_thread`.

Why a second store: through SQLAlchemy most of a claim's time was not its statements but Session and pool
bookkeeping, the pre-ping's round trip and a thread hop per call (the profile is in evidence/bench.md). Here a
claim is BEGIN + `CLAIM` in one pipelined round trip, then `TAKE`, then COMMIT; a record is BEGIN + `RECORD_*` +
`PENDING_RECEIPTS` in one, then COMMIT; every statement is prepared on its connection.

Only the common case is done here. Anything else — `plan` says no, the cap or the balance refuses, the record
matches nothing (a stale token, a late truth), a receipt is pending — rolls this transaction back whole and goes
the long way (claims.py in a thread), which decides again on fresh rows in one transaction of its own: every fence
and every settlement stays where it was. So does a dropped connection: no pre-ping here (it costs a round trip
per transaction); a broken connection fails its transaction, the pool drops it, and the long way (whose engine
pre-pings) retries the claim or the record.

One pool per process; each lane runs in its own worker processes, so a one-time code never shares a pool (nor a
CPU queue) with bulk work.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from domain.db import libpq_url
from domain.delivery import claims, priority, sql, sql_record
from domain.delivery.claimed import Claim, ClaimResult, Ready, SendContext, Take, claim_params, plan
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
                     created_at: datetime | None = None) -> claims.BulkRoute | None:
    stmt = sql.CHANNEL_OF.pg if created_at is None else sql.CHANNEL_OF_IN_MONTH.pg
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute(stmt, {"id": notification_id, "ca": created_at})).fetchone()
            return None if row is None else claims.BulkRoute.from_mapping(row)
    except psycopg.OperationalError as exc:
        log.warning("fast channel_of failed (%s); the long way", type(exc).__name__)
        return await asyncio.to_thread(claims.channel_of, notification_id, None, created_at)


async def claim(pool: Pool, notification_id: int, lease_seconds: float, now: datetime,
                worker: str, created_at: datetime | None = None) -> ClaimResult | None:
    """claims.claim, the common case in two round trips and a commit; None: not owed now. `created_at`: the row's
    month, when its wake-up carries it (`sql.CLAIM_IN_MONTH`: that partition alone)."""
    stmt = sql.CLAIM.pg if created_at is None else sql.CLAIM_IN_MONTH.pg
    try:
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            row = await (await conn.execute(stmt, claim_params(notification_id, lease_seconds, now,
                                                               created_at))).fetchone()
            if row is None:
                return None
            c = Claim.from_mapping(row)
            take = plan(c, SendContext.from_mapping(row), now)
            if take is None:
                raise _LongWay
            if not take.takes_nothing:
                if c.lane == "bulk":
                    # The take and the COMMIT in one round trip: the tenant's balance row (its codes take it too)
                    # is held only while the server runs them, never across a busy bulk worker's next turn.
                    await conn.execute(sql.TAKE_OR_ABORT.pg, take.params(c))
                    return Ready(c, take.contact, take.body)
                got = await (await conn.execute(sql.TAKE.pg, take.params(c))).fetchone()
                if got is None or not got["slot_ok"] or not got["paid"]:
                    raise _LongWay
            return Ready(c, take.contact, take.body)
    except _LongWay:
        pass
    except psycopg.errors.InvalidTextRepresentation as exc:  # a refused bulk take: rolled back whole
        if sql.TAKE_REFUSED not in str(exc):
            raise
    except psycopg.OperationalError as exc:  # a dropped connection: nothing of ours committed, or it did
        log.warning("fast claim failed (%s); the long way", type(exc).__name__)
    return await asyncio.to_thread(claims.claim, notification_id, lease_seconds, now, worker, None, created_at)


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


async def record(pool: Pool, c: Claim, decision: RetryDecision, *, worker: str, started: datetime,
                 status_code: int | None, latency_ms: float, provider_reference: str | None,
                 excerpt: str | None = None) -> str:
    """claims.record: an accepted send or a retry of a row still ours in one round trip and a commit."""
    kw: dict[str, Any] = {"worker": worker, "started": started, "status_code": status_code,
                          "latency_ms": latency_ms, "provider_reference": provider_reference, "excerpt": excerpt}
    # A tenant endpoint's answer also moves its circuit breaker: the long way, in the record's transaction.
    if isinstance(decision, Succeeded | Retry) and c.endpoint_id is None:
        stmt = sql_record.RECORD_SENT.pg if isinstance(decision, Succeeded) else sql_record.RECORD_RETRY.pg
        try:
            async with pool.connection() as conn, conn.pipeline(), conn.transaction():
                done = await conn.execute(stmt, claims.record_params(c, decision, **kw))
                # Its own snapshot, after the row's lock.
                pending = await conn.execute(sql_record.PENDING_RECEIPTS.pg, {"id": c.id})
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
    return await asyncio.to_thread(claims.record, c, decision, **kw)


# ---- batches (a batched lane's drain loop, jobs/batches.py `deliver_batch`) ---------------------------------------


@dataclass
class Batch:
    """One batch claim, committed: `ready` may be sent now (their takes held); `long_way` are claimed too (leased,
    their tokens moved) but need claims.settle_claimed — `plan` said no (None), or their take was refused under its
    savepoint (the Take, tried again there)."""

    ready: list[Ready] = field(default_factory=list)
    long_way: list[tuple[Claim, SendContext, Take | None]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ready) + len(self.long_way)


class _Refused(Exception):
    """Roll the take back to its savepoint: the row stays claimed, the long way takes again."""


async def claim_batch(pool: Pool, lane: str, n: int, lease_seconds: float, now: datetime) -> Batch:
    """Up to `n` due rows of `lane` in ONE statement (`sql.CLAIM_BATCH`), then in the same transaction every take
    in one more (`sql.TAKE_BATCH`), sent with the COMMIT (`_claim_set_based_first`).
    A dropped connection: an empty batch (whatever committed is leased, and its leases run out)."""
    params = {**claim_params(0, lease_seconds, now), "lane": lane, "n": n}
    del params["id"]
    return await _claim_set_based_first(pool, sql.CLAIM_BATCH.pg, params, now)


async def _claim_set_based_first(pool: Pool, stmt: str, params: dict[str, Any], now: datetime) -> Batch:
    """Every take in ONE statement sent with the COMMIT (one round trip for both); a take it refuses (a cap slot
    gone, a balance short) rolls the claim back whole, and the batch is claimed again with a savepoint per take
    (the refused row alone goes the long way, where it is suppressed with its reason)."""
    try:
        return await _claim(pool, stmt, params, now, set_based=True)
    except psycopg.errors.InvalidTextRepresentation as exc:  # a refused take: the whole claim rolled back
        if sql.TAKE_REFUSED not in str(exc):
            raise
    return await _claim(pool, stmt, params, now, set_based=False)


@dataclass(frozen=True)
class BulkFlow:
    """One (tenant, campaign) flow owing bulk rows: the tenant's own pace (None: the lane's), the campaign's channel
    (None: campaign 0, a tenant's one-by-one bulk messages, on any channel)."""

    tenant_id: int
    campaign_id: int
    tenant_rate: float | None
    channel: str | None


async def bulk_flows(pool: Pool) -> list[BulkFlow]:
    """The bulk lane's flows (`sql.BULK_DUE_FLOWS`: one index probe per flow)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(sql.BULK_DUE_FLOWS.pg)).fetchall()
    return [BulkFlow(int(r["tenant_id"]), int(r["campaign_id"]),
                     None if r["tenant_rate"] is None else float(r["tenant_rate"]), r["channel"]) for r in rows]


async def claim_bulk_batch(pool: Pool, flows: list[BulkFlow], n: int, quotas: dict[str, int],
                           capped: dict[int, int], lease_seconds: float, now: datetime) -> Batch:
    """Up to `n` due bulk rows in ONE statement (`sql.CLAIM_BULK_BATCH`), shared fairly between `flows`, never more
    of a channel than `quotas[channel]` (its bucket's tokens taken) nor of a capped tenant than `capped[tenant]`
    (its moments reserved); then every take in ONE statement sent with the COMMIT (`sql.TAKE_BATCH`). A take the
    set-based statement refuses (a cap slot gone, a balance short) rolls the claim back whole and the batch is
    claimed again the row-by-row way (a savepoint per take: the refused row alone is suppressed)."""
    chs = [ch for ch, q in quotas.items() if q > 0]
    params = {**claim_params(0, lease_seconds, now), "n": n, "ft": [f.tenant_id for f in flows],
              "fc": [f.campaign_id for f in flows], "chs": chs, "quotas": [quotas[ch] for ch in chs],
              "capped": list(capped), "capq": list(capped.values())}
    del params["id"]
    return await _claim_set_based_first(pool, sql.CLAIM_BULK_BATCH.pg, params, now)


async def _claim(pool: Pool, stmt: str, params: dict[str, Any], now: datetime, *, set_based: bool) -> Batch:
    """A batch claim's one transaction. `set_based`: every take in one `TAKE_BATCH` pipelined with the COMMIT
    (refused: `InvalidTextRepresentation` at the commit, nothing kept); else each take under its own savepoint."""
    batch = Batch()
    try:
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            rows = await (await conn.execute(stmt, params)).fetchall()
            takes: list[tuple[Claim, Take]] = []
            seen: set[tuple[int, str, Any]] = set()
            for row in rows:
                c, x = Claim.from_mapping(row), SendContext.from_mapping(row)
                take = plan(c, x, now)
                if take is None:
                    batch.long_way.append((c, x, None))
                    continue
                if take.takes_nothing:
                    batch.ready.append(Ready(c, take.contact, take.body))
                    continue
                if set_based:
                    # One row per (tenant, recipient, day) in the statement; another goes the long way (its take
                    # tried again in a transaction of its own, after this one's).
                    if take.day is not None and (c.tenant_id, c.recipient, take.day) in seen:
                        batch.long_way.append((c, x, take))
                        continue
                    seen.add((c.tenant_id, c.recipient, take.day))
                    takes.append((c, take))
                    continue
                try:
                    async with conn.transaction():  # SAVEPOINT
                        got = await (await conn.execute(sql.TAKE.pg, take.params(c))).fetchone()
                        if got is None or not got["slot_ok"] or not got["paid"]:
                            raise _Refused
                except _Refused:  # ROLLBACK TO SAVEPOINT: nothing of the take stays
                    batch.long_way.append((c, x, take))
                    continue
                batch.ready.append(Ready(c, take.contact, take.body))
            if takes:
                ps = [t.params(c) for c, t in takes]
                await conn.execute(sql.TAKE_BATCH.pg, {
                    "ns": [p["n"] for p in ps], "ts": [p["t"] for p in ps], "rs": [p["r"] for p in ps],
                    "days": [p["day"] for p in ps], "caps": [p["cap"] for p in ps], "cs": [p["c"] for p in ps],
                    "vs": [p["v"] for p in ps], "reasons": [p["reason"] for p in ps], "cas": [p["ca"] for p in ps]})
                batch.ready += [Ready(c, t.contact, t.body) for c, t in takes]
    except psycopg.errors.TransactionRollback:  # a deadlock, nothing kept: the drain loop claims again at once
        raise
    except psycopg.OperationalError as exc:
        log.warning("batch claim failed (%s); its leases, if it committed, run out", type(exc).__name__)
        return Batch()
    return batch


@dataclass(frozen=True)
class Attempted:
    """One row's attempt (a batch's or the per-row job's), to record under its claim's token."""

    claim: Claim
    decision: RetryDecision
    started: datetime
    status_code: int | None
    latency_ms: float
    provider_reference: str | None
    excerpt: str | None = None
    error: str | None = None  # what failed when no answer came (timeout, connection, url_not_allowed): logged

    def kw(self, worker: str) -> dict[str, Any]:
        return {"worker": worker, "started": self.started, "status_code": self.status_code,
                "latency_ms": self.latency_ms, "provider_reference": self.provider_reference,
                "excerpt": self.excerpt}


class _NotClean(Exception):
    def __init__(self, ids: set[int]) -> None:
        super().__init__(f"{len(ids)} rows go the long way")
        self.ids = ids


def _fast_outcome(a: Attempted) -> str:
    if isinstance(a.decision, Retry):
        return "retry"
    assert isinstance(a.decision, Succeeded)
    return "already_processed" if a.decision.already_processed else "sent"


async def _record_clean(pool: Pool, rows: list[Attempted], worker: str) -> None:
    """`RECORD_SENT_BATCH` + `RECORD_RETRY_BATCH` + `PENDING_RECEIPTS_BATCH` in one transaction; rolled back whole
    (`_NotClean`, naming the rows) when any row matched nothing or has a receipt pending."""
    sent = [a for a in rows if isinstance(a.decision, Succeeded)]
    retry = [a for a in rows if isinstance(a.decision, Retry)]
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        done_sent = done_retry = None
        if sent:
            ps = [claims.record_params(a.claim, a.decision, **a.kw(worker)) for a in sent]
            done_sent = await conn.execute(sql_record.RECORD_SENT_BATCH.pg, {
                "worker": worker, "ids": [p["id"] for p in ps], "finals": [p["final"] for p in ps],
                "ps": [p["p"] for p in ps], "keys": [p["key"] for p in ps], "nos": [p["no"] for p in ps],
                "starteds": [p["started"] for p in ps], "outcomes": [p["outcome"] for p in ps],
                "codes": [p["code"] for p in ps], "latencies": [float(p["latency"]) for p in ps],
                "excerpts": [p["excerpt"] for p in ps], "cas": [p["ca"] for p in ps]})
        if retry:
            ps = [claims.record_params(a.claim, a.decision, **a.kw(worker)) for a in retry]
            done_retry = await conn.execute(sql_record.RECORD_RETRY_BATCH.pg, {
                "worker": worker, "ids": [p["id"] for p in ps], "toks": [p["tok"] for p in ps],
                "delays": [float(p["delay"]) for p in ps], "errs": [p["err"] for p in ps],
                "nos": [p["no"] for p in ps], "starteds": [p["started"] for p in ps],
                "codes": [p["code"] for p in ps], "latencies": [float(p["latency"]) for p in ps],
                "excerpts": [p["excerpt"] for p in ps], "cas": [p["ca"] for p in ps]})
        # Its own snapshot, after the rows' locks: a receipt committed while the records waited is seen.
        pending = await conn.execute(sql_record.PENDING_RECEIPTS_BATCH.pg, {"ids": [a.claim.id for a in rows]})
        matched: set[int] = set()
        for cur in (done_sent, done_retry):
            if cur is not None:
                matched.update(int(r["id"]) for r in await cur.fetchall())
        odd = {a.claim.id for a in rows if a.claim.id not in matched}
        odd.update(int(r["id"]) for r in await pending.fetchall())
        if odd:
            raise _NotClean(odd)


async def record_batch(pool: Pool, attempts: list[Attempted], worker: str) -> dict[int, str]:
    """Every outcome of a batch in one transaction: the accepted sends and the retries of rows still ours, each
    fenced by its own token (`sql_record.RECORD_SENT_BATCH`, `sql_record.RECORD_RETRY_BATCH`), then the batch's
    receipt check.
    A row that matched nothing (stale, a late truth) or has a receipt pending rolls that transaction back; the
    clean rows are recorded again without it (a new transaction), and it goes the long way (claims.record) alone,
    as does every row that is not the common case (a failure, a tenant endpoint's answer: its breaker moves).
    Returns each row's outcome by id."""
    out: dict[int, str] = {}
    fast = [a for a in attempts if isinstance(a.decision, Succeeded | Retry) and a.claim.endpoint_id is None]
    fast_ids = {a.claim.id for a in fast}
    slow = [a for a in attempts if a.claim.id not in fast_ids]
    while fast:
        try:
            await _record_clean(pool, fast, worker)
        except _NotClean as odd:
            slow += [a for a in fast if a.claim.id in odd.ids]
            fast = [a for a in fast if a.claim.id not in odd.ids]
            continue
        except psycopg.OperationalError as exc:  # a dropped connection, a deadlock: row by row, the long way
            log.warning("fast batch record failed (%s); the long way", type(exc).__name__)
            slow += fast
            break
        out.update((a.claim.id, _fast_outcome(a)) for a in fast)
        break
    for a in slow:
        out[a.claim.id] = await asyncio.to_thread(claims.record, a.claim, a.decision, **a.kw(worker))
    return out
