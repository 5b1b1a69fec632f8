"""The relays compared (issue 28, item 4), each carrying the same order approvals to another service that applies
them once: (a) the after-commit enqueue, (b) the NOTIFY-woken scan, (c) the scan alone — each to the receiver's
webhook effect through 2 high-lane workers — and (d) CDC → Redis Stream → the fulfilment inbox.

On a cluster of its own with `wal_level = logical` (the system one runs replica; every path runs on the same one,
so their costs compare) and a redis-server of its own with its append-only file (`appendfsync everysec`, what
docs/relays.md recommends for the stream). Per path: commit → consumer latency at a modest paced rate (the commit's
wall clock right after it returned → the consumer's transaction time on the same machine: the receiver's
`webhook_effects.applied_at`, the inbox's `received_at`); then a burst committed as fast as one client can,
`events_per_s` from its first commit to its last application, with the cluster's CPU (the postmaster and every
backend, /proc) and the WAL it wrote over that window, per event. Then the CDC relay is stopped while approvals go
on: the WAL its slot retains after that long (`cdc_slot_retained_mb`) and, the relay started again, the seconds
until the slot is confirmed past everything written meanwhile (`cdc_catch_up_s`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis as redis_lib

from domain.orders.commands import Committed
from jobs.drills.bench.common import (
    RECEIVER_PROCS,
    SUFFIX,
    cpu_ticks,
    orders,
    pct,
    say,
    scan_alone,
    worker_ready,
)
from jobs.drills.chaos.owned import (
    OwnedPostgres,
    OwnedRedis,
    cluster_home,
    free_port,
    logical_decoding_options,
    remove_cluster_home,
)
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, fulfilment_env, receiver_database_url, wait_until

PATHS = ("enqueue", "notify", "scan", "cdc")
RELAYS_DB = f"outbox_bench_relays{SUFFIX}"
PG_HOME = f"bench-relays-pg{SUFFIX}"
LOG_DIR = ROOT / ".run" / "bench-relays-logs"
REDIS_DIR = ROOT / ".run" / f"bench-relays-redis{SUFFIX}"
WORKERS = ("worker-high", "worker-high-b")  # as the delivery step: two worker processes on the webhook lane
CONSUMED_DEADLINE_S = 300.0


@dataclass
class Cluster:
    pg: OwnedPostgres
    url: str  # our database, SQLAlchemy form

    def libpq(self, url: str | None = None) -> str:
        return (url or self.url).replace("postgresql+psycopg://", "postgresql://")

    def postmaster_pid(self) -> int:
        return int((self.pg.data / "postmaster.pid").read_text().split()[0])

    def cpu_s(self) -> float:
        """CPU seconds of the postmaster, the backends that exited (its children's counts) and the live ones."""
        master = self.postmaster_pid()
        total = cpu_ticks(master, children=True)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == master:
                    total += int(fields[11]) + int(fields[12])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
        return total / os.sysconf("SC_CLK_TCK")

    def wal_lsn(self) -> int:
        with psycopg.connect(self.libpq(), autocommit=True) as c:
            row = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
        assert row is not None
        return int(row[0])


def _approve(oid: int) -> Committed:
    from domain.orders.commands import execute_order_command

    r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench-relays", request_id="bench-relays")
    assert isinstance(r, Committed)
    return r


def _commit(ids: list[int], rate: float | None, enqueue: bool) -> dict[str, float]:
    """Approve each order (paced at `rate`, or as fast as one client can), with its wake-up enqueued after the
    commit when `enqueue`; each event id → the wall clock right after its commit returned."""
    from domain.delivery.wakeups import arq_pool, enqueue_after_commit

    committed: dict[str, float] = {}

    async def run() -> None:
        pool = await arq_pool() if enqueue else None
        t0 = time.perf_counter()
        try:
            for i, oid in enumerate(ids):
                if rate:
                    await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
                result = await asyncio.to_thread(_approve, oid)
                committed[str(result.event_id)] = time.time()
                if pool is not None:
                    await enqueue_after_commit(pool, result.owed)
        finally:
            if pool is not None:
                await pool.aclose()

    asyncio.run(run())
    return committed


def _applied(url: str, query: str) -> Callable[[dict[str, float]], dict[str, float] | None]:
    """A reader of when the consumer applied each committed event (None until every one is applied)."""
    def read(committed: dict[str, float]) -> dict[str, float] | None:
        try:
            with psycopg.connect(url) as c:
                got = {str(e): float(str(t)) for e, t in c.execute(query, (list(committed),))}
        except psycopg.Error:  # the consumer's database not migrated yet
            return None
        return got if len(got) == len(committed) else None
    return read


def _effects(cluster: Cluster) -> Callable[[dict[str, float]], dict[str, float] | None]:
    return _applied(cluster.libpq(receiver_database_url(cluster.url)),
                    "SELECT event_id, extract(epoch FROM min(applied_at)) FROM webhook_effects "
                    "WHERE event_id = ANY(%s::uuid[]) GROUP BY event_id")


def _inbox(cluster: Cluster) -> Callable[[dict[str, float]], dict[str, float] | None]:
    return _applied(cluster.libpq(fulfilment_env({"OUTBOX_DATABASE_URL": cluster.url})["FULFILMENT_DATABASE_URL"]),
                    "SELECT event_id, extract(epoch FROM received_at) FROM inbox WHERE event_id = ANY(%s::uuid[])")


def _measure(cluster: Cluster, path: str, applied: Callable[[dict[str, float]], dict[str, float] | None],
             samples: int, rate: float, burst: int) -> dict[str, float]:
    """One path's keys: latency at `rate`, then a burst's rate, CPU and WAL per event."""
    enqueue = path == "enqueue"
    paced = _commit(orders(samples), rate, enqueue)
    got = wait_until(lambda: applied(paced), CONSUMED_DEADLINE_S, f"{path}: every paced event applied")
    assert got is not None
    lat = sorted((got[e] - paced[e]) * 1000 for e in paced)
    ids = orders(burst)
    wal0, cpu0 = cluster.wal_lsn(), cluster.cpu_s()
    fast = _commit(ids, None, enqueue)
    done = wait_until(lambda: applied(fast), CONSUMED_DEADLINE_S, f"{path}: every burst event applied")
    assert done is not None
    wal1, cpu1 = cluster.wal_lsn(), cluster.cpu_s()
    span = max(done.values()) - min(fast.values())
    out = {f"relay_{path}_p50_ms": statistics.median(lat), f"relay_{path}_p99_ms": pct(lat, 0.99),
           f"relay_{path}_events_per_s": burst / span,
           f"relay_{path}_db_cpu_ms_per_event": (cpu1 - cpu0) * 1000 / burst,
           f"relay_{path}_wal_bytes_per_event": (wal1 - wal0) / burst}
    say(f"{path}: p50 {out[f'relay_{path}_p50_ms']:.0f} ms, p99 {out[f'relay_{path}_p99_ms']:.0f} ms, "
        f"{out[f'relay_{path}_events_per_s']:.0f} events/s, DB CPU {out[f'relay_{path}_db_cpu_ms_per_event']:.2f} "
        f"ms and {out[f'relay_{path}_wal_bytes_per_event']:.0f} WAL bytes per event")
    return out


def _listening(cluster: Cluster) -> bool:
    with psycopg.connect(cluster.libpq(), autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN %'").fetchone()
    return bool(row and int(row[0]))


def _slot(cluster: Cluster, slot_name: str) -> tuple[bool, int, str | None]:
    """(exists and consistent, retained bytes, confirmed position)."""
    with psycopg.connect(cluster.libpq(), autocommit=True) as c:
        row = c.execute("SELECT confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                        "FROM pg_replication_slots WHERE slot_name = %s", (slot_name,)).fetchone()
    if row is None:
        return False, 0, None
    return row[0] is not None, int(row[1] or 0), row[0]


def _confirmed_past(cluster: Cluster, slot_name: str, lsn: str) -> bool:
    with psycopg.connect(cluster.libpq(), autocommit=True) as c:
        row = c.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                        (lsn, slot_name)).fetchone()
    return bool(row and row[0])


def _outage(system: System, cluster: Cluster, seconds: float, rate: float) -> dict[str, float]:
    """The CDC relay stopped while approvals go on at `rate` for `seconds`: the WAL its slot then retains, and the
    seconds from its restart until the slot is confirmed past everything written meanwhile."""
    from domain.settings import get_settings

    slot_name = get_settings().cdc_slot
    system.procs.pop("cdc-relay").stop()
    _, retained0, _ = _slot(cluster, slot_name)
    wal0 = cluster.wal_lsn()
    n = max(2, int(seconds * rate))
    committed = _commit(orders(n), rate, False)
    wal1 = cluster.wal_lsn()
    _, retained, _ = _slot(cluster, slot_name)
    with psycopg.connect(cluster.libpq(), autocommit=True) as c:
        row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    t0 = time.monotonic()
    system.cdc_relay()
    wait_until(lambda: _confirmed_past(cluster, slot_name, str(row[0])), CONSUMED_DEADLINE_S,
               "the slot confirmed past the outage")
    catch_up = time.monotonic() - t0
    wait_until(lambda: _inbox(cluster)(committed), CONSUMED_DEADLINE_S, "the outage's events in the inbox")
    inbox_catch_up = time.monotonic() - t0
    # Retained counts from the slot's restart point, which moves only at the running-transactions records the
    # relay decodes past (every 15 s or a checkpoint): the growth is what the outage itself cost.
    out = {"cdc_slot_retained_mb": retained / 2**20, "cdc_slot_retained_growth_mb": (retained - retained0) / 2**20,
           "cdc_catch_up_s": catch_up,
           "cdc_inbox_catch_up_s": inbox_catch_up, "cdc_outage_s": seconds, "cdc_outage_events": float(n),
           "relay_producer_wal_bytes_per_event": (wal1 - wal0) / n}
    say(f"CDC relay down {seconds:g}s with {n} approvals: the slot retains {out['cdc_slot_retained_mb']:.2f} MB "
        f"({out['cdc_slot_retained_growth_mb']:+.2f} MB over the outage); "
        f"confirmed past it {catch_up:.2f}s after the restart (process start included), the inbox has them all "
        f"after {inbox_catch_up:.2f}s")
    return out


def bench_relays(samples: int = 100, rate: float = 10.0, burst: int = 300, outage_s: float = 60.0) -> dict[str, float]:
    """Every `relay_*` and `cdc_*` key, on a cluster and a redis-server of the step's own (removed afterwards);
    this process's environment and settings are put back as they were."""
    from domain.delivery.lanes import set_lane_paused
    from domain.settings import reload_settings

    saved = dict(os.environ)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(REDIS_DIR, ignore_errors=True)
    ports = {"postgres": free_port(), "redis": free_port(), "receiver": free_port(), "api": free_port()}
    pg = OwnedPostgres(ports["postgres"], cluster_home(PG_HOME) / "pg", logical_decoding_options())
    rds = OwnedRedis(ports["redis"], appendonly=True, workdir=REDIS_DIR, logfile=LOG_DIR / "redis.log",
                     fsync="everysec")
    system: System | None = None
    out: dict[str, float] = {"relay_samples": float(samples), "relay_latency_rate_per_s": rate,
                             "relay_burst": float(burst)}
    try:
        pg.init()
        pg.start()
        rds.start()
        for k in [k for k in os.environ if k.startswith("FULFILMENT_")]:
            del os.environ[k]
        os.environ.update({"OUTBOX_DATABASE_URL": f"{pg.url}/{RELAYS_DB}",
                           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{rds.port}/0"})
        isolated_environment(RELAYS_DB, 0, OUTBOX_SCAN_INTERVAL="0.5", OUTBOX_WAKE_AFTER_COMMIT="1",
                             OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{ports['receiver']}",
                             OUTBOX_APP_URL=f"http://127.0.0.1:{ports['api']}", FULFILMENT_BLOCK_MS="100")
        cluster = Cluster(pg, os.environ["OUTBOX_DATABASE_URL"])
        system = System(dict(os.environ), LOG_DIR)
        system.receiver(ports["receiver"], reset=True, workers=RECEIVER_PROCS)
        system.api(ports["api"])  # delivery receipts land here
        set_lane_paused("normal", True)  # the approvals' emails stay parked: the webhook lane alone is measured
        r = redis_lib.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
        for name in WORKERS:
            system.worker("high", name=name)
        worker_ready(r, "high")
        r.close()
        _commit(orders(5), None, True)  # warm the connections and plans
        say("(a) after-commit enqueue: each commit followed by its wake-up; no relay")
        out.update(_measure(cluster, "enqueue", _effects(cluster), samples, rate, burst))
        say("(b) NOTIFY-woken scan: no wake-up after commit; the relay LISTENs and scans what the NOTIFY names")
        system.relay()
        wait_until(lambda: _listening(cluster), 60, "the relay's LISTEN")  # its start-up is not the path's cost
        out.update(_measure(cluster, "notify", _effects(cluster), samples, rate, burst))
        system.procs.pop("relay").stop()
        say("(c) the scan alone: no wake-up, no relay; the recovery scan every OUTBOX_SCAN_INTERVAL (0.5 s)")
        with scan_alone(0.5):
            out.update(_measure(cluster, "scan", _effects(cluster), samples, rate, burst))
        for name in WORKERS:
            system.procs.pop(name).stop()
        say("(d) CDC → stream → inbox: the CDC relay (a new slot) and the fulfilment service; no workers")
        system.cdc_relay()
        wait_until(lambda: _slot(cluster, "outbox_cdc")[0], 60, "the CDC relay's slot at its consistent point")
        system.fulfilment()
        warm = _commit(orders(3), None, False)
        wait_until(lambda: _inbox(cluster)(warm), 120, "the fulfilment service to apply its first events")
        out.update(_measure(cluster, "cdc", _inbox(cluster), samples, rate, burst))
        out.update(_outage(system, cluster, outage_s, rate))
    finally:
        if system is not None:
            system.stop_all()
        rds.stop()
        pg.stop()
        pg.keep_log(LOG_DIR / "postgres.log")
        remove_cluster_home(PG_HOME)
        shutil.rmtree(REDIS_DIR, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)
        reload_settings()
    return out
