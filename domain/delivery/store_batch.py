"""The workers' store, a batch at a time (a batched lane's drain loop, jobs/batches.py): up to N rows claimed in one
statement and every take in one more sent with the COMMIT; a batch's answers recorded in one transaction, each row
under its own claim token. Like store.py (the same pool, the same statements' psycopg forms), a row that is not the
common case goes the long way (long_way.py) in the batch's own transaction (`domain.db.run_sync`), fenced by its
own token like every other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from domain.db import UnitOfWork, run_sync
from domain.delivery import long_way, sql, sql_record, store
from domain.delivery.plan import Claim, ClaimResult, Ready, SendContext, Take, claim_params, plan
from domain.delivery.retry import Retry, RetryDecision, Succeeded
from domain.delivery.store import Pool

log = logging.getLogger("outbox.delivery")


@dataclass
class Batch:
    """One batch claim, committed: `ready` may be sent now (their takes held); `settled` were claimed and settled
    unsent in the same transaction by the long way (suppressed with their reason, deferred, failed as used up).
    `long_way`: how many rows the long way decided (those of `ready` among them)."""

    ready: list[Ready] = field(default_factory=list)
    settled: list[ClaimResult] = field(default_factory=list)
    long_way: int = 0

    def __len__(self) -> int:
        return len(self.ready) + len(self.settled)

    def claims(self) -> list[Claim]:
        """Every row this claim leased, sent or settled."""
        return [r.claim for r in self.ready] + [r.claim for r in self.settled]


class _Refused(Exception):
    """Roll the take back to its savepoint: the row stays claimed, the long way takes again."""


async def claim_batch(pool: Pool, lane: str, limit: int, lease_seconds: float, now: datetime,
                      worker: str = "worker") -> Batch:
    """Up to `n` due rows of `lane` in ONE statement (`sql.CLAIM_BATCH`), then in the same transaction every take
    in one more (`sql.TAKE_BATCH`), sent with the COMMIT (`_claim_set_based_first`).
    A dropped connection or a deadlock raises (`_claim`): never an empty batch."""
    params = {**claim_params(0, lease_seconds, now), "lane": lane, "limit": limit}
    del params["id"]
    return await _claim_set_based_first(pool, sql.CLAIM_BATCH.pg, params, now, worker)


async def _claim_set_based_first(pool: Pool, stmt: str, params: dict[str, Any], now: datetime,
                                 worker: str) -> Batch:
    """Every take in ONE statement sent with the COMMIT (one round trip for both); a take it refuses (a cap slot
    gone, a balance short) rolls the claim back whole, and the batch is claimed again with a savepoint per take
    (the refused row alone goes the long way, where it is suppressed with its reason)."""
    try:
        return await _claim(pool, stmt, params, now, worker, set_based=True)
    except psycopg.errors.InvalidTextRepresentation as exc:  # a refused take: the whole claim rolled back
        if sql.TAKE_REFUSED not in str(exc):
            raise
    return await _claim(pool, stmt, params, now, worker, set_based=False)


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


async def claim_bulk_batch(pool: Pool, flows: list[BulkFlow], limit: int, quotas: dict[str, int],
                           capped: dict[int, int], lease_seconds: float, now: datetime,
                           worker: str = "worker") -> Batch:
    """Up to `n` due bulk rows in ONE statement (`sql.CLAIM_BULK_BATCH`), shared fairly between `flows`, never more
    of a channel than `quotas[channel]` (its bucket's tokens taken) nor of a capped tenant than `capped[tenant]`
    (its moments reserved); then every take in ONE statement sent with the COMMIT (`sql.TAKE_BATCH`). A take the
    set-based statement refuses (a cap slot gone, a balance short) rolls the claim back whole and the batch is
    claimed again the row-by-row way (a savepoint per take: the refused row alone is suppressed)."""
    channels = [ch for ch, q in quotas.items() if q > 0]
    params = {**claim_params(0, lease_seconds, now), "limit": limit, "flow_tenants": [f.tenant_id for f in flows],
              "flow_campaigns": [f.campaign_id for f in flows], "channels": channels,
              "quotas": [quotas[ch] for ch in channels], "capped_tenants": list(capped),
              "capped_quotas": list(capped.values())}
    del params["id"]
    return await _claim_set_based_first(pool, sql.CLAIM_BULK_BATCH.pg, params, now, worker)


async def _claim(pool: Pool, stmt: str, params: dict[str, Any], now: datetime, worker: str, *,
                 set_based: bool) -> Batch:
    """A batch claim's one transaction. `set_based`: every take in one `TAKE_BATCH` pipelined with the COMMIT
    (refused: `InvalidTextRepresentation` at the commit, nothing kept); else each take under its own savepoint.

    A claim that failed (a dropped connection, a deadlock: `OperationalError`) raises to the drain loop, which
    claims again after its backoff (jobs/batches.py `drain`; whatever committed is leased, and its leases run out).
    Never an empty batch: an empty batch says "nothing was due when this claim began", and the critical lane's
    worker drops a Redis ring that arrived before a claim began on that word (jobs/wake.py
    `Doorbell.ring_unless_claimed_since`) — a failed claim taken for an empty one slept through the code it rang."""
    batch = Batch()
    long_way_rows: list[tuple[Claim, SendContext, Take | None]] = []
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        rows = await (await conn.execute(stmt, params)).fetchall()
        takes: list[tuple[Claim, Take]] = []
        seen: set[tuple[int, str, Any]] = set()
        for row in rows:
            claim, context = Claim.from_mapping(row), SendContext.from_mapping(row)
            take = plan(claim, context, now)
            if take is None:
                long_way_rows.append((claim, context, None))
                continue
            if take.takes_nothing:
                batch.ready.append(Ready(claim, take.contact, take.body))
                continue
            if set_based:
                # One row per (tenant, recipient, day) in the statement; another goes the long way (its take
                # tried again after the statement's, in the same transaction).
                if take.day is not None and (claim.tenant_id, claim.recipient, take.day) in seen:
                    long_way_rows.append((claim, context, take))
                    continue
                seen.add((claim.tenant_id, claim.recipient, take.day))
                takes.append((claim, take))
                continue
            try:
                async with conn.transaction():  # SAVEPOINT
                    got = await (await conn.execute(sql.TAKE.pg, take.params(claim))).fetchone()
                    if got is None or not got["slot_ok"] or not got["paid"]:
                        raise _Refused
            except _Refused:  # ROLLBACK TO SAVEPOINT: nothing of the take stays
                long_way_rows.append((claim, context, take))
                continue
            batch.ready.append(Ready(claim, take.contact, take.body))
        if takes:
            await conn.execute(sql.TAKE_BATCH.pg, _columns(
                [t.params(c) for c, t in takes], ids="id", tenant_ids="tenant_id", recipients="recipient", days="day",
                caps="cap", cents="cents", template_versions="template_version", reasons="reason",
                created_ats="created_at"))
            batch.ready += [Ready(c, t.contact, t.body) for c, t in takes]
        if long_way_rows:  # after the takes: a second row of a recipient's day counts the first's slot
            if takes:  # the set-based take's answer first: refused, it fails here and the batch is claimed again
                async with conn.pipeline():
                    pass
            for claim, context, take in _long_way_order(long_way_rows):
                try:
                    async with conn.transaction():  # SAVEPOINT: a row whose long way fails costs the batch nothing
                        result = await run_sync(conn, long_way.take_or_decide, claim, context, take, now, worker)
                except psycopg.OperationalError:
                    raise  # the connection, a deadlock: the whole claim fails and the drain loop claims again
                except Exception:
                    # A bug, not a rule: the row stays claimed unsent (leased, its attempt counted), as when the
                    # long way ran after the claim's commit; its lease runs out, and its attempts, used up, settle
                    # it FAILED before this code runs again. Without this, the row failed every claim of its lane.
                    log.exception("the long way failed for claimed notification %s; its lease runs out", claim.id)
                    continue
                (batch.ready if isinstance(result, Ready) else batch.settled).append(result)  # type: ignore[arg-type]
                batch.long_way += 1
    return batch


def _long_way_order(rows: list[tuple[Claim, SendContext, Take | None]]) -> list[tuple[Claim, SendContext, Take | None]]:
    """The rows this batch claimed and could not settle set-based, in the order their long way takes them: by tenant,
    then person, then id (a person's rows in id order: a second row of their day counts the first's slot), the order
    `record_batch`'s long way takes them in — what a row's long way locks beyond its own row (its person's cap
    counter, its tenant's balance) is held to the commit, and two batches taking them in one order never cross."""
    return sorted(rows, key=lambda row: (row[0].tenant_id, row[0].recipient, row[0].id))


# The one-row parameters a batch statement takes as float8[] (a number of another type would change the array's).
_FLOATS = frozenset({"latency", "delay"})


def _columns(rows: list[dict[str, Any]], **arrays: str) -> dict[str, list[Any]]:
    """What a batch statement unnests: for each `array=key`, every row's one-row parameter `key`, in row order."""
    return {array: [float(r[key]) if key in _FLOATS else r[key] for r in rows] for array, key in arrays.items()}


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


def _fast_outcome(attempted: Attempted) -> str:
    if isinstance(attempted.decision, Retry):
        return "retry"
    assert isinstance(attempted.decision, Succeeded)
    return "already_processed" if attempted.decision.already_processed else "sent"


async def record_batch(pool: Pool, attempts: list[Attempted], worker: str) -> dict[int, str]:
    """Every outcome of a batch in ONE transaction: the accepted sends and the retries of rows still ours, each
    fenced by its own token (`sql_record.RECORD_SENT_BATCH`, `sql_record.RECORD_RETRY_BATCH`), then the batch's
    receipt check; a row that matched nothing (stale, a late truth) or has a receipt pending, and every row that is
    not the common case (a failure, a tenant endpoint's answer: its breaker moves), the long way (long_way.record_on)
    in the same transaction. Failed whole (a dropped connection, a deadlock, or one row the transaction could not
    take: nothing of it kept), the rows are recorded one by one (store.record, each its own transaction), and a row
    that fails alone costs no other row its record: it is left out of the answer (its lease runs out, as a failed
    batch's did). Returns each row's outcome by id."""
    try:
        return await _record(pool, attempts, worker)
    except Exception as exc:
        log.warning("batch record failed (%s); row by row", type(exc).__name__)
    out: dict[int, str] = {}
    for a in attempts:
        try:
            out[a.claim.id] = await store.record(pool, a.claim, a.decision, **a.kw(worker))
        except Exception:
            log.exception("row record failed; its lease runs out (notification %s)", a.claim.id)
    return out


async def _record(pool: Pool, attempts: list[Attempted], worker: str) -> dict[int, str]:
    out: dict[int, str] = {}
    fast = [a for a in attempts if isinstance(a.decision, Succeeded | Retry) and a.claim.endpoint_id is None]
    fast_ids = {a.claim.id for a in fast}
    long: list[tuple[Attempted, bool | None]] = [(a, None) for a in attempts if a.claim.id not in fast_ids]
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        if fast:
            matched, pending = await _record_fast(conn, fast, worker)
            for a in fast:
                if a.claim.id in matched and a.claim.id not in pending:
                    out[a.claim.id] = _fast_outcome(a)
                else:  # taken up where the batch's statement left it
                    long.append((a, a.claim.id in matched))
        if long:
            # By tenant, then person: what a row's long way may lock beyond its own row — its person's cap counter,
            # then its tenant's balance (a refund, a late charge; an endpoint's breaker after the balance) — is held
            # to this transaction's commit, so two batches' long ways take them in one order, never crossing.
            long.sort(key=lambda item: (item[0].claim.tenant_id, item[0].claim.recipient, item[0].claim.id))
            out.update(await run_sync(conn, _record_long_way, long, worker))
    return out


async def _record_fast(conn: Any, rows: list[Attempted], worker: str) -> tuple[set[int], set[int]]:
    """`RECORD_SENT_BATCH` + `RECORD_RETRY_BATCH` + `PENDING_RECEIPTS_BATCH`, pipelined: the rows each matched (still
    ours, or an accepted send recorded) and the rows with a receipt pending."""
    sent = [a for a in rows if isinstance(a.decision, Succeeded)]
    retry = [a for a in rows if isinstance(a.decision, Retry)]
    done_sent = done_retry = None
    if sent:
        params = [long_way.record_params(a.claim, a.decision, **a.kw(worker)) for a in sent]
        done_sent = await conn.execute(sql_record.RECORD_SENT_BATCH.pg, {"worker": worker, **_columns(
            params, ids="id", finals="final", provider_references="provider_reference", keys="key",
            attempt_nos="attempt_no", starteds="started", outcomes="outcome", codes="code", latencies="latency",
            excerpts="excerpt", created_ats="created_at")})
    if retry:
        params = [long_way.record_params(a.claim, a.decision, **a.kw(worker)) for a in retry]
        done_retry = await conn.execute(sql_record.RECORD_RETRY_BATCH.pg, {"worker": worker, **_columns(
            params, ids="id", claim_tokens="claim_token", delays="delay", error_classes="error_class",
            attempt_nos="attempt_no", starteds="started", codes="code", latencies="latency", excerpts="excerpt",
            created_ats="created_at")})
    # Its own snapshot, after the rows' locks: a receipt committed while the records waited is seen.
    pending = await conn.execute(sql_record.PENDING_RECEIPTS_BATCH.pg, {"ids": [a.claim.id for a in rows]})
    matched: set[int] = set()
    for cur in (done_sent, done_retry):
        if cur is not None:
            matched.update(int(r["id"]) for r in await cur.fetchall())
    return matched, {int(r["id"]) for r in await pending.fetchall()}


def _record_long_way(uow: UnitOfWork, rows: list[tuple[Attempted, bool | None]], worker: str) -> dict[int, str]:
    return {a.claim.id: long_way.record_on(uow, a.claim, a.decision, matched=matched, **a.kw(worker))
            for a, matched in rows}
