"""The pools through PgBouncer in transaction mode (jobs/ops/pgbouncer.py, Debian's 1.18, a real one started here).

Invariants protected: a pool through PgBouncer runs the hot path's claim and record — every statement the workers
prepare when direct — without server-side prepared statements, on whichever server connection each transaction
gets, and the row is leased, charged and settled exactly as direct (every invariant holds after); the unit of
work's engine on OUTBOX_PGBOUNCER_URL runs unprepared too; a prepared pool through it really breaks (the reason the
setting exists); PgBouncer holds no more server connections than its pool size, however many clients; a bad
OUTBOX_PGBOUNCER_URL stops start-up naming the variable.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
import sqlalchemy as sa

from domain.db import UnitOfWork, get_engine
from domain.delivery import plan, store
from domain.delivery.retry import Succeeded
from domain.ledger import otp
from domain.settings import SettingsError, get_settings, reload_settings
from jobs.ops import pgbouncer
from jobs.ops.procs import ROOT, Proc, wait_until
from tests.conftest import PORT_OFFSET, SLOT_SUFFIX, TEST_DB_URL
from tests.support.db import assert_invariants
from tests.support.long_way import entries, row
from tests.support.people import person

PGBOUNCER_PORT = 8094 + PORT_OFFSET
POOL_SIZE = 2  # fewer server connections than the clients below: transactions must change connections
DATABASE = TEST_DB_URL.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def bouncer(migrated_db: str) -> Iterator[pgbouncer.Bouncer]:
    b = pgbouncer.for_database(TEST_DB_URL, PGBOUNCER_PORT, ROOT / ".run" / f"test-pgbouncer{SLOT_SUFFIX}",
                               POOL_SIZE)
    pgbouncer.write(b)
    p = Proc("pgbouncer", pgbouncer.argv(b), dict(os.environ),
             ROOT / ".run" / f"test-logs{SLOT_SUFFIX}" / "pgbouncer.log").start()
    try:
        wait_until(lambda: _answers(b), 30, "pgbouncer to answer")
        yield b
    finally:
        p.stop(signal.SIGTERM)


def _answers(b: pgbouncer.Bouncer) -> bool:
    try:
        pgbouncer.pools(b, DATABASE)
        return True
    except Exception:
        return False


@pytest.fixture
def through_bouncer(bouncer: pgbouncer.Bouncer, db: str) -> Iterator[str]:
    """This process's settings with OUTBOX_PGBOUNCER_URL: get_engine (the long way, the unit of work) goes through
    it too."""
    url = bouncer.url(TEST_DB_URL)
    os.environ["OUTBOX_PGBOUNCER_URL"] = url
    reload_settings()
    try:
        yield url
    finally:
        os.environ.pop("OUTBOX_PGBOUNCER_URL", None)
        reload_settings()


def _code(rid: int) -> int:
    return otp.request(42, rid, "sms", datetime.now(UTC)).notification_id  # type: ignore[union-attr]


async def test_claims_and_records_through_pgbouncer_run_unprepared_on_any_server_connection(
        bouncer, through_bouncer, caplog):
    """Eight codes claimed and recorded concurrently on a pool of 4 client connections over 2 server connections
    (each statement run many times, past any prepare threshold): every one by the fast path (no fall-back to the
    long way), each leased once, charged once and SENT, and every invariant holds."""
    caplog.set_level(logging.WARNING, logger="outbox.delivery")
    assert get_settings().pooled_database_url == through_bouncer
    all_ids: list[int] = []
    pool = await store.open_pool(get_settings().pooled_database_url, "outbox-test-pgbouncer", max_size=4,
                                 prepared=False)
    try:
        rid, _ = person(cap=None)
        ids = all_ids = [_code(rid) for _ in range(8)]

        async def one(nid: int) -> str:
            got = await store.claim(pool, nid, 30.0, datetime.now(UTC), "pgb")
            assert isinstance(got, plan.Ready), got
            assert await store.claim(pool, nid, 30.0, datetime.now(UTC), "pgb") is None  # leased: nothing
            return await store.record(pool, got.claim, Succeeded(False), worker="pgb", started=datetime.now(UTC),
                                      status_code=201, latency_ms=1.0, provider_reference=f"sms-{nid}")

        for _ in range(2):  # the same statements again, on other server connections
            first, ids = ids[:4], ids[4:]
            assert await asyncio.gather(*(one(n) for n in first)) == ["sent"] * 4
    finally:
        await pool.close()
    assert not [r for r in caplog.records if "long way" in r.getMessage()], caplog.text
    for nid in all_ids:
        r = row(nid)
        assert (r.status, r.attempts) == ("SENT", 1)
        assert entries(nid) == [("reserve", -r.cost_cents)]
    rows = pgbouncer.pools(bouncer, DATABASE)
    assert rows and all(pgbouncer.server_connections(x) <= POOL_SIZE for x in rows), rows
    assert_invariants()


def test_the_unit_of_work_through_pgbouncer_prepares_nothing(through_bouncer):
    """get_engine on OUTBOX_PGBOUNCER_URL: the same statement twenty times across its pooled connections, inside
    and outside `fetch`, with no server-side prepared statement left anywhere."""
    eng = get_engine()
    assert eng.url.port == PGBOUNCER_PORT
    for i in range(20):
        with UnitOfWork() as uow:
            assert uow.fetch(_SELECT, {"i": i})[0].i == i
            assert uow.connection.connection.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
            assert uow.fetch(_PREPARED, {})[0].n == 0


def test_a_prepared_pool_through_pgbouncer_breaks_which_is_why_pools_there_run_unprepared(bouncer, db):
    """The reason for `prepared=False`: two clients preparing the same statement land on one server connection
    (pool size 2, four clients) and PgBouncer 1.18 passes the second Parse of `_pg3_0` to a server that has it."""
    url = bouncer.url(TEST_DB_URL).replace("postgresql+psycopg://", "postgresql://")
    conns = [psycopg.connect(url, prepare_threshold=0) for _ in range(4)]
    failed = None
    try:
        deadline = time.monotonic() + 10
        while failed is None and time.monotonic() < deadline:
            for c in conns:
                try:
                    c.execute("SELECT 1 AS x WHERE %s::int IS NOT NULL", (1,))
                    c.commit()
                except psycopg.Error as exc:
                    failed = exc
                    c.rollback()
                    break
    finally:
        for c in conns:
            c.close()
    assert failed is not None and "prepared statement" in str(failed), failed


def test_a_bad_pgbouncer_url_stops_start_up_naming_the_variable(monkeypatch):
    monkeypatch.setenv("OUTBOX_PGBOUNCER_URL", "mysql://127.0.0.1:6432/outbox")
    try:
        with pytest.raises(SettingsError, match="OUTBOX_PGBOUNCER_URL"):
            reload_settings()
    finally:
        monkeypatch.delenv("OUTBOX_PGBOUNCER_URL")
        reload_settings()


_SELECT = sa.text("SELECT CAST(:i AS int) AS i")
_PREPARED = sa.text("SELECT count(*) AS n FROM pg_prepared_statements")
