"""Lanes (seed 002's promise, measured): one-time codes idle and with a campaign in flight, the campaign's fan-out
beside a bare INSERT … SELECT of the same rows, and its sending rate with the bulk bucket set high beside the mock
provider's own capacity."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import httpx
import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.settings import get_settings
from jobs.drills.bench.common import codes, pct, provider_latency_ms, say, worker_ready
from jobs.ops.procs import System, wait_until, wait_worker_ready

HIGH_BUCKET = 10_000.0  # per second: the bucket out of the way, so the provider or we are the limit


async def raw_provider_posts(n: int, concurrency: int) -> tuple[float, list[float]]:
    """The mock provider alone: provider POSTs straight from one client (its capacity, and a code's bare round
    trip)."""
    s = get_settings()
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    async with httpx.AsyncClient(timeout=10) as client:
        async def one() -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(f"{s.receiver_url}/providers/sms/messages", json={
                    "to": "+15550000000", "template": "raw", "idempotency_key": f"raw-{uuid.uuid4().hex}"})
                lat.append((time.perf_counter() - t) * 1000)
                assert r.status_code in (200, 201), r.text

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0), sorted(lat)


def _breakdown(notification_ids: list[int], committed: dict[int, float]) -> dict[str, list[float]]:
    """Where a code's time goes, phase by phase (ms, each list sorted): `commit` its own request's transaction
    (its `created_at`, the transaction's start, to the commit returning in the asking process), `wake` from that
    commit to its critical worker's claim starting (`claimed_at`), `claim` the claim's transaction until the attempt
    starts, `provider_round_trip` the provider's round trip as the worker timed it."""
    with UnitOfWork() as uow:
        rows = uow.execute(sa.text(
            "SELECT n.id, extract(epoch FROM n.created_at) AS created, extract(epoch FROM n.claimed_at) AS claimed, "
            "extract(epoch FROM a.started_at) AS started, a.latency_ms AS send "
            "FROM notifications n JOIN notification_attempts a ON a.notification_id = n.id "
            "WHERE n.id = ANY(:i) AND a.outcome IN ('sent', 'already_processed')"), {"i": notification_ids}).all()
    phases: dict[str, list[float]] = {name: [] for name in (
        "commit", "wake", "claim", "provider_round_trip", "until_claimed")}
    for r in rows:
        done = committed.get(int(r.id), float(r.created))
        phases["commit"].append((done - float(r.created)) * 1000)
        phases["wake"].append((float(r.claimed) - done) * 1000)
        phases["claim"].append((float(r.started) - float(r.claimed)) * 1000)
        phases["provider_round_trip"].append(float(r.send))
        phases["until_claimed"].append((float(r.started) - float(r.created)) * 1000)
    return {k: sorted(v) for k, v in phases.items()}


def _phase_keys(phases: dict[str, list[float]], when: str) -> dict[str, float]:
    return {f"otp_{q}_ms_{when}_{name}": f(v) for name, v in phases.items() if v
            for q, f in (("p50", statistics.median), ("p99", lambda v: pct(v, 0.99)))}


_RAW_INSERT = (
    "INSERT INTO {table} (id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, cost_cents, "
    "attempts, max_attempts, reserved_cents, next_attempt_at, created_at, job_id) "
    "SELECT r.id, 42, r.ref, 'email', 'bulk', 'offer', '{{}}', 'raw:' || r.ref, 'QUEUED', 1, 0, 8, 0, now(), now(), "
    "'n-' || r.id FROM recipients r WHERE r.tenant_id = 42 AND r.email IS NOT NULL")


def _raw_insert_select(recipients: int) -> tuple[float, float]:
    """Raw baselines: the same rows selected and written by one bare INSERT … SELECT — into a temporary table
    (no index, no WAL: the floor of what PostgreSQL can do), and into a table with every index and constraint of
    `notifications` but its foreign keys, written to the WAL as the ledger is (what the same rows cost to keep)."""
    out = []
    for create in ("CREATE TEMP TABLE raw_copy AS SELECT * FROM notifications WHERE false",
                   "CREATE TABLE raw_copy (LIKE notifications INCLUDING ALL)"):
        with UnitOfWork() as uow:
            uow.execute(sa.text(create))
            t0 = time.perf_counter()
            uow.execute(sa.text(_RAW_INSERT.format(table="raw_copy")))
            out.append(recipients / (time.perf_counter() - t0))
            # never committed: the table goes with the transaction
    return out[0], out[1]


def _sent(cid: int) -> int:
    from domain.campaigns import views as campaign_views

    return int(campaign_views.status(42, cid)["sent"])  # type: ignore[index]


def _rate(cid: int, window: float) -> float:
    s0, w0 = _sent(cid), time.perf_counter()
    wait_until(lambda: time.perf_counter() - w0 >= window, window + 5, "the measuring window")
    return (_sent(cid) - s0) / (time.perf_counter() - w0)


def bench_lanes(system: System, r: redis_lib.Redis, recipients: int, n_codes: int,
                window: float) -> dict[str, float]:
    from domain.campaigns import fan_out as campaign_fan_out
    from domain.campaigns import views as campaign_views
    from domain.delivery.wakeups import arq_pool, enqueue_fan_out
    from domain.ledger.recipients import find_by_ref
    from jobs.ops.seed import seed_recipients

    ((_, rid),) = find_by_ref(42, "cust-002")
    raw_rate, raw_lat = asyncio.run(raw_provider_posts(500, 16))
    system.worker("critical")
    system.worker("bulk")
    for lane in ("critical", "bulk"):  # process start-up is not part of a code's latency
        wait_worker_ready(r, lane, 60)
    codes(3, rid)  # warm connections and plans, as a running system has them
    idle_committed: dict[int, float] = {}
    idle_ids = codes(n_codes, rid, idle_committed)
    idle = provider_latency_ms(idle_ids)
    say(f"{n_codes} codes idle: p99 {pct(idle, 0.99):.0f} ms; seeding {recipients} recipients")
    seed_recipients(recipients)
    raw_insert, raw_insert_indexed = _raw_insert_select(recipients)
    cid = campaign_fan_out.create(tenant_id=42, name="bench", segment="all_reachable", template="offer",
                                  channel="email", actor_ref="bench")
    t0 = time.perf_counter()

    async def start() -> None:
        pool = await arq_pool()
        try:
            await enqueue_fan_out(pool, cid)
        finally:
            await pool.aclose()

    asyncio.run(start())
    total = campaign_views.status(42, cid)["total"]  # type: ignore[index]
    wait_until(lambda: campaign_views.status(42, cid)["ledgered"] >= total, 600, "the fan-out")  # type: ignore[index]
    ledgered_per_s = total / (time.perf_counter() - t0)
    say(f"campaign of {total} ledgered at {ledgered_per_s:.0f}/s; codes with it in flight")
    wait_until(lambda: _sent(cid) >= 200, 120, "the campaign to be sending")
    w0 = time.perf_counter()
    busy_committed: dict[int, float] = {}
    busy_ids = codes(n_codes, rid, busy_committed)
    busy = provider_latency_ms(busy_ids)
    idle_phases, busy_phases = _breakdown(idle_ids, idle_committed), _breakdown(busy_ids, busy_committed)
    sent_per_s = _rate(cid, max(1.0, window - (time.perf_counter() - w0)))
    say(f"bulk bucket {HIGH_BUCKET:.0f}/s: the campaign's sending rate against the provider's capacity")
    system.procs.pop("worker-bulk").stop()
    system.env["OUTBOX_BULK_RATE"] = str(HIGH_BUCKET)
    try:
        system.worker("bulk")
        worker_ready(r, "bulk")  # the stopped worker's health key is dropped first: wait for the new one
        sent_high = _rate(cid, window / 2)
    finally:
        del system.env["OUTBOX_BULK_RATE"]
    campaign_fan_out.cancel(42, cid)
    return {
        "raw_provider_p50_ms": statistics.median(raw_lat), "raw_provider_p99_ms": pct(raw_lat, 0.99),
        "raw_provider_posts_per_s_16_concurrent": raw_rate,
        "otp_p50_ms_idle": statistics.median(idle), "otp_p99_ms_idle": pct(idle, 0.99),
        "otp_p50_ms_bulk": statistics.median(busy), "otp_p99_ms_bulk": pct(busy, 0.99),
        "ratio_otp_p99_bulk_vs_idle": pct(busy, 0.99) / max(0.001, pct(idle, 0.99)),
        # Where a code's time goes with the campaign in flight: waiting for a critical worker to claim it (our
        # side), and the provider's round trip (the mock provider shares this machine's two cores).
        # By phase, idle and busy (`_breakdown`): which phase the campaign slows.
        **_phase_keys(idle_phases, "idle"), **_phase_keys(busy_phases, "bulk"),
        "campaign_recipients": total, "campaign_ledgered_per_s": ledgered_per_s,
        "raw_insert_select_rows_per_s": raw_insert, "ratio_ledgered_vs_raw_insert": ledgered_per_s / raw_insert,
        "raw_insert_select_indexed_rows_per_s": raw_insert_indexed,
        "ratio_ledgered_vs_raw_indexed_insert": ledgered_per_s / raw_insert_indexed,
        "campaign_sent_per_s": sent_per_s, "bulk_rate_setting_per_s": get_settings().bulk_rate_per_second,
        "ratio_sent_vs_raw_provider_capacity": sent_per_s / raw_rate,
        "campaign_sent_per_s_bucket_high": sent_high,
        "campaign_sent_ratio": sent_high / min(HIGH_BUCKET, raw_rate),
    }


def lanes_keys(lanes: dict[str, float]) -> dict[str, float]:
    """Issue 17's flat keys, each beside its raw baseline from the same run."""
    keep = ("otp_p99_ms_idle", "otp_p99_ms_bulk", "ratio_otp_p99_bulk_vs_idle", "raw_provider_p99_ms",
            "campaign_ledgered_per_s", "raw_insert_select_rows_per_s", "ratio_ledgered_vs_raw_insert",
            "raw_insert_select_indexed_rows_per_s", "ratio_ledgered_vs_raw_indexed_insert",
            "campaign_sent_ratio", "campaign_sent_per_s_bucket_high", "raw_provider_posts_per_s_16_concurrent")
    return {k: lanes[k] for k in keep}
