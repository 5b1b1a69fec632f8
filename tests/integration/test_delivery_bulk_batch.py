"""The bulk lane in batches (jobs/batches.py `deliver_bulk_batch`, domain/delivery/store_batch.py
`claim_bulk_batch`): a batch's size is taken from the channel's token bucket, its rows shared fairly between
(tenant, campaign) flows in the one claim statement, its takes in one set-based statement sent with the COMMIT.

Invariants protected:
- a bulk batch claims no more rows of a channel than the tokens it took from that channel's bucket, and gives back
  the tokens it did not use: the campaign keeps the bucket's pace (a running worker sends at the configured rate,
  in batches of more than one row);
- a batch is shared between tenants (a small tenant's rows are not behind a big tenant's backlog in a batch);
- a stale row in a bulk batch (its lease ran out and another worker's claim took it) is refused alone at the
  record; the rest of the batch commits;
- a cancelled campaign's rows in a batch are claimed and refused (SUPPRESSED `campaign_cancelled`, their money
  back), never sent; the other flows' rows of the same batch are sent;
- a take the set-based statement refuses (one row's balance short) falls back to one take per row: that row alone
  is suppressed, the rest go.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan, ratelimit, store, store_batch
from domain.delivery.queue import RATE_KEY
from domain.delivery.retry import Outcome, Retry, Succeeded
from domain.delivery.wakeups import arq_pool
from domain.ledger.send import send
from domain.settings import get_settings, reload_settings
from tests.integration.conftest import rows, wait_for
from tests.support.campaigns import fanned_out_campaign, reachable_people
from tests.support.db import assert_invariants
from tests.support.long_way import lease_runs_out, row

LEASE = 30.0


@pytest.fixture
async def pool(db) -> AsyncIterator[store.Pool]:  # type: ignore[no-untyped-def]
    p = await store.open_pool(get_settings().database_url, "outbox-test-bulk-batch", max_size=2)
    try:
        yield p
    finally:
        await p.close()


@contextlib.contextmanager
def bulk_rate(rate: float) -> Iterator[None]:
    """`OUTBOX_BULK_RATE` in this test's process for the block, then put back."""
    before = os.environ.get("OUTBOX_BULK_RATE")
    os.environ["OUTBOX_BULK_RATE"] = str(rate)
    reload_settings()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OUTBOX_BULK_RATE", None)
        else:
            os.environ["OUTBOX_BULK_RATE"] = before
        reload_settings()


def bulk_rows(n: int, tenant_id: int = 42) -> list[int]:
    """`n` owed bulk e-mails (costed, capped: each needs its take), one per new person of the tenant."""
    out = []
    for _ in range(n):
        ref = f"bb-{uuid.uuid4().hex[:8]}"
        with get_engine().begin() as c:
            rid = c.execute(sa.text(
                "INSERT INTO recipients (tenant_id, ref, display_name, email, timezone, daily_cap) "
                "VALUES (:t, :r, 'Bulk', :e, 'UTC', 10) RETURNING id"),
                {"t": tenant_id, "r": ref, "e": f"{ref}@example.test"}).scalar_one()
        got = send(tenant_id=tenant_id, recipient_id=int(rid), channel="email", template="offer", lane="bulk",
                         data={"headline": "x"}, subject_period=f"bb-{ref}")
        assert got is not None
        out.append(got.notification_id)
    return out


async def claim(pool: store.Pool, quota: int, n: int = 32) -> store_batch.Batch:
    flows = await store_batch.bulk_flows(pool)
    return await store_batch.claim_bulk_batch(pool, flows, n, {"email": quota}, {}, LEASE, datetime.now(UTC))


def claimed_ids(batch: store_batch.Batch) -> list[int]:
    return sorted(c.id for c in batch.claims())


