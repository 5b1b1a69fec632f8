"""The workers' async store (domain/delivery/store.py) keeps every rule of the sync one (long_way.py).

Invariants protected: the async claim and record, on their own pool, take the same lease, token, cap slot, price and
template as the sync store and settle the row the same way; anything but the common case (a suppress, the cap, a
stale token, a pending receipt) is settled by the long way in the same transaction (test_delivery_one_store.py), so
no fence is skipped; a connection the server dropped costs one retry on another connection, never a lost or doubled
claim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import plan, store
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Retry, Succeeded
from domain.ledger import otp
from domain.settings import get_settings
from tests.support.db import assert_invariants
from tests.support.long_way import entries, lease_runs_out, ready, row
from tests.support.people import person, sms

LEASE = 30.0


@pytest.fixture
async def pool(db) -> AsyncIterator[store.Pool]:  # type: ignore[no-untyped-def]
    p = await store.open_pool(get_settings().database_url, "outbox-test-hot", max_size=2)
    try:
        yield p
    finally:
        await p.close()


async def fast_claim(pool: store.Pool, nid: int) -> plan.ClaimResult | None:
    return await store.claim(pool, nid, LEASE, datetime.now(UTC), "hot")


async def fast_record(pool: store.Pool, c: plan.Claim, decision: Succeeded | Retry, ref: str | None = None) -> str:
    return await store.record(pool, c, decision, worker="hot", started=datetime.now(UTC), status_code=201,
                              latency_ms=1.0, provider_reference=ref)


async def test_a_code_claimed_and_recorded_on_the_pool_is_leased_charged_rendered_and_sent(pool):
    """The common case: the claim leases the row under a new token, holds its price once, keeps the template
    version and renders the code (never stored); the record makes it SENT with one attempt line."""
    rid, _ = person(cap=None)
    nid = otp.request(42, rid, "sms", datetime.now(UTC)).notification_id  # type: ignore[union-attr]
    got = await fast_claim(pool, nid)
    assert isinstance(got, plan.Ready), got
    r = row(nid)
    assert (r.claim_token, r.attempts, r.reserved_cents) == (got.claim.claim_token, 1, r.cost_cents)
    assert r.leased_until is not None and r.template_version is not None
    assert got.body is not None and "{code}" not in got.body and got.contact == "+15550002222"
    assert entries(nid) == [("reserve", -r.cost_cents)]
    assert await fast_claim(pool, nid) is None  # leased: a second claim gets nothing
    assert await fast_record(pool, got.claim, Succeeded(False), "sms-1") == "sent"
    r = row(nid)
    assert (r.status, r.provider_reference, r.leased_until) == ("SENT", "sms-1", None)
    assert r.claim_token == got.claim.claim_token + 1  # a later claim is fenced out by the new token
    assert entries(nid) == [("reserve", -r.cost_cents)]
    assert_invariants()


async def test_the_cap_on_the_pool_takes_one_slot_and_suppresses_the_next_by_the_long_way(pool):
    """Cap 1: the first message takes the slot in the one TAKE statement; the second is suppressed `daily_cap` by
    the long way in its claim's transaction, with nothing charged."""
    rid, _ = person(cap=1)
    first, second = sms(rid, "hot-1"), sms(rid, "hot-2")
    a = await fast_claim(pool, first)
    assert isinstance(a, plan.Ready), a
    assert row(first).cap_day is not None
    b = await fast_claim(pool, second)
    assert isinstance(b, plan.Suppressed) and b.reason == "daily_cap", b
    r = row(second)
    assert (r.status, r.suppressed_reason, r.reserved_cents, r.cap_day) == ("SUPPRESSED", "daily_cap", 0, None)
    assert entries(second) == []
    assert_invariants()


async def test_a_stale_retry_on_the_pool_changes_nothing(pool):
    """A's late Retry after B claimed: the fast statement matches nothing, the long way answers `stale`, and
    B's lease stands."""
    rid, _ = person()
    nid = sms(rid, "hot-stale")
    a = await fast_claim(pool, nid)
    assert isinstance(a, plan.Ready)
    lease_runs_out(nid)
    b = ready(nid, "B")
    assert await fast_record(pool, a.claim, Retry("timeout", 0.0)) == "stale"
    r = row(nid)
    assert (r.status, r.claim_token) == ("QUEUED", b.claim_token) and r.leased_until is not None
    assert await fast_record(pool, b, Succeeded(False), "sms-b") == "sent"
    assert_invariants()


async def test_a_receipt_kept_before_the_record_is_applied_by_the_long_way(pool):
    """A `failed` receipt that came while the row was owed is kept; the fast record sees it and goes the long
    way, which records the send and then applies the receipt (FAILED, refunded)."""
    rid, _ = person()
    nid = sms(rid, "hot-receipt")
    got = await fast_claim(pool, nid)
    assert isinstance(got, plan.Ready)
    kept = apply_receipt("sms", "rcpt-hot-1", "sms-hot", "failed", client_reference=plan.idempotency_key(got.claim))
    assert kept.status == "pending"
    assert await fast_record(pool, got.claim, Succeeded(False), "sms-hot") == "sent"
    r = row(nid)
    assert (r.status, r.reserved_cents) == ("FAILED", 0)
    assert_invariants()


async def test_a_dropped_connection_costs_one_retry_on_another_connection(pool):
    """The server ends the pool's connection (no pre-ping on this pool): the claim is made once more on another
    connection and leases the row exactly once; the pool replaces the dead connection for the next call."""
    rid, _ = person()
    first, second = sms(rid, "hot-drop-1"), sms(rid, "hot-drop-2")
    assert isinstance(await fast_claim(pool, first), plan.Ready)  # the pool's connection exists now
    with get_engine().begin() as c:
        killed = c.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'outbox-test-hot' AND datname = current_database()")).scalar_one()
    assert killed >= 1
    got = await fast_claim(pool, second)
    assert isinstance(got, plan.Ready), got
    assert row(second).attempts == 1
    assert await fast_record(pool, got.claim, Succeeded(False), "sms-d") == "sent"
    assert_invariants()


async def test_a_claim_refused_by_a_pause_lifted_since_says_claim_again(pool):
    """The worker's job ends only when its row is not claimable: a claim that matched nothing because the lane was
    paused, read after a resume, reports the row claimable on a running lane (the job tries again at once instead
    of leaving it to the relay's next scan); a leased row reports neither (CI: the paused-lane test's row stayed
    QUEUED for 30 s when the resume fell between the claim and the pause check)."""
    from domain.delivery.lanes import set_lane_paused

    rid, _ = person(cap=None)
    nid = otp.request(42, rid, "sms", datetime.now(UTC)).notification_id  # type: ignore[union-attr]
    set_lane_paused("critical", True)
    try:
        assert await fast_claim(pool, nid) is None
        assert await store.unclaimed(pool, nid, "critical") == (True, True)
    finally:
        set_lane_paused("critical", False)
    assert await store.unclaimed(pool, nid, "critical") == (False, True)
    got = await fast_claim(pool, nid)
    assert isinstance(got, plan.Ready), got
    assert await store.unclaimed(pool, nid, "critical") == (False, False)
