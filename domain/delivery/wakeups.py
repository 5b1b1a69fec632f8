"""The producer's half of the queue: after commit, publish the transient refresh, then enqueue wake-ups.
Both best-effort. Used by every process that commits owed work (dashboard, API, relay, tools).

Nothing here can lose a fact: PostgreSQL already holds the ledger rows, and the relay's recovery scan re-enqueues
any row whose wake-up never reached Redis.

Both are fast paths, and each can be switched off for a test or drill (development only): `OUTBOX_REFRESH_PUBLISH=0`
(or, at runtime, "refresh_publish" in the `SWITCHED_OFF` set) publishes no hint, and open views converge by their
periodic revision check (dashboard/live.py); `OUTBOX_WAKE_AFTER_COMMIT=0` enqueues no wake-up after a commit, and
the relay's scan delivers every owed row.

Also here: the relay's recovery scan (`scan_owed`) and the one measurement of the refresh hint,
its publish-to-render latency (`record_push_latency`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from arq import ArqRedis
from arq.connections import RedisSettings
from arq.constants import in_progress_key_prefix, job_key_prefix
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine, Result, Row
from sqlalchemy.sql.expression import Executable

from domain import faults
from domain.db import UnitOfWork
from domain.delivery import fair_queue, sql_reads
from domain.delivery.queue import (
    DELIVER_TASK,
    FAN_OUT_TASK,
    REFRESH_PUBLISHES,
    SWITCHED_OFF,
    fan_out_job_id,
    job_id,
    order_channel,
    queue_name,
    tenant_channel,
    wake_channel,
)
from domain.ledger.owed import OwedRow
from domain.orders.commands import Committed
from domain.settings import get_settings

log = logging.getLogger("outbox.wake")


# What one Redis call of ours may cost its caller (the relay's scan, the API's after-commit wake-ups and rate limits,
# the tools), at most: a connect within REDIS_CONNECT_TIMEOUT, a reply within REDIS_REPLY_TIMEOUT, and one more try
# after REDIS_RETRY_BACKOFF — then the error, which every caller already treats as "Redis is away, PostgreSQL still
# holds everything". arq's pool took redis-py's defaults instead: no reply timeout (a connection whose peer went
# silent held the caller for ever) and 3 more tries with jittered exponential backoff of up to 2, 4 and 8 s around
# its 1 s connect timeout, so a call that had to connect while Redis took no connections raised
# `TimeoutError: Timeout connecting to server` after up to 4 x 1 + 14 = 18 s — the relay's "scan failed:
# TimeoutError" and its stall (docs/operations-runbook.md).
REDIS_CONNECT_TIMEOUT = 1.0
REDIS_REPLY_TIMEOUT = 5.0  # above any command we send (pipelined pages of EXISTS, one Lua call per page: ms)
REDIS_RETRIES, REDIS_RETRY_BACKOFF = 1, 0.1


def redis_settings(url: str | None = None) -> RedisSettings:
    return RedisSettings.from_dsn(url or get_settings().redis_url)


def bounded_retry() -> Retry:
    return Retry(ConstantBackoff(REDIS_RETRY_BACKOFF), REDIS_RETRIES)


async def arq_pool(url: str | None = None) -> ArqRedis:
    """An arq pool whose every call is bounded (above). Made as arq's `create_pool` makes it — pinged, and retried
    at start while Redis is not there yet (arq's `conn_retries` times, `conn_retry_delay` apart)."""
    rs = redis_settings(url)
    for attempt in range(rs.conn_retries + 1):
        pool = ArqRedis(host=rs.host, port=rs.port, db=rs.database, username=rs.username, password=rs.password,
                        ssl=rs.ssl, encoding="utf8", socket_connect_timeout=REDIS_CONNECT_TIMEOUT,
                        socket_timeout=REDIS_REPLY_TIMEOUT, retry=bounded_retry())
        try:
            await pool.ping()  # type: ignore[misc]  # redis-py types ping for both of its clients at once
            return pool
        except (RedisError, OSError) as exc:
            await pool.aclose()
            if attempt == rs.conn_retries:
                raise
            log.warning("redis not reachable (%s); %d retries left", type(exc).__name__, rs.conn_retries - attempt)
            await asyncio.sleep(rs.conn_retry_delay)
    raise AssertionError("unreachable")


def refresh_message(tenant_id: int, order_id: int, revision: int, event_id: str | None, kind: str,
                    status: str | None = None) -> str:
    """Identity, revision and (for an order's own change) the status it committed; subscribers show those two at once
    and reload the rest, authorized, from PostgreSQL."""
    doc: dict[str, object] = {"tenant_id": tenant_id, "order_id": order_id, "revision": revision,
                              "event_id": event_id, "kind": kind, "published_at": time.time()}
    if status is not None:
        doc["status"] = status
    return json.dumps(doc)


async def switched_off(redis: ArqRedis, name: str) -> bool:
    """A development-only runtime switch (`SWITCHED_OFF`); production never reads it, so costs nothing there."""
    return get_settings().dev_mode is True and bool(await redis.sismember(SWITCHED_OFF, name))  # type: ignore[misc]


async def publish_refresh(
    redis: ArqRedis, tenant_id: int, order_id: int, revision: int, event_id: str | None, kind: str = "order",
    status: str | None = None,
) -> int:
    """Returns how many views listen on this order's channel (0 when the fast path is switched off)."""
    if not get_settings().refresh_publish or await switched_off(redis, "refresh_publish"):
        return 0
    msg = refresh_message(tenant_id, order_id, revision, event_id, kind, status)
    async with redis.pipeline(transaction=False) as pipe:  # one round trip for all three
        pipe.publish(order_channel(tenant_id, order_id), msg)
        pipe.publish(tenant_channel(tenant_id), msg)
        pipe.incr(REFRESH_PUBLISHES)
        n, _, _ = await pipe.execute()
    return int(n)


def batched(lane: str) -> bool:
    """Is this lane drained in batches (`OUTBOX_BATCH_LANES`): its wake-up names the lane, never a row."""
    return lane in get_settings().batched_lanes


async def enqueue(redis: ArqRedis, rows: Iterable[OwedRow], *, name_rows: bool = False) -> int:
    """Idempotent by `_job_id`: a row that already has a live job is not enqueued twice. Then one wake-up per lane
    that got a job, so its idle workers start it now instead of at their next poll (jobs/wake.py).
    A row of a batched lane (`batched`) gets no job: its lane's wake-up alone (one publish per lane) brings a drain
    loop to claim it; it counts as woken. `name_rows` (the after-commit wake-up of rows just committed): that
    publish names the rows (`wake_payload`); the relay's never does — its wake-ups are for rows whose first one may
    have been dropped, and must always ring. Returns the rows enqueued or woken."""
    n = 0
    woken: set[str] = set()
    named: dict[str, list[int]] = {}
    rows = list(rows)
    for lane in {r.lane for r in rows if batched(r.lane)}:
        named[lane] = [r.notification_id for r in rows if r.lane == lane]
        n += len(named[lane])
        woken.add(lane)
    rows = [r for r in rows if not batched(r.lane)]
    # The bulk lane's wake-ups, scored by fair queueing over (tenant, campaign) flows (domain/delivery/fair_queue.py).
    fair_rows = [r for r in rows if r.lane == "bulk" and r.flow]
    if fair_rows and (fair_n := await fair_queue.enqueue_fair(redis, fair_rows)):
        n += fair_n
        woken.add("bulk")
    for row in rows:
        if row.lane == "bulk" and row.flow:
            continue
        job = await redis.enqueue_job(DELIVER_TASK, row.notification_id, row.created_at,
                                      _job_id=job_id(row.notification_id),
                                      _queue_name=queue_name(row.lane))
        if job is not None:
            log.debug("wake-up enqueued", extra={"notification_id": row.notification_id, "lane": row.lane})
            n += 1
            woken.add(row.lane)
    await wake_lanes(redis, woken, named if name_rows else None)
    return n


def redis_db(redis: ArqRedis) -> int:
    return int(redis.connection_pool.connection_kwargs.get("db", 0))


# A batched lane's wake-up names its rows (their ids, comma-separated) when they are this few at most; more, or
# none known, and it names none (""). The critical lane's worker drops a wake-up whose rows it already claimed
# (jobs/wake.py `LaneWorker._second_ring`): ids only, never what a row holds.
NAMED_ROWS_MAX: Final = 32


def wake_payload(ids: list[int] | None) -> str:
    return ",".join(map(str, ids)) if ids and len(ids) <= NAMED_ROWS_MAX else ""


def named_rows(payload: bytes | str | None) -> frozenset[int]:
    """The ids a wake-up names (empty: it names none, or what it holds is not ids)."""
    text = payload.decode() if isinstance(payload, bytes) else (payload or "")
    try:
        return frozenset(int(x) for x in text.split(",")) if text else frozenset()
    except ValueError:
        return frozenset()


async def wake_lanes(redis: ArqRedis, lanes: Iterable[str], named: dict[str, list[int]] | None = None) -> None:
    """Best-effort: a worker that misses the hint polls its queue within a second anyway. `named`: the rows each
    lane's wake-up is about (`wake_payload`)."""
    try:
        for lane in lanes:
            await redis.publish(wake_channel(lane, redis_db(redis)), wake_payload((named or {}).get(lane)))
    except Exception as exc:
        log.warning("wake-up publish failed: %s", type(exc).__name__)


async def enqueue_missing(redis: ArqRedis, rows: list[OwedRow]) -> int:
    """The relay's enqueue: one pipelined EXISTS for the whole page first, then `enqueue` only the rows whose job
    is gone (lost with Redis, or finished) — a scan over rows that all have live jobs costs one round trip."""
    return await enqueue(redis, await without_live_job(redis, rows))


async def without_live_job(redis: ArqRedis, rows: list[OwedRow]) -> list[OwedRow]:
    """The rows whose job is gone (lost with Redis, or finished), or stranded: one pipelined round trip for the
    whole page. A batched lane's rows have no job of their own: each is "gone" (its lane is woken).

    Stranded: the job's data is there but it is neither in its lane's queue nor in progress, so no worker will
    ever run it, and arq refuses a new enqueue of that job id while its data exists. arq's own steps never leave
    that (enqueue, start and retry each move the keys together), but two runs of one job id do: a run the relay
    gave up as dead (`forget_dead_jobs`) that ends after the relay enqueued the id again removes the new run's
    queue entry with its own (chaos, seed 1693532603: the row stayed owed through the whole 90 s drain). Such a
    job's data is dropped here and the row enqueued again; PostgreSQL's fence makes any second send harmless."""
    if not rows:
        return []
    if all(batched(r.lane) for r in rows):
        return list(rows)
    async with redis.pipeline(transaction=False) as pipe:
        for row in rows:
            jid = job_id(row.notification_id)
            pipe.exists(job_key_prefix + jid)
            pipe.zscore(queue_name(row.lane), jid)
            pipe.exists(in_progress_key_prefix + jid)
        got = await pipe.execute()
    gone, stranded = [], []
    for i, row in enumerate(rows):
        exists, queued, running = got[3 * i], got[3 * i + 1], got[3 * i + 2]
        if not exists:
            gone.append(row)
        elif queued is None and not running and not batched(row.lane):
            stranded.append(row)
    if stranded:
        log.warning("stranded jobs re-enqueued", extra={"job_ids": [job_id(r.notification_id) for r in stranded]})
        await redis.delete(*[job_key_prefix + job_id(r.notification_id) for r in stranded])
    return gone + stranded


async def enqueue_fan_out(redis: ArqRedis, campaign_id: int) -> bool:
    """Idempotent by job id: a campaign has at most one fan-out job in flight. Wakes the bulk lane like any
    enqueue (without it an idle bulk worker started a campaign only at its next idle poll, up to a second later)."""
    job = await redis.enqueue_job(FAN_OUT_TASK, campaign_id, _job_id=fan_out_job_id(campaign_id),
                                  _queue_name=queue_name("bulk"), _defer_until=await fair_queue.front_score(redis))
    if job is not None:
        await wake_lanes(redis, ["bulk"])
    return job is not None


async def wake_fan_out(redis: ArqRedis | None, campaign_id: int) -> bool:
    """Best-effort: the relay's scan resumes any campaign still ledgering if this wake-up is lost."""
    if redis is None or not get_settings().wake_after_commit:
        return False
    try:
        return await enqueue_fan_out(redis, campaign_id)
    except Exception as exc:
        log.warning("fan-out wake-up failed: %s", type(exc).__name__)
        return False


async def enqueue_after_commit(redis: ArqRedis | None, rows: Iterable[OwedRow]) -> int:
    """Best-effort wake-ups for rows a transaction just ledgered: the relay's scan catches anything lost."""
    if redis is None or not get_settings().wake_after_commit:
        return 0
    try:
        return await enqueue(redis, rows, name_rows=True)
    except Exception as exc:
        log.warning("wake-up enqueue failed: %s", type(exc).__name__)
        return 0


async def after_commit(redis: ArqRedis | None, result: Committed) -> dict[str, int]:
    out = {"views": 0, "enqueued": 0}
    log.info("order event committed", extra={
        "tenant": result.tenant_id, "event_id": str(result.event_id), "order_id": result.order_id,
        "revision": result.revision, "status": result.status,
        "notification_ids": [r.notification_id for r in result.owed]})
    faults.hit("after_commit_before_publish")
    if redis is None:
        return out
    try:
        out["views"] = await publish_refresh(redis, result.tenant_id, result.order_id, result.revision,
                                             str(result.event_id), status=result.status)
    except Exception as exc:  # best-effort: the views reload on reconnect / revision gap
        log.warning("refresh publish failed: %s", type(exc).__name__)
    faults.hit("after_publish_before_enqueue")
    out["enqueued"] = await enqueue_after_commit(redis, result.owed)
    return out


def record_push_latency(tenant_id: int, latency_ms: float, engine: Engine | None = None) -> None:
    """One measured publish-to-render delay of a live view (shown on /ops as push p50/p99)."""
    with UnitOfWork(engine) as uow:
        uow.execute(sql_reads.PUSH_LATENCY, {"tenant_id": tenant_id, "latency_ms": latency_ms})
        uow.commit()


class Executes(Protocol):
    """A unit of work or a connection: what runs a statement."""

    def execute(self, statement: Executable, params: Mapping[str, Any] | None = None, /) -> Result[Any]: ...


def scan_owed(on: Executes, *, after: int, limit: int, horizon_seconds: float, lease_seconds: float,
              lane: str | None = None) -> Sequence[Row[Any]]:
    """The relay's recovery scan: a keyset page (ids after `after`) of owed rows due within `horizon_seconds`, of
    one lane or of every lane in id order, FOR UPDATE SKIP LOCKED through the partial indexes of owed rows
    (`sql_reads.SCAN_OWED`); each row says whether its lease ran out or it is overdue. The caller commits."""
    params = {"after": after, "limit": limit, "horizon": horizon_seconds, "lease": lease_seconds}
    if lane is None:
        return on.execute(sql_reads.SCAN_OWED, params).all()
    return on.execute(sql_reads.SCAN_OWED_LANE, {**params, "lane": lane}).all()


def explain_scan_owed(on: Executes, *, limit: int, horizon_seconds: float, lease_seconds: float, lane: str) -> str:
    """The plan of one page of a lane's scan (the scan benchmark keeps it)."""
    params = {"after": 0, "limit": limit, "horizon": horizon_seconds, "lease": lease_seconds, "lane": lane}
    return "\n".join(r[0] for r in on.execute(sql_reads.EXPLAIN_SCAN_OWED_LANE, params))