class Provider:
    """The provider's answers are ours (every send accepted at once, each one noted); the database is real."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def __call__(self, ctx: Any, c: plan.Claim, *args: Any) -> tuple[Outcome, str]:
        self.sent.append(c.id)
        return Outcome(201), f"email-{c.id}"


async def _ctx(pool: store.Pool) -> dict[str, Any]:
    return {"db": pool, "redis": await arq_pool(), "lane": "bulk", "worker_name": "bulk-batch-test",
            "rng": random.Random(7), "batch_stop": asyncio.Event()}


async def test_a_bulk_batch_claims_no_more_rows_than_its_tokens_and_gives_the_rest_back(pool, monkeypatch,
                                                                                      redis_db):
    """Six owed e-mails. A claim given two of the channel's tokens leases exactly two (the oldest), the other four
    stay unleased. Then the worker's batch at 1 token/s (a burst of one): each batch claims one row, the second
    only once its token came (about a second later), and the bucket is left empty, not refilled by the refund."""
    from jobs import attempt, batches

    ids = bulk_rows(6)
    batch = await claim(pool, quota=2)
    assert claimed_ids(batch) == ids[:2] and len(batch.ready) == 2
    assert not rows("id = ANY(:ids) AND leased_until IS NOT NULL", ids=ids[2:])

    provider = Provider()
    monkeypatch.setattr(attempt, "send", provider)
    with bulk_rate(1.0):
        ctx = await _ctx(pool)
        try:
            t0 = asyncio.get_running_loop().time()
            assert await batches.deliver_bulk_batch(ctx, 32) == 1
            assert await batches.deliver_bulk_batch(ctx, 32) == 1
            took = asyncio.get_running_loop().time() - t0
            tokens = float(await ctx["redis"].hget(f"{RATE_KEY}:email", "tokens"))
        finally:
            await ctx["redis"].aclose()
    assert provider.sent == ids[2:4], provider.sent
    assert took >= 0.8, f"two rows at 1/s went in {took:.2f} s"
    assert tokens < 0.5, f"the refund left {tokens} tokens in a bucket of one"
    assert {r.status for r in rows("id = ANY(:ids)", ids=ids[2:4])} == {"SENT"}
    assert_invariants()


async def test_take_many_takes_whole_tokens_and_refund_never_passes_the_burst(redis_db):
    """The bucket's batch calls: 10 tokens of a fresh bucket of burst 10 taken as 7 and then 3 (the second call
    gets what is left, not what it asked), a third gets none and is told when the next is due; a refund of more
    than was taken leaves the bucket at its burst."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
    try:
        key = f"test:bulk:{uuid.uuid4().hex[:6]}"
        ((a, wa),) = await ratelimit.take_many(client, [key], 0.01, 10, 7)
        ((b, _),) = await ratelimit.take_many(client, [key], 0.01, 10, 7)
        ((c, wc),) = await ratelimit.take_many(client, [key], 0.01, 10, 7)
        await ratelimit.refund(client, {key: 50}, 10)
        left = float(await client.hget(key, "tokens"))
    finally:
        await client.aclose()
    assert (a, wa, b, c) == (7, 0.0, 3, 0) and wc > 0, (a, wa, b, c, wc)
    assert left == 10.0


async def test_a_bulk_batch_is_shared_between_tenants(pool):
    """Tenant 42 owes twelve e-mails (older), tenant 7 four: a batch of six tokens claims three of each — the
    small tenant's rows are not behind the big one's backlog within a batch."""
    big = bulk_rows(12, tenant_id=42)
    small = bulk_rows(4, tenant_id=7)
    got = claimed_ids(await claim(pool, quota=6))
    assert len(got) == 6
    assert sorted(set(got) & set(big)) == big[:3] and sorted(set(got) & set(small)) == small[:3], got


async def test_a_stale_row_in_a_bulk_batch_is_refused_alone_and_the_rest_commit(pool):
    """Three bulk rows claimed in one batch; the middle one's lease runs out and a second worker's claim takes it
    (its token moves). The batch's record refuses that row alone ("stale": the second claim's lease and token stay)
    while the other two are recorded, one sent and one retried."""
    a, b, c = bulk_rows(3)
    batch = await claim(pool, quota=3)
    by_id = {r.claim.id: r.claim for r in batch.ready}
    assert sorted(by_id) == [a, b, c]
    lease_runs_out(b)
    second = long_way.claim(b, LEASE, datetime.now(UTC), "B")
    assert isinstance(second, plan.Ready) and second.claim.claim_token > by_id[b].claim_token
    now = datetime.now(UTC)
    out = await store_batch.record_batch(pool, [
        store_batch.Attempted(by_id[a], Succeeded(False), now, 201, 1.0, "email-a"),
        store_batch.Attempted(by_id[b], Retry("http_503", 5.0), now, 503, 1.0, None),
        store_batch.Attempted(by_id[c], Retry("http_503", 5.0), now, 503, 1.0, None)], "A")
    assert out == {a: "sent", b: "stale", c: "retry"}
    assert row(a).status == "SENT"
    rb = row(b)
    assert (rb.status, rb.claim_token) == ("QUEUED", second.claim.claim_token) and rb.leased_until is not None
    assert long_way.record(second.claim, Succeeded(False), worker="B", started=datetime.now(UTC), status_code=201,
                           latency_ms=1.0, provider_reference="email-b") == "sent"
    assert_invariants()


