"""Delivery: a committed webhook backlog drained by 2 workers on the lane beside the receiver's own capacity; then
commit-to-effect latency at half that rate (each commit woken after commit, as the API does); then recovery after
a Redis FLUSHDB (the relay's scan only)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid

import httpx
import redis as redis_lib
import sqlalchemy as sa

from domain.delivery.lanes import set_lane_paused
from domain.delivery.signing import signed_headers
from domain.orders.commands import Committed, execute_order_command
from domain.settings import get_settings
from jobs.drills.bench import lean
from jobs.drills.bench.common import (
    CpuWindow,
    PgCpu,
    RssPeak,
    orders,
    owed_webhooks,
    pct,
    receiver_engine,
    say,
    wait_drained,
    worker_ready,
)
from jobs.ops.procs import System, wait_until

WORKERS = ("worker-high", "worker-high-b")  # two worker processes on the lane, as issue 17 measures it


async def raw_posts(n: int, concurrency: int) -> float:
    """Signed webhook POSTs straight to the receiver: its capacity, measured in the same run."""
    s = get_settings()
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=10) as client:
        async def one() -> None:
            eid = str(uuid.uuid4())
            body = json.dumps({"event_id": eid, "schema_version": 1, "payload": {}})
            h = {**signed_headers(s.webhook_secret, eid, body), "Idempotency-Key": eid}
            async with sem:
                r = await client.post(f"{s.receiver_url}/webhooks/orders", content=body, headers=h)
                assert r.status_code == 200, r.text

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0)


def _approve(oid: int) -> Committed:
    r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench", request_id="bench")
    assert isinstance(r, Committed)
    return r


def bench_delivery(system: System, n: int, r: redis_lib.Redis) -> dict[str, float]:
    set_lane_paused("high", True)
    set_lane_paused("normal", True)  # emails stay parked: we measure the webhook lane alone
    for oid in orders(n):
        _approve(oid)
    backlog = owed_webhooks()  # the commit step's approvals are owed too: count what is drained, not what we added
    system.relay()
    for name in WORKERS:
        system.worker("high", name=name)
    worker_ready(r, "high")
    say(f"draining {backlog} webhooks")
    with RssPeak(system) as rss, CpuWindow(system) as cpu, PgCpu() as pg:
        set_lane_paused("high", False)  # NOTIFY wakes the relay, which enqueues the backlog
        took = wait_drained()
    raw_seq = asyncio.run(raw_posts(n, 1))
    raw_par = asyncio.run(raw_posts(n, 10))
    ours, theirs = cpu.ours(), cpu.receiver()
    return {"backlog": backlog, "outbox_deliveries_per_s": backlog / took, "raw_sequential_posts_per_s": raw_seq,
            "raw_10_concurrent_posts_per_s": raw_par, "ratio_vs_sequential": (backlog / took) / raw_seq,
            "ratio_vs_10_concurrent": (backlog / took) / raw_par, "rss_total_mb_load": rss.peak_mb,
            "cpu_ms_per_delivery": ours * 1000 / backlog,
            "receiver_cpu_share": theirs / (ours + theirs) if ours + theirs > 0 else 0.0,
            "receiver_cpu_ms_per_delivery": theirs * 1000 / backlog,
            "pg_cpu_ms_per_delivery": pg.used * 1000 / backlog,
            **{f"cpu_s.{name}": v for name, v in sorted(cpu.used.items())}}


def bench_lean(backlog: int) -> dict[str, float]:
    """The lean probe (lean.py) on a backlog of the delivery step's size, committed the same way (order approvals),
    its lane paused and no worker or relay running: the probe alone claims it."""
    set_lane_paused("high", True)
    set_lane_paused("normal", True)
    before = owed_webhooks()
    for oid in orders(backlog):
        _approve(oid)
    say(f"lean probe draining {owed_webhooks() - before} new webhooks ({before} owed before)")
    with PgCpu() as pg:
        got = lean.run_probe(lane="high")
    set_lane_paused("high", False)
    return {"lean_backlog": float(backlog), "lean_delivered": got["delivered"], "lean_batches": got["batches"],
            "e2e_lean_per_s": got["per_s"], "lean_cpu_ms_per_delivery":
                got["cpu_s"] * 1000 / got["delivered"] if got["delivered"] else 0.0,
            "lean_pg_cpu_ms_per_delivery": pg.used * 1000 / got["delivered"] if got["delivered"] else 0.0}


def e2e_keys(delivery: dict[str, float]) -> dict[str, float]:
    """The delivery step as issue 17's flat keys: committed backlog to receiver effects, beside the receiver's own
    capacity (signed POSTs straight to it, 10 at a time) measured in the same run."""
    return {"e2e_events_per_s": delivery["outbox_deliveries_per_s"],
            "receiver_raw_posts_per_s": delivery["raw_10_concurrent_posts_per_s"],
            "e2e_ratio_vs_receiver_raw": delivery["ratio_vs_10_concurrent"],
            "rss_total_mb_load": delivery["rss_total_mb_load"],
            "cpu_ms_per_delivery": delivery["cpu_ms_per_delivery"],
            "pg_cpu_ms_per_delivery": delivery["pg_cpu_ms_per_delivery"],
            "receiver_cpu_share": delivery["receiver_cpu_share"]}


def lean_keys(delivery: dict[str, float], probe: dict[str, float]) -> dict[str, float]:
    """The lean probe beside the real workers' rate (and, kept beside them, the receiver's raw capacity)."""
    return {"e2e_lean_per_s": probe["e2e_lean_per_s"],
            "e2e_ratio_lean": delivery["outbox_deliveries_per_s"] / probe["e2e_lean_per_s"]
            if probe["e2e_lean_per_s"] else 0.0,
            "lean_cpu_ms_per_delivery": probe["lean_cpu_ms_per_delivery"],
            "lean_pg_cpu_ms_per_delivery": probe["lean_pg_cpu_ms_per_delivery"]}


def bench_e2e_latency(rate: float, seconds: float = 10.0, most: int = 300) -> dict[str, float]:
    """Commit to the receiver's effect, orders approved at `rate` per second (half the saturating rate) with the
    workers of the delivery step running, each commit followed by its wake-up as the API does. Raw baseline: the
    receiver's own round trip for one signed POST (its effect ledger write included)."""
    from domain.delivery.wakeups import after_commit, arq_pool

    count = max(20, min(most, int(rate * seconds)))
    ids = orders(count)
    committed: dict[str, float] = {}

    async def run() -> None:
        pool = await arq_pool()
        t0 = time.perf_counter()
        try:
            for i, oid in enumerate(ids):
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
                result = await asyncio.to_thread(_approve, oid)
                committed[str(result.event_id)] = time.time()
                await after_commit(pool, result)
        finally:
            await pool.aclose()

    say(f"{count} orders at {rate:.0f}/s, commit to receiver effect")
    asyncio.run(run())

    def effects() -> dict[str, float]:
        with receiver_engine().connect() as c:
            return {str(row.event_id): row.applied_at.timestamp() for row in c.execute(sa.text(
                "SELECT event_id, min(applied_at) AS applied_at FROM webhook_effects "
                "WHERE event_id = ANY(CAST(:e AS uuid[])) GROUP BY event_id"), {"e": list(committed)})}

    def all_effects() -> dict[str, float] | None:
        got = effects()
        return got if len(got) == len(committed) else None

    got = wait_until(all_effects, 120, "every effect")
    assert got is not None
    lat = sorted((got[e] - committed[e]) * 1000 for e in committed)
    raw = asyncio.run(_raw_post_latency(50))
    return {"e2e_p50_ms": statistics.median(lat), "e2e_p99_ms": pct(lat, 0.99), "e2e_latency_rate_per_s": rate,
            "e2e_latency_events": float(count), "e2e_raw_post_p50_ms": statistics.median(raw),
            "e2e_raw_post_p99_ms": pct(raw, 0.99)}


async def _raw_post_latency(n: int) -> list[float]:
    s = get_settings()
    out = []
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(n):
            eid = str(uuid.uuid4())
            body = json.dumps({"event_id": eid, "schema_version": 1, "payload": {}})
            h = {**signed_headers(s.webhook_secret, eid, body), "Idempotency-Key": eid}
            t = time.perf_counter()
            r = await client.post(f"{s.receiver_url}/webhooks/orders", content=body, headers=h)
            out.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.text
    return sorted(out)


def bench_recovery(system: System, n: int, r: redis_lib.Redis) -> dict[str, float]:
    set_lane_paused("high", True)
    for oid in orders(n):
        _approve(oid)
    system.worker("high", name="worker-high-2")
    worker_ready(r, "high")
    r.flushdb()  # every wake-up is gone
    set_lane_paused("high", False)
    t0 = time.perf_counter()
    system.relay()
    wait_drained()
    took = time.perf_counter() - t0
    return {"backlog": n, "seconds_to_drain_after_flush": took, "deliveries_per_s": n / took}
