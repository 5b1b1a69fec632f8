"""Bulk work gives way to one-time codes on what they share, on real PostgreSQL on this machine: the CPU of the
backends (domain/delivery/priority.py) and the tenant's balance row (a bulk claim takes and commits in one round trip,
domain/delivery/store.py).

Invariants: every connection of a pool opened with a niceness is served by a local PostgreSQL backend at that
niceness (so a campaign's claims and records never compete at full weight with a one-time code's); a pool opened
without one leaves its backends as they are; nothing but a local PostgreSQL process is ever reniced — not this
process, not a backend named by a remote host — and a priority is only ever lowered, never raised. A bulk claim
whose take and COMMIT go together charges exactly as the long way does (its price held once, one reserve entry); one
refused there (the person's daily cap) is rolled back whole by the server and settled by the long way, nothing charged.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

from domain.delivery import plan, priority, store
from domain.ledger.send import send
from domain.settings import get_settings
from tests.support.db import assert_invariants
from tests.support.long_way import entries, row
from tests.support.people import person


async def _backend_niceness(pool: store.Pool, n: int) -> list[int]:
    """The niceness of the backends behind `n` connections held at once (so they are `n` distinct ones)."""
    conns = [await pool.getconn() for _ in range(n)]
    try:
        return [os.getpriority(os.PRIO_PROCESS, c.info.backend_pid) for c in conns]
    finally:
        for c in conns:
            await pool.putconn(c)


def test_a_lanes_pool_is_served_by_backends_at_its_niceness_and_no_other_process_is_reniced(db: str) -> None:
    async def run() -> None:
        bulk = await store.open_pool(get_settings().database_url, "outbox-test-bulk", max_size=3, niceness=10)
        code = await store.open_pool(get_settings().database_url, "outbox-test-code", max_size=2)
        try:
            assert await _backend_niceness(bulk, 3) == [10, 10, 10]
            assert await _backend_niceness(code, 2) == [0, 0], "a critical worker's backends keep the default"
            async with bulk.connection() as c:  # already lower than asked: never raised
                assert priority.renice_backend(c.info.backend_pid, c.info.host, 5)
                assert os.getpriority(os.PRIO_PROCESS, c.info.backend_pid) == 10
        finally:
            await bulk.close()
            await code.close()

    asyncio.run(run())
    mine = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert not priority.renice_backend(os.getpid(), "127.0.0.1", 15), "not a PostgreSQL process: left alone"
    assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == mine
    assert not priority.renice_backend(1, "db.example.internal", 15), "a remote backend is not this machine's"
    assert priority.is_local("/var/run/postgresql") and priority.is_local("::1") and not priority.is_local(None)


def _bulk_sms(rid: int, period: str) -> int:
    sent = send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane="bulk",
                      data={"headline": "x"}, subject_period=period)
    assert sent is not None
    return sent.notification_id


def test_a_bulk_claim_takes_and_commits_at_once_and_a_refused_take_is_rolled_back_whole(db: str) -> None:
    rid, _ = person(cap=1)
    first, second = _bulk_sms(rid, "bulk-1"), _bulk_sms(rid, "bulk-2")

    async def run() -> tuple[plan.ClaimResult | None, plan.ClaimResult | None]:
        pool = await store.open_pool(get_settings().database_url, "outbox-test-bulk-take", max_size=1)
        try:
            now = datetime.now(UTC)
            return (await store.claim(pool, first, 30.0, now, "bulk"),
                    await store.claim(pool, second, 30.0, now, "bulk"))
        finally:
            await pool.close()

    a, b = asyncio.run(run())
    assert isinstance(a, plan.Ready), a
    r = row(first)
    assert (r.lane, r.attempts, r.reserved_cents, r.claim_token) == ("bulk", 1, r.cost_cents, a.claim.claim_token)
    assert r.cap_day is not None and r.leased_until is not None
    assert entries(first) == [("reserve", -r.cost_cents)], "its price held once"
    assert isinstance(b, plan.Suppressed) and b.reason == "daily_cap", b
    r = row(second)
    assert (r.status, r.suppressed_reason, r.reserved_cents, r.cap_day) == ("SUPPRESSED", "daily_cap", 0, None)
    assert entries(second) == [], "a refused take charged nothing"
    assert_invariants()
