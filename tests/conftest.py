"""Shared fixtures. Integration tests get their own database (`outbox_test`) and Redis db index 9, reset per
test; the running system's `outbox` database and db 0 are never touched."""

from __future__ import annotations

import os

import pytest

from tests import parallel  # first: a parallel worker's own slot and Redis server (tests/parallel.py)

PG_BASE = os.environ.get("OUTBOX_PG_BASE", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS_BASE = os.environ.get("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
# OUTBOX_TEST_SLOT=N (N > 0) gives a second checkout or a parallel run its own databases and ports; pair it with
# its own Redis server (OUTBOX_REDIS_URL) since the Redis db indexes are fixed.
SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
SLOT_SUFFIX = f"_s{SLOT}" if SLOT else ""
PORT_OFFSET = 100 * SLOT
TEST_DB_URL = f"{PG_BASE}/outbox_test{SLOT_SUFFIX}"
TEST_REDIS_URL = f"{REDIS_BASE}/9"
# Every process the tests start inherits these: its own database, Redis db, short leases and scans.
os.environ.update({
    "OUTBOX_ENV": "development",  # production refuses demo secrets and fault switches; tests ask for development
    "OUTBOX_API_RATE": "100000",  # the storm fires from one key; the rate-limit test sets its own
    "OUTBOX_DATABASE_URL": TEST_DB_URL, "OUTBOX_REDIS_URL": TEST_REDIS_URL, "OUTBOX_LEASE_SECONDS": "2",
    "OUTBOX_SCAN_INTERVAL": "0.3", "OUTBOX_BACKOFF_BASE": "0.05", "OUTBOX_BACKOFF_CAP": "0.5", "OUTBOX_FAULT": "",
})

# The order is the order TRUNCATE takes its locks in. The work still in flight from the previous test (a provider's
# late receipt through the session's API, the relay's scan) locks `notifications` first and the rest after it; taking
# `notifications` first as well, TRUNCATE waits for that work to finish instead of holding a table it needs.
TABLES = (
    "notifications, ledger_keys, ledger_archives, lane_controls, delivery_receipts, delivery_receipt_keys, "
    "notification_attempts, balance_entries, lead_notification_intents, leads, outbox_events, "
    "orders, recipients, api_keys, operators, balances, refresh_metrics, tenants, login_throttle, ops_series_points"
)


# Where a test left more rows than this (live and dead, by the statistics), TRUNCATE: it also drops the bloat that
# DELETE leaves behind. Below it, DELETE: TRUNCATE makes new files for each of the ≈ 160 tables, partitions and
# indexes it empties (0.3-1 s a test on two cores, 3-4 s under load), DELETE of a few hundred rows ≈ 20 ms.
_TRUNCATE_ABOVE_ROWS = 20_000
_RESET_PLAN: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # database url -> (tables, sequences)

# What `TRUNCATE {TABLES} CASCADE` empties: the listed tables and every table whose foreign keys lead to one of
# them, in that order; with the sequences they own (what RESTART IDENTITY restarts).
_CASCADE = """
WITH RECURSIVE closure(oid, depth) AS (
  SELECT t.oid, 0 FROM unnest(CAST(:listed AS regclass[])) AS t(oid)
  UNION
  SELECT con.conrelid, closure.depth + 1 FROM pg_constraint con JOIN closure ON con.confrelid = closure.oid
  WHERE con.contype = 'f'
)
SELECT c.oid::regclass::text AS name FROM closure JOIN pg_class c ON c.oid = closure.oid
WHERE NOT c.relispartition GROUP BY c.oid ORDER BY min(closure.depth), c.oid::regclass::text
"""
_OWNED_SEQUENCES = """
SELECT DISTINCT s.oid::regclass::text FROM pg_class s
JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid AND d.refclassid = 'pg_class'::regclass
WHERE s.relkind = 'S' AND d.deptype IN ('a', 'i') AND d.refobjid = ANY(CAST(:tables AS regclass[]))
"""


def _reset_plan(c) -> tuple[tuple[str, ...], tuple[str, ...]]:  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    listed = [t.strip() for t in TABLES.split(",")]
    found = [str(r[0]) for r in c.execute(sa.text(_CASCADE), {"listed": listed})]
    tables = tuple(listed + sorted(t for t in found if t not in listed))  # lock order: the listed ones first
    sequences = tuple(sorted(str(r[0]) for r in c.execute(sa.text(_OWNED_SEQUENCES), {"tables": list(tables)})))
    return tables, sequences


def truncate_all() -> None:
    """Empty every table and restart its ids, once: no retry — exactly what `TRUNCATE {TABLES} RESTART IDENTITY
    CASCADE` does, and by that statement when a test left many rows. Tables are locked in the order the in-flight
    work locks them (above; ACCESS EXCLUSIVE, as TRUNCATE's: a late tail of the previous test neither writes nor
    reads old rows to write from until the reset is committed), so a late tail of
    the previous test is waited for, not deadlocked with; and should some other tail still close a cycle, this
    session waits longer than PostgreSQL's `deadlock_timeout` (1 s) before looking for one, so the tail's own
    check finds the deadlock first and the tail (work for rows about to be emptied) is the one undone."""
    import sqlalchemy as sa

    from domain.db import get_engine

    engine = get_engine()
    with engine.begin() as c:
        c.execute(sa.text("SET LOCAL deadlock_timeout = '10s'"))
        url = engine.url.render_as_string(hide_password=True)
        if url not in _RESET_PLAN:
            _RESET_PLAN[url] = _reset_plan(c)
        tables, sequences = _RESET_PLAN[url]
        c.execute(sa.text(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE"))
        rows = c.execute(sa.text(
            "SELECT coalesce(sum(n_live_tup + n_dead_tup), 0) FROM pg_stat_user_tables "
            "WHERE relid = ANY(CAST(:tables AS regclass[])) OR relid IN (SELECT inhrelid FROM pg_inherits "
            "WHERE inhparent = ANY(CAST(:tables AS regclass[])))"), {"tables": list(tables)}).scalar_one()
        if rows > _TRUNCATE_ABOVE_ROWS:
            c.execute(sa.text(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE"))
            return
        c.execute(sa.text("SET LOCAL session_replication_role = replica"))  # no foreign-key checks: any order
        for table in tables:
            c.execute(sa.text(f"DELETE FROM {table}"))
        for sequence in sequences:
            c.execute(sa.text(f"ALTER SEQUENCE {sequence} RESTART"))


@pytest.fixture(scope="session")
def migrated_db() -> str:
    from jobs.ops.dbadmin import ensure_database, migrate

    ensure_database(TEST_DB_URL, reset=True)
    migrate(TEST_DB_URL)
    return TEST_DB_URL


def reset_receiver() -> None:
    """The mock outside world keeps its own database; a test starts with it empty too (its idempotency keys
    would otherwise remember the previous test's messages, whose ids restart at 1)."""
    import sqlalchemy as sa

    from jobs.ops.procs import receiver_database_url

    eng = sa.create_engine(receiver_database_url(TEST_DB_URL))
    try:
        with eng.begin() as c:
            if c.execute(sa.text("SELECT to_regclass('webhook_effects')")).scalar() is not None:
                c.execute(sa.text("TRUNCATE webhook_effects, webhook_deliveries, provider_messages RESTART IDENTITY"))
    except sa.exc.OperationalError:
        pass  # no receiver database yet: nothing to empty
    finally:
        eng.dispose()


@pytest.fixture
def db(migrated_db: str) -> str:
    """A clean, seeded database for one test (and an empty receiver beside it)."""
    from jobs.ops.seed import seed

    truncate_all()
    reset_receiver()
    seed()
    return migrated_db


@pytest.fixture
def redis_db():
    import redis

    r = redis.Redis.from_url(TEST_REDIS_URL)
    r.flushdb()
    yield r
    r.close()


def pytest_configure(config: pytest.Config) -> None:
    parallel.register(config)


def pytest_report_header() -> list[str]:
    return [f"test database: {TEST_DB_URL}", f"test redis: {TEST_REDIS_URL}"]
