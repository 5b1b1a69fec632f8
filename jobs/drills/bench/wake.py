"""Wake-ups, the system at rest: commit of a one-time code to its critical worker starting the attempt (woken after
commit, then woken through the relay's NOTIFY), beside a bare commit -> PUBLISH -> other process's UPDATE; then the
CPU every process burns doing nothing and the memory they hold."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
import uuid
from datetime import datetime
from functools import partial
from typing import Any, cast

import psycopg
import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.delivery.queue import LANES
from domain.settings import reload_settings
from jobs.drills.bench.common import (
    codes,
    cpu_ticks,
    pct,
    rss_total_mb,
    say,
    scan_alone,
    system_pids,
    worker_ready,
)
from jobs.ops.procs import System, wait_until


def idle_cpu(system: System, seconds: float = 10.0) -> dict[str, float]:
    """% of one core each running process of the system (and its children) burns over `seconds` of rest."""
    procs = system_pids(system)
    before = {name: sum(map(cpu_ticks, pids)) for name, pids in procs.items()}
    time.sleep(seconds)
    tick = os.sysconf("SC_CLK_TCK")
    out = {f"idle_cpu_pct.{name}": (sum(map(cpu_ticks, pids)) - before[name]) / tick / seconds * 100
           for name, pids in procs.items()}
    return {"idle_cpu_pct": sum(out.values()), **out}


def _wake_ms(committed: dict[int, float]) -> tuple[list[float], list[float]]:
    """Commit to the worker's claim transaction starting (`claimed_at`, PostgreSQL's now() on the same machine),
    and commit to the worker starting the attempt (after the claim's one transaction)."""
    with UnitOfWork() as uow:
        rows = uow.execute(sa.text(
            "SELECT n.id, n.claimed_at, min(a.started_at) AS started FROM notifications n "
            "JOIN notification_attempts a ON a.notification_id = n.id WHERE n.id = ANY(:i) "
            "GROUP BY n.id, n.claimed_at"),
            {"i": list(committed)}).all()
    return (sorted((r.claimed_at.timestamp() - committed[r.id]) * 1000 for r in rows),
            sorted((r.started.timestamp() - committed[r.id]) * 1000 for r in rows))


def _raw_waker(redis_url: str, db_url: str, channel: str) -> None:
    """The raw baseline's other process: on each pub/sub message, one UPDATE of the row it names (autocommit)."""
    r = redis_lib.Redis.from_url(redis_url)
    pubsub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(channel)
    with psycopg.connect(db_url, autocommit=True) as conn:
        for message in pubsub.listen():
            conn.execute("UPDATE bench_wake SET claimed_at = clock_timestamp() WHERE id = %s", (int(message["data"]),))


def _claimed_at(conn: psycopg.Connection[Any], row_id: int) -> datetime | None:
    row = conn.execute("SELECT claimed_at FROM bench_wake WHERE id = %s", (row_id,)).fetchone()
    return row[0] if row else None


def _raw_wake_ms(r: redis_lib.Redis, n: int) -> list[float]:
    """Raw baseline of a wake-up: commit a row by raw psycopg, PUBLISH its id, another process UPDATEs it."""
    url = os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    channel = f"bench:raw_wake:{uuid.uuid4().hex}"
    proc = multiprocessing.get_context("spawn").Process(
        target=_raw_waker, args=(os.environ["OUTBOX_REDIS_URL"], url, channel), daemon=True)
    proc.start()
    out = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_wake (id serial PRIMARY KEY, claimed_at timestamptz)")
            wait_until(lambda: cast(list[tuple[bytes, int]], r.pubsub_numsub(channel))[0][1] > 0, 30,
                       "the raw waker to subscribe")
            for _ in range(n + 3):  # the first three warm the connections
                row = conn.execute("INSERT INTO bench_wake DEFAULT VALUES RETURNING id").fetchone()
                assert row is not None
                committed = time.time()
                r.publish(channel, row[0])
                got = wait_until(partial(_claimed_at, conn, row[0]), 10, "the raw wake-up")
                assert got is not None
                out.append((got.timestamp() - committed) * 1000)
    finally:
        proc.kill()
    return sorted(out[3:])


def bench_wake(system: System, r: redis_lib.Redis, n_codes: int, seconds: float = 10.0) -> dict[str, float]:
    """The whole system at rest (4 lane workers, relay, receiver, API): commit-to-attempt of one-time codes on the
    critical lane, one at a time, then the CPU every process burns doing nothing."""
    from domain.ledger.recipients import find_by_ref

    ((_, rid),) = find_by_ref(42, "cust-002")
    for lane in LANES:
        if f"worker-{lane}" not in system.procs or not system.procs[f"worker-{lane}"].alive():
            system.worker(lane)
            worker_ready(r, lane)
    if "relay" not in system.procs or not system.procs["relay"].alive():
        system.relay()
    codes(3, rid)  # warm connections and plans
    committed: dict[int, float] = {}
    codes(n_codes, rid, committed)
    to_claim, wake = _wake_ms(committed)
    # The same codes with no wake-up after commit: the commit's NOTIFY wakes the relay, whose scan enqueues them.
    os.environ["OUTBOX_WAKE_AFTER_COMMIT"] = "0"
    reload_settings()
    try:
        via_relay: dict[int, float] = {}
        codes(n_codes, rid, via_relay)
        say("scan only: the relay stopped, its scan run from here every OUTBOX_SCAN_INTERVAL")
        scan_only = _scan_only(system, n_codes, rid)
    finally:
        del os.environ["OUTBOX_WAKE_AFTER_COMMIT"]
        reload_settings()
    _, relay_wake = _wake_ms(via_relay)
    raw = _raw_wake_ms(r, n_codes)
    time.sleep(2)  # the relay's and the workers' last wake-ups settle
    return {"wake_p50_ms": statistics.median(wake), "wake_p99_ms": pct(wake, 0.99), "wake_max_ms": wake[-1],
            "wake_raw_p50_ms": statistics.median(raw), "wake_raw_p99_ms": pct(raw, 0.99),
            # of which: until the worker's claim began (enqueue, wake-up, arq's pick-up); the rest is the claim
            "wake_until_claim_p50_ms": statistics.median(to_claim), "wake_until_claim_p99_ms": pct(to_claim, 0.99),
            "wake_via_relay_p50_ms": statistics.median(relay_wake), "wake_via_relay_p99_ms": pct(relay_wake, 0.99),
            "wake_scan_only_p50_ms": statistics.median(scan_only), "wake_scan_only_p99_ms": pct(scan_only, 0.99),
            **idle_cpu(system, seconds), "rss_total_mb_idle": rss_total_mb(system)}




def _scan_only(system: System, n: int, rid: int) -> list[float]:
    """Commit-to-attempt with no wake-up after commit and no relay listening: only the recovery scan, every
    `OUTBOX_SCAN_INTERVAL`, finds the codes (the same `scan_once` the relay runs). The relay is restarted after."""
    from domain.settings import get_settings

    system.procs.pop("relay").stop()
    committed: dict[int, float] = {}
    try:
        with scan_alone(get_settings().scan_interval):
            codes(n, rid, committed)
    finally:
        system.relay()
    return _wake_ms(committed)[1]