async def test_a_cancelled_campaigns_rows_in_a_bulk_batch_are_refused_never_sent(pool, monkeypatch, redis_db):
    """Tenant 7's campaign is cancelled while its rows are still owed (a cancel leaves the rows another transaction
    held to the claim); tenant 42 owes three e-mails. One batch claims both flows' rows: the campaign's are
    SUPPRESSED `campaign_cancelled` with their money back and never reach the provider; tenant 42's are sent."""
    from jobs import attempt, batches

    reachable_people(7, 3)
    cid = fanned_out_campaign(7, "Cancelled")
    theirs = [r.id for r in rows("campaign_id = :c AND status = 'QUEUED'", c=cid)]
    ours = bulk_rows(3)
    assert theirs
    with get_engine().begin() as c:  # cancelled, its rows left to the claim
        c.execute(sa.text("UPDATE campaigns SET status = 'cancelled' WHERE id = :c"), {"c": cid})
    provider = Provider()
    monkeypatch.setattr(attempt, "send", provider)
    ctx = await _ctx(pool)
    try:
        assert await batches.deliver_bulk_batch(ctx, 64) == len(theirs) + len(ours)
    finally:
        await ctx["redis"].aclose()
    assert sorted(provider.sent) == ours, "a cancelled campaign's row was sent"
    for r in rows("id = ANY(:ids)", ids=theirs):
        assert (r.status, r.suppressed_reason, r.reserved_cents, r.sent_at) == (
            "SUPPRESSED", "campaign_cancelled", 0, None), r
    assert {r.status for r in rows("id = ANY(:ids)", ids=ours)} == {"SENT"}
    assert_invariants()


async def test_a_refused_take_in_a_bulk_batch_is_suppressed_alone(pool):
    """Tenant 7's balance holds less than its two e-mails cost together: the set-based take refuses the batch, the
    claim is rolled back whole and done again row by row — the first row's take is paid, the second is suppressed
    `insufficient_balance`; tenant 42's rows of the same batch go."""
    ours = bulk_rows(2, tenant_id=42)
    theirs = bulk_rows(2, tenant_id=7)
    price = row(theirs[0]).cost_cents
    assert price > 0
    with get_engine().begin() as c:  # spend the balance down to one price, as an entry (the sums still agree)
        bal = c.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 7 FOR UPDATE")).scalar_one()
        c.execute(sa.text("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) "
                          "VALUES (7, 'adjustment', :a, 'test: spend down')"), {"a": -(bal - price)})
        c.execute(sa.text("UPDATE balances SET balance_cents = :b WHERE tenant_id = 7"), {"b": price})
    batch = await claim(pool, quota=4)
    assert sorted(r.claim.id for r in batch.ready) == sorted(ours + theirs[:1])
    (got,) = batch.settled  # settled the long way in the claim's own transaction, before its commit
    assert got.claim.id == theirs[1] and batch.long_way == 1
    assert isinstance(got, plan.Suppressed) and got.reason == "insufficient_balance"
    assert row(theirs[1]).status == "SUPPRESSED"
    for r in batch.ready:
        long_way.give_back(r.claim)
    assert_invariants()


def test_a_bulk_worker_keeps_the_buckets_pace_in_batches(sys_, redis_db):
    """A bulk worker at 20 messages/s (its bucket's burst: 2) sends a 120-row campaign at that pace — never faster
    than the bucket, allowing its burst — and in batches (fewer claim transactions than rows)."""
    reachable_people(42, 120)
    sys_.start_worker("bulk", env={"OUTBOX_BULK_RATE": "20", "OUTBOX_BATCH_LANES": "critical,high,normal,bulk"})
    cid = fanned_out_campaign(42, "Paced")
    wait_for(lambda: len(rows("campaign_id = :c AND sent_at IS NOT NULL", c=cid)) >= 100, 90, "100 sends")
    with get_engine().connect() as c:
        first, last, n, claims_n = c.execute(sa.text(
            "SELECT min(sent_at), max(sent_at), count(*), count(DISTINCT claimed_at) FROM notifications "
            "WHERE campaign_id = :c AND sent_at IS NOT NULL"), {"c": cid}).one()
    seconds = (last - first).total_seconds()
    print(f"{n} sent over {seconds:.1f} s = {(n - 2) / seconds:.1f}/s (bucket 20/s), in {claims_n} claims")
    assert (n - 2) / seconds <= 20 * 1.1, "faster than the bucket"
    assert claims_n < n, "one claim per row: not batched"
