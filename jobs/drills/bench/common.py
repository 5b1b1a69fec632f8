"""What every bench step shares: its database and ports, orders to command, codes to ask for, waiting, percentiles,
and the CPU and memory of the processes it runs."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import redis as redis_lib
import sqlalchemy as sa
from arq.constants import health_check_key_suffix

from domain.db import UnitOfWork
from domain.delivery.queue import queue_name
from jobs.ops.procs import System, receiver_database_url, wait_until, wait_worker_ready

# A parallel checkout (OUTBOX_TEST_SLOT, see tests/conftest.py) gets its own databases and ports.
_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
SUFFIX = f"_s{_SLOT}" if _SLOT else ""
BENCH_DB = f"outbox_bench{SUFFIX}"
SCAN_DB = f"outbox_bench_scan{SUFFIX}"  # kept between runs: 1,001,000 ledger rows are built once
BENCH_REDIS_DB, RECEIVER_PORT, API_PORT = 4, 8096 + 100 * _SLOT, 8093 + 100 * _SLOT
# The mock receiver's server processes in the bench: one more than its default 2, so a process descheduled by
# the workers beside it on these 2 cores does not halve its capacity (the target is ≥ 400 webhooks/s through it).
RECEIVER_PROCS = 3
T0 = time.perf_counter()


@contextmanager
def settings_on(database_url: str) -> Iterator[None]:
    """The process's settings (and so its engine: `send`, the seed, the long way's sync steps) on `database_url` for
    the block, a bench step's database of its own; back on the bench's after it."""
    from domain.settings import reload_settings

    before = os.environ.get("OUTBOX_DATABASE_URL")
    os.environ["OUTBOX_DATABASE_URL"] = database_url
    reload_settings()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OUTBOX_DATABASE_URL", None)
        else:
            os.environ["OUTBOX_DATABASE_URL"] = before
        reload_settings()


def say(msg: str) -> None:
    """Progress, with the seconds since the bench started."""
    print(f"      [{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def orders(n: int) -> list[int]:
    with UnitOfWork() as uow:
        ids = uow.execute(sa.text(
            "INSERT INTO orders (tenant_id, status, revision, base_revision, customer_ref, amount_cents, currency) "
            "SELECT 42, 'authorized', 1, 1, 'cust-001', 100, 'EUR' FROM generate_series(1, :n) RETURNING id"),
            {"n": n}).scalars().all()
        uow.commit()
    return list(ids)


def owed_webhooks() -> int:
    with UnitOfWork() as uow:
        return int(uow.execute(sa.text("SELECT count(*) FROM notifications WHERE status = 'QUEUED' "
                                       "AND channel = 'webhook'")).scalar_one())


def wait_drained(timeout: float = 300) -> float:
    t0 = time.perf_counter()
    last = [0.0]

    def drained() -> bool:
        left = owed_webhooks()
        if time.perf_counter() - last[0] > 5:
            say(f"{left} webhooks still owed")
            last[0] = time.perf_counter()
        return left == 0

    wait_until(drained, timeout, "the webhook backlog to drain")
    return time.perf_counter() - t0


def worker_ready(r: redis_lib.Redis, lane: str) -> None:
    """arq writes its health-check key as soon as the worker polls: process start-up is not part of the run."""
    r.delete(queue_name(lane) + health_check_key_suffix)
    wait_worker_ready(r, lane, 60)


def sent(nid: int) -> bool:
    with UnitOfWork() as uow:
        return bool(uow.execute(sa.text("SELECT sent_at IS NOT NULL FROM notifications WHERE id = :i"),
                                {"i": nid}).scalar())


def codes(n: int, recipient_id: int, committed: dict[int, float] | None = None) -> list[int]:
    """One code at a time, as people ask for them: ask, wait until the provider has it, ask the next. `committed`
    gets each code's commit time (this process's wall clock, right after the ledger commit returned)."""
    from domain.delivery.wakeups import arq_pool, enqueue_after_commit
    from domain.ledger import otp

    async def run() -> list[int]:
        pool = await arq_pool()
        ids = []
        try:
            for _ in range(n):
                row = otp.request(42, recipient_id, "sms", datetime.now(UTC))
                assert row is not None
                if committed is not None:
                    committed[row.notification_id] = time.time()
                await enqueue_after_commit(pool, [row.owed()])
                await asyncio.to_thread(wait_until, lambda nid=row.notification_id: sent(nid), 30, "a code")
                ids.append(row.notification_id)
        finally:
            await pool.aclose()
        return ids

    return asyncio.run(run())


def provider_latency_ms(notification_ids: list[int]) -> list[float]:
    """Request to provider accepted: from the ledger row's commit to the provider's own receipt of the request
    (both clocks are the one PostgreSQL server's)."""
    with UnitOfWork() as uow:
        keys: dict[str, datetime] = {r.dedupe_key: r.created_at for r in uow.execute(sa.text(
            "SELECT dedupe_key, created_at FROM notifications WHERE id = ANY(:i)"), {"i": notification_ids})}
    with receiver_engine().connect() as c:
        got: dict[str, datetime] = {r.idempotency_key: r.received_at for r in c.execute(sa.text(
            "SELECT idempotency_key, received_at FROM provider_messages WHERE idempotency_key = ANY(:k)"),
            {"k": list(keys)})}
    return sorted((got[k] - keys[k]).total_seconds() * 1000 for k in keys)


_RECEIVER_ENGINES: dict[str, sa.Engine] = {}


def receiver_engine() -> sa.Engine:
    url = receiver_database_url(os.environ["OUTBOX_DATABASE_URL"])
    if url not in _RECEIVER_ENGINES:
        _RECEIVER_ENGINES[url] = sa.create_engine(url, pool_size=1)
    return _RECEIVER_ENGINES[url]


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_ticks(pid: int, children: bool = False) -> int:
    """utime + stime of one process, in clock ticks (/proc/<pid>/stat fields 14 and 15); with `children`, also
    cutime + cstime (fields 16 and 17: what its children that have exited and been waited for used)."""
    try:
        fields = _stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0
    own = int(fields[11]) + int(fields[12])
    return own + int(fields[13]) + int(fields[14]) if children else own


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds used so far by these processes and their exited children (live children are in `pids`)."""
    return sum(cpu_ticks(pid, children=True) for pid in pids) / os.sysconf("SC_CLK_TCK")


# Whose CPU a delivery costs: our processes (the receiver is the outside world, counted apart). PostgreSQL and Redis
# are shared with other work on this machine and left out.
OURS = ("worker-", "relay", "api")


def is_ours(name: str) -> bool:
    return name.startswith(OURS)


class CpuWindow:
    """CPU seconds of every running process of `system` (each with its children, /proc) over a `with` block: the
    processes are listed as it begins; one gone by its end counts nothing (never less than nothing), a child started
    inside it (a uvicorn worker restarted) counts from zero."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.used: dict[str, float] = {}

    @staticmethod
    def _read(pids: list[int]) -> dict[int, float]:
        tick = os.sysconf("SC_CLK_TCK")
        return {pid: cpu_ticks(pid, children=True) / tick for pid in pids}

    def __enter__(self) -> CpuWindow:
        self._start = {name: self._read(pids) for name, pids in system_pids(self.system).items()}
        return self

    def __exit__(self, *exc: object) -> None:
        now = system_pids(self.system)
        self.used = {}
        for name, start in self._start.items():
            end = self._read(sorted(set(start) | set(now.get(name, []))))
            self.used[name] = sum(max(0.0, v - start.get(pid, 0.0)) for pid, v in end.items() if v > 0)

    def ours(self) -> float:
        return sum(v for name, v in self.used.items() if is_ours(name))

    def receiver(self) -> float:
        return sum(v for name, v in self.used.items() if name.startswith("receiver"))


class PgCpu:
    """CPU seconds of the PostgreSQL backends serving this database over a `with` block (/proc, the bench runs
    beside the server as root), sampled every 50 ms in a thread: a backend that connected inside the block counts
    from zero (its whole life is in it), any other from when it was first seen, and one that left inside it up to
    its last sample. The server's own processes (WAL writer, checkpointer) are shared with everything else on the
    machine and left out."""

    used = 0.0
    INTERVAL_S = 0.05

    def __init__(self) -> None:
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._began: datetime | None = None

    def _backends(self) -> list[tuple[int, bool]]:
        """(pid, connected since the block began) of every other backend of this database."""
        with UnitOfWork() as uow:
            if self._began is None:
                self._began = uow.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            return [(int(r.pid), bool(r.new)) for r in uow.execute(sa.text(
                "SELECT pid, backend_start >= :began AS new FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"), {"began": self._began})]

    def _sample(self) -> None:
        for pid, new in self._backends():
            ticks = cpu_ticks(pid)
            self._first.setdefault(pid, 0 if new else ticks)
            self._last[pid] = max(ticks, self._last.get(pid, 0))

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self._sample()

    def __enter__(self) -> PgCpu:
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.used = sum(max(0, self._last[pid] - self._first[pid]) for pid in self._first) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def session_pids(sid: int) -> list[int]:
    """Every process of one of our sessions (the supervisor starts each process in its own; children included)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == sid:
                pids.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return pids


def system_pids(system: System) -> dict[str, list[int]]:
    return {name: session_pids(p.popen.pid) for name, p in system.procs.items() if p.alive() and p.popen}


def rss_total_mb(system: System) -> float:
    """Resident memory of every process the bench runs (and their children), plus this process."""
    kb = sum(rss_kb(pid) for pids in system_pids(system).values() for pid in pids) + rss_kb(os.getpid())
    return kb / 1024


class RssPeak:
    """The highest total RSS seen while a step runs, sampled every half second in a thread."""

    def __init__(self, system: System) -> None:
        self.system, self.peak_mb = system, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, rss_total_mb(self.system))
            self._stop.wait(0.5)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def scan_alone(interval: float) -> Iterator[None]:
    """The recovery scan every `interval`, run from here with no relay listening (the relay's own `scan_once`)."""
    from domain.delivery.wakeups import arq_pool
    from jobs.relay import scan_once

    stop = threading.Event()

    async def loop() -> None:
        redis = await arq_pool()
        try:
            while not stop.is_set():
                await scan_once(redis)
                await asyncio.sleep(interval)
        finally:
            await redis.aclose()

    scanner = threading.Thread(target=asyncio.run, args=(loop(),), daemon=True)
    scanner.start()
    try:
        yield
    finally:
        stop.set()
        scanner.join()
