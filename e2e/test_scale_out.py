"""Scale-out on what we run (issue 19, item 3): the topology `outbox up --scale 2` starts — two dashboard backends
behind one nginx port sharing sessions through Reflex's Redis state manager, two workers per lane, two relays, one
PostgreSQL, one Redis — under steady API load through the proxy, with one worker, one relay and one dashboard
backend killed outright.

Invariants: an operator on backend 1 sees backend 2's operator's change and the other way round; a session outlives
its backend (the tab reconnects through the proxy to the other one and is still logged in); every invariant query of
ARCHITECTURE.md is zero, nothing accepted is lost, no receiver effect is doubled (the mock receiver counts effects
per event id) and money matches, with one of each role killed mid-load.

Through PgBouncer (issue 29): every relay, worker and backend pools through one PgBouncer in transaction mode
(`outbox up --scale N --pgbouncer`, unprepared statements) while each relay's LISTEN stays a direct connection; the
server connections PgBouncer holds for the database (SHOW POOLS, sampled through the whole run) never pass its pool
size, however many client connections the processes open, and stay far under PostgreSQL's max_connections.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis as redis_lib

from domain.delivery.queue import LIVE_VIEWS_KEY, order_channel
from domain.orders.commands import create_order
from domain.settings import reload_settings
from e2e.conftest import launch_chromium
from jobs.drills.chaos.drill import _check, _drain, _setup_load
from jobs.drills.chaos.load import Load, Sampler
from jobs.drills.chaos.owned import CHAOS_ENV
from jobs.drills.chaos.report import Run
from jobs.ops import browser as browser_tools
from jobs.ops import pgbouncer, scaled
from jobs.ops.browser import operator_page
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, wait_until

pytestmark = pytest.mark.e2e
_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
_SUFFIX = f"_s{_SLOT}" if _SLOT else ""
PROXY_PORT, BACKEND_PORTS, RECEIVER_PORT = (3140 + 100 * _SLOT, (3141 + 100 * _SLOT, 3142 + 100 * _SLOT),
                                           8140 + 100 * _SLOT)
DB_NAME, REDIS_DB, STATE_REDIS_DB = f"outbox_scale{_SUFFIX}", 11, 12
PGBOUNCER_PORT, PGBOUNCER_POOL = 3143 + 100 * _SLOT, 20
APP = f"http://127.0.0.1:{PROXY_PORT}"
RECEIVER = f"http://127.0.0.1:{RECEIVER_PORT}"


@pytest.fixture(scope="module")
def topology() -> Iterator[tuple[System, scaled.Topology]]:
    saved = dict(os.environ)
    system: System | None = None
    try:
        # Short leases and scans (the chaos drill's knobs) so a killed worker's rows come back within seconds.
        redis_url = isolated_environment(DB_NAME, REDIS_DB, **CHAOS_ENV, OUTBOX_RECEIVER_URL=RECEIVER,
                                         OUTBOX_APP_URL=APP)
        state_url = f"{redis_url.rsplit('/', 1)[0]}/{STATE_REDIS_DB}"
        r = redis_lib.Redis.from_url(state_url)
        r.flushdb()  # no session of an earlier run
        r.close()
        t = scaled.Topology(PROXY_PORT, BACKEND_PORTS, state_url, ROOT / ".run" / f"scale{_SUFFIX}",
                            PGBOUNCER_PORT, PGBOUNCER_POOL)
        system = System(dict(os.environ), ROOT / ".run" / f"scale-logs{_SUFFIX}")
        system.receiver(RECEIVER_PORT, reset=True)
        scaled.start(system, t)
        yield system, t
    finally:
        if system is not None:
            system.stop_all()
        os.environ.clear()
        os.environ.update(saved)
        reload_settings()


@pytest.fixture(scope="module")
def browser(topology: tuple[System, scaled.Topology], playwright_session: Any) -> Iterator[Any]:
    b = launch_chromium(playwright_session)  # the session's one Playwright (see e2e/conftest.py)
    yield b
    b.close()


def operator(browser: Any, user: str, backend: int) -> Any:
    """A browser context pinned to one backend through the proxy (cookie `outbox_backend`, 1-based)."""
    return operator_page(browser, APP, user, cookies=[{"name": scaled.PIN_COOKIE, "value": str(backend), "url": APP}])


def open_order(page: Any, order_id: int) -> None:
    browser_tools.open_order(page, APP, order_id)
    assert "/login" not in page.url, "the session was lost"


def wait_revision(page: Any, revision: int, timeout: float = 30_000) -> None:
    page.wait_for_function(
        "([r]) => { const e = document.querySelector('[data-testid=\"order-revision\"]'); "
        "return e && e.innerText.trim() === r }", arg=[str(revision)], timeout=timeout)


def views_per_process(channel: str) -> list[int]:
    """How many live views of `channel` each dashboard process holds (its hub publishes the figures)."""
    r = redis_lib.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
    try:
        return sorted(int(r.hget(k, channel) or 0) for k in r.scan_iter(f"{LIVE_VIEWS_KEY}:*"))
    finally:
        r.close()


class PoolWatch(threading.Thread):
    """Samples, every half second, PgBouncer's SHOW POOLS for the database (server and client connections) and
    PostgreSQL's own count of the database's backends and of its LISTEN connections; keeps each maximum."""

    def __init__(self, b: pgbouncer.Bouncer, database_url: str) -> None:
        super().__init__(daemon=True)
        self.b, self.database = b, database_url.rsplit("/", 1)[-1]
        self.direct = database_url.replace("postgresql+psycopg://", "postgresql://")
        self.servers = self.clients = self.backends = self.listening = self.samples = 0
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.direct, autocommit=True) as c:
            while not self._halt.is_set():
                try:
                    rows = pgbouncer.pools(self.b, self.database)
                    got = c.execute("SELECT count(*), count(*) FILTER (WHERE query ILIKE 'LISTEN %%') "
                                    "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                    (self.database,)).fetchone()
                    assert got is not None
                    self.servers = max(self.servers, sum(pgbouncer.server_connections(r) for r in rows))
                    self.clients = max(self.clients, sum(pgbouncer.client_connections(r) for r in rows))
                    self.backends, self.listening = max(self.backends, got[0]), max(self.listening, got[1])
                    self.samples += 1
                except Exception as exc:  # a sample lost is reported, never fatal to the run
                    self.errors.append(repr(exc))
                self._halt.wait(0.5)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def max_connections() -> int:
    with psycopg.connect(os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")) as c:
        got = c.execute("SHOW max_connections").fetchone()
        assert got is not None
        return int(got[0])


# The topology builds its own bundle and starts 14 processes: about 2 min on 2 quiet cores, far more when shared.
@pytest.mark.timeout(900)
def test_two_backends_share_sessions_and_pushes_and_one_of_each_role_can_die(topology, browser):
    """Operators pinned to different backends see each other's changes live; after killing a worker, a relay and
    a backend under load, the tab of the dead backend is still logged in on the other one and still live, and the
    whole run ends with nothing lost, no effect doubled, invariants and money clean."""
    system, t = topology
    assert system.env.get("OUTBOX_PGBOUNCER_URL", "").endswith(f":{PGBOUNCER_PORT}/{DB_NAME}"), "not through PgBouncer"
    bouncer = t.bouncer(os.environ["OUTBOX_DATABASE_URL"])
    assert bouncer is not None
    watch = PoolWatch(bouncer, os.environ["OUTBOX_DATABASE_URL"])
    watch.start()
    alice, bob = operator(browser, "alice", 1), operator(browser, "bob", 2)
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    open_order(alice, oid)
    open_order(bob, oid)
    channel = order_channel(42, oid)
    # One view on each backend process: the two operators really are on different backends.
    wait_until(lambda: views_per_process(channel)[-2:] == [1, 1], 20, "one view of the order on each backend")
    alice.get_by_test_id("approve").click()
    wait_revision(bob, 2)  # backend 1's commit reached backend 2's tab through Redis
    bob.get_by_test_id("fulfill").click()
    wait_revision(alice, 3)  # and the other way round

    seed = int(os.environ.get("OUTBOX_TEST_SEED") or random.randrange(2**31))
    print(f"scale-out load seed {seed} (replay: OUTBOX_TEST_SEED={seed})")
    run = Run(seed=seed, duration=0, rate=10.0, drain_timeout=90.0)
    key, recipients = _setup_load(APP, seed)
    load = Load(APP, key, seed, recipients, run.rate)
    t0 = time.monotonic()
    sampler = Sampler(os.environ["OUTBOX_DATABASE_URL"], t0)
    sampler.start()
    load.start()
    try:
        wait_until(lambda: (s := sampler.last()) is not None and s.sent >= 20, 60, "the load to be delivered")
        for name in ("worker-high-1", "relay-1", "dashboard-1"):  # outright: no shutdown, leases left behind
            system.procs[name].stop(signal.SIGKILL)
        sent_at_kill = sampler.last().sent  # type: ignore[union-attr]
        # Alice's backend is gone: her tab reconnects through the proxy to backend 2, still logged in and live.
        oid2 = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2600, currency="EUR")
        open_order(alice, oid2)
        open_order(bob, oid2)
        wait_until(lambda: sum(views_per_process(order_channel(42, oid2))) == 2, 30, "both views of the new order")
        bob.get_by_test_id("approve").click()
        wait_revision(alice, 2)
        alice.get_by_test_id("fulfill").click()
        wait_revision(bob, 3)
        # Delivery goes on with one worker of the lane and one relay left.
        wait_until(lambda: sampler.last().sent >= sent_at_kill + 30, 60,  # type: ignore[union-attr]
                   "delivery to go on after the kills")
        run.load_end = time.monotonic() - t0
    finally:
        load.stop()
    _drain(run, sampler, t0)
    sampler.stop()
    _check(run, load.tally, RECEIVER)
    watch.stop()
    limit = max_connections()
    print(f"connections through PgBouncer: {watch.clients} client connections at most, {watch.servers} server "
          f"connections (pool {PGBOUNCER_POOL}), {watch.backends} backends on the database of which "
          f"{watch.listening} LISTEN (direct), max_connections {limit}; {watch.samples} samples")
    print("answers", dict(sorted(load.tally.answers.items())), "statuses", run.statuses, "lost", run.lost)
    assert load.tally.accepted >= 30, f"too little load got through the proxy: {dict(load.tally.answers)}"
    assert run.drained_s is not None, "rows still owed after the drain deadline"
    assert run.lost_total == 0, f"committed facts never happened: {run.lost}"
    assert run.duplicate_effects == 0, "a receiver effect was doubled"
    assert run.invariants_broken == 0, f"invariants broken: {run.invariants}"
    assert run.money_mismatch == 0, f"money mismatch: {run.money}"
    assert watch.samples >= 10, f"SHOW POOLS was not sampled: {watch.errors[-3:]}"
    assert 0 < watch.servers <= PGBOUNCER_POOL, f"{watch.servers} server connections past the pool"
    assert watch.clients > watch.servers, "PgBouncer multiplexed nothing (did the processes bypass it?)"
    assert watch.listening >= 1, "no relay LISTENs on a direct connection"
    # Everything on the database: PgBouncer's servers, each relay's direct LISTEN, this test's own few (the
    # sampler's, the load's, the checks'), never what the processes' pools would open straight.
    assert watch.backends <= PGBOUNCER_POOL + 2 + 12 < limit, (watch.backends, limit)
