"""Batched delivery (OUTBOX_BATCH_LANES): a lane worker's drain loop claims many due rows in one statement, sends
them concurrently and records them in one statement, each row still fenced by its own claim token.

Invariants protected:
- a batch of N rows is claimed by ONE statement in one transaction and recorded by ONE statement in one transaction
  (the per-row path's claims and records would each be a transaction of their own);
- a stale row in a batch (its token moved by a second claim) is refused alone: the other rows commit;
- two claimers at once never claim the same row (SKIP LOCKED); every row is claimed once and delivered once;
- a costed message whose take is refused (no balance) is suppressed with its reason; the rest of its batch goes;
- a worker killed mid-batch (its sends accepted, nothing recorded) loses nothing: the leases run out, another
  worker delivers every row, and the receiver effects each event once;
- with batching switched off the per-row path (one arq job per row) still delivers;
- a batch's answered rows are recorded as they are answered, never held behind its slowest send;
- a retry is claimed when its backoff ends, not at the idle loop's next poll (nothing is published for it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from domain import faults
from domain.db import get_engine
from domain.delivery import long_way, plan, sql, sql_record, store, store_batch
from domain.delivery.queue import job_id
from domain.delivery.retry import Retry, Succeeded
from domain.delivery.wakeups import arq_pool, enqueue
from domain.ledger.send import send
from domain.settings import get_settings
from tests.integration.conftest import BATCHED, PER_ROW, effects, rows, wait_for
from tests.support.db import assert_invariants
from tests.support.long_way import entries, lease_runs_out, row
from tests.support.orders import authorize_and_approve
from tests.support.people import person

LEASE = 30.0


@pytest.fixture
async def pool(db) -> AsyncIterator[store.Pool]:  # type: ignore[no-untyped-def]
    p = await store.open_pool(get_settings().database_url, "outbox-test-batch", max_size=2)
    try:
        yield p
    finally:
        await p.close()


def sms_rows(n: int, cap: int | None = None) -> list[int]:
    """`n` owed normal-lane SMS rows of one new person (costed, templated: each needs its take)."""
    rid, _ = person(cap=cap)
    tag = uuid.uuid4().hex[:6]
    return [send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane="normal",
                       data={"headline": "x"}, subject_period=f"b-{tag}-{i}").notification_id for i in range(n)]


async def claim(pool: store.Pool, n: int = 32) -> store_batch.Batch:
    return await store_batch.claim_batch(pool, "normal", n, LEASE, datetime.now(UTC))


def sent(c: plan.Claim, ref: str) -> store_batch.Attempted:
    return store_batch.Attempted(c, Succeeded(False), datetime.now(UTC), 201, 1.0, ref)


def retried(c: plan.Claim) -> store_batch.Attempted:
    return store_batch.Attempted(c, Retry("http_503", 5.0), datetime.now(UTC), 503, 1.0, None)


class Statements:
    """Counts the statements the pool's connections run, by their text (the database is real; only counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.run: list[str] = []
        original = psycopg.AsyncConnection.execute

        async def counted(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            self.run.append(str(query))
            return await original(conn, query, params, **kw)

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted)

    def count(self, statement: sql.Statement) -> int:
        return sum(1 for q in self.run if q == statement.pg)


async def test_a_batch_is_claimed_by_one_statement_and_recorded_by_one(pool, monkeypatch):
    """Five costed SMS rows: one CLAIM_BATCH statement leases all five in one transaction (one claimed_at, which
    is the transaction's now()), each with its own new token, and one TAKE_BATCH takes for all five; one
    RECORD_SENT_BATCH statement and one receipt check settle all five SENT in one transaction (one sent_at). The
    per-row path runs five of each."""
    ids = sms_rows(5)
    stmts = Statements(monkeypatch)
    batch = await claim(pool)
    assert sorted(r.claim.id for r in batch.ready) == ids and not batch.long_way
    assert stmts.count(sql.CLAIM_BATCH) == 1 and stmts.count(sql.CLAIM) == 0
    # Every row's slot, version and price in one more statement, sent with the COMMIT (no savepoint per row).
    assert stmts.count(sql.TAKE_BATCH) == 1 and stmts.count(sql.TAKE) == 0
    got = {r.id: r for r in rows("id = ANY(:ids)", ids=ids)}
    assert len({r.claimed_at for r in got.values()}) == 1, "claimed in more than one transaction"
    for r in batch.ready:
        assert got[r.claim.id].claim_token == r.claim.claim_token and got[r.claim.id].reserved_cents > 0
    out = await store_batch.record_batch(pool, [sent(r.claim, f"sms-{r.claim.id}") for r in batch.ready], "batch")
    assert out == {i: "sent" for i in ids}
    assert stmts.count(sql_record.RECORD_SENT_BATCH) == 1 and stmts.count(sql_record.PENDING_RECEIPTS_BATCH) == 1
    assert stmts.count(sql_record.RECORD_SENT) == 0
    done = rows("id = ANY(:ids)", ids=ids)
    assert {r.status for r in done} == {"SENT"} and len({r.sent_at for r in done}) == 1
    assert all(r.provider_reference == f"sms-{r.id}" for r in done)
    assert await claim(pool) == store_batch.Batch()  # nothing owed is left
    assert_invariants()


async def test_a_stale_row_in_a_batch_is_refused_alone_and_the_rest_commit(pool):
    """Three rows claimed together; the middle one's lease runs out and a second claim takes it (its token moves).
    The batch's record refuses that row alone ("stale": the second claim's lease and token stay), and the other
    two are recorded, one sent and one retried, in the clean re-run of the batch statements."""
    a, b, c = sms_rows(3)
    batch = await claim(pool)
    by_id = {r.claim.id: r.claim for r in batch.ready}
    lease_runs_out(b)
    second = long_way.claim(b, LEASE, datetime.now(UTC), "B")
    assert isinstance(second, plan.Ready) and second.claim.claim_token > by_id[b].claim_token
    out = await store_batch.record_batch(pool, [sent(by_id[a], "sms-a"), retried(by_id[b]), retried(by_id[c])], "A")
    assert out == {a: "sent", b: "stale", c: "retry"}
    assert row(a).status == "SENT"
    rb, rc = row(b), row(c)
    assert (rb.status, rb.claim_token) == ("QUEUED", second.claim.claim_token) and rb.leased_until is not None
    assert rc.status == "QUEUED" and rc.leased_until is None and rc.last_error_class == "http_503"
    assert long_way.record(second.claim, Succeeded(False), worker="B", started=datetime.now(UTC), status_code=201,
                           latency_ms=1.0, provider_reference="sms-b") == "sent"
    assert_invariants()


async def test_two_claimers_at_once_never_claim_the_same_row(pool):
    """Two pools (two drain loops, or two workers) claim batches of 7 at once until nothing is owed: every row is
    claimed exactly once (SKIP LOCKED), and recording every batch sends each row once."""
    ids = sms_rows(40)
    other = await store.open_pool(get_settings().database_url, "outbox-test-batch-2", max_size=2)
    claimed: list[int] = []
    try:
        async def loop(p: store.Pool) -> None:
            while True:
                batch = await store_batch.claim_batch(p, "normal", 7, LEASE, datetime.now(UTC))
                if not len(batch):
                    return
                claimed.extend(r.claim.id for r in batch.ready)
                await store_batch.record_batch(p, [sent(r.claim, f"sms-{r.claim.id}") for r in batch.ready], "w")

        await asyncio.gather(loop(pool), loop(other), loop(pool), loop(other))
    finally:
        await other.close()
    assert sorted(claimed) == ids, "a row claimed twice, or never"
    assert {r.status for r in rows("id = ANY(:ids)", ids=ids)} == {"SENT"}
    with get_engine().connect() as c:  # closed: an open one kept its transaction, and the next test's TRUNCATE waited
        attempts = c.execute(sa.text(
            "SELECT notification_id, count(*) FROM notification_attempts WHERE notification_id = ANY(:ids) "
            "GROUP BY notification_id"), {"ids": ids}).all()
    assert sorted(n for _, n in attempts) == [1] * 40
    assert_invariants()


async def test_a_refused_take_in_a_batch_is_suppressed_and_the_rest_go(pool):
    """The tenant's balance covers two of three costed rows: the batch's one set-based take is refused and its
    whole claim rolled back (nothing counted), then the batch is claimed again with a savepoint per take: the
    third's take is refused under its savepoint (the claim of all three commits), and the long way suppresses it
    `insufficient_balance` in the same transaction, charging nothing; the first two are ready to send with their
    price held."""
    ids = sms_rows(3)
    price = row(ids[0]).cost_cents
    assert price > 0
    with get_engine().begin() as c:  # spend the balance down to two prices, as an entry (the sums still agree)
        bal = c.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 42 FOR UPDATE")).scalar_one()
        c.execute(sa.text("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) "
                          "VALUES (42, 'adjustment', :a, 'test: spend down')"), {"a": -(bal - 2 * price)})
        c.execute(sa.text("UPDATE balances SET balance_cents = :b WHERE tenant_id = 42"), {"b": 2 * price})
    batch = await claim(pool)
    assert [r.claim.id for r in batch.ready] == ids[:2]
    assert [row(i).attempts for i in ids] == [1, 1, 1], "the rolled-back claim counted an attempt"
    (got,) = batch.settled
    assert got.claim.id == ids[2] and batch.long_way == 1
    assert row(ids[2]).reserved_cents == 0 and entries(ids[2]) == []  # the savepoint gave it all back
    assert isinstance(got, plan.Suppressed) and got.reason == "insufficient_balance"
    r3 = row(ids[2])
    assert (r3.status, r3.suppressed_reason) == ("SUPPRESSED", "insufficient_balance")
    out = await store_batch.record_batch(pool, [sent(r.claim, f"sms-{r.claim.id}") for r in batch.ready], "w")
    assert out == {ids[0]: "sent", ids[1]: "sent"}
    assert [entries(i) for i in ids[:2]] == [[("reserve", -price)]] * 2
    assert_invariants()


def _approve_several(orders: tuple[int, ...]) -> list[Any]:
    return [o for n in orders for o in authorize_and_approve(n).owed if o.lane == "high"]


def test_a_worker_killed_mid_batch_loses_nothing_and_duplicates_no_effect(sys_, redis_db, batched_lanes, relay_stopped):
    """A high-lane worker claims a batch of webhooks, the receiver accepts them, and the worker dies before it
    records any (`after_remote_accept_before_local_ack`). Their leases run out; a second worker claims and sends
    them again: every row ends DELIVERED and the receiver effected each event exactly once."""
    orders = (913, 914, 915)
    owed = _approve_several(orders)
    assert len(owed) >= 2, owed
    faulty = sys_.start_worker("high", fault="after_remote_accept_before_local_ack", env=BATCHED)
    assert faulty.wait_exit(60) == faults.EXIT_CODE
    first = rows("id = ANY(:ids) AND attempts >= 1", ids=[o.notification_id for o in owed])
    assert len(first) >= 2, "the dead worker claimed a batch, not one row"
    sys_.start_worker("high", env=BATCHED)
    ids = [o.notification_id for o in owed]
    wait_for(lambda: len(rows("id = ANY(:ids) AND status = 'DELIVERED'", ids=ids)) == len(ids), 60,
             "every row delivered by the second worker")
    for r in rows("id = ANY(:ids)", ids=ids):
        assert effects(r.event_id)["effects"] == 1, r.event_id


def test_with_batching_off_each_row_is_one_arq_job_again(sys_, redis_db, relay_stopped, per_row_lanes):
    """OUTBOX_BATCH_LANES empty: the enqueue makes one arq job per row of the high lane (as before batching), and a
    worker without drain loops delivers it through `deliver`."""
    (hook,) = _approve_several((913,))
    asyncio.run(_enqueue(hook))
    assert redis_db.exists(f"arq:job:{job_id(hook.notification_id)}"), "no per-row job"
    sys_.start_worker("high", env=PER_ROW)
    wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=hook.notification_id), 60, "the delivery")
    assert effects(rows("id = :i", i=hook.notification_id)[0].event_id)["effects"] == 1


async def _enqueue(row_: Any) -> None:
    redis = await arq_pool()
    try:
        await enqueue(redis, [row_])
    finally:
        await redis.aclose()


async def test_a_slow_send_never_holds_the_answered_rows_of_its_batch(pool, monkeypatch):
    """Four rows in one batch; the provider answers three at once and holds the fourth. The three are recorded
    (SENT, in one transaction: one sent_at) while the fourth is still out, leased and QUEUED; once it is answered it
    is recorded too. Before, the batch's one record waited for its slowest answer (or a 5 s timeout)."""
    import random

    from domain.delivery.retry import Outcome
    from jobs import attempt, batches

    ids = sms_rows(4)
    held = ids[0]
    release = asyncio.Event()

    async def provider(ctx: Any, c: plan.Claim, *args: Any) -> tuple[Outcome, str]:
        if c.id == held:
            await release.wait()
        return Outcome(201), f"sms-{c.id}"

    monkeypatch.setattr(attempt, "send", provider)  # the provider's timing is ours; the database is real
    redis = await arq_pool()
    ctx = {"db": pool, "redis": redis, "lane": "normal", "worker_name": "batch-test", "rng": random.Random(7)}
    try:
        task = asyncio.create_task(batches.deliver_batch(ctx, 32))

        async def answered_recorded() -> list[Any]:
            deadline = asyncio.get_running_loop().time() + 20
            while asyncio.get_running_loop().time() < deadline:
                done = rows("id = ANY(:ids) AND status = 'SENT'", ids=ids)
                if len(done) == 3:
                    return done
                await asyncio.sleep(0.05)
            raise TimeoutError("the three answered rows were never recorded while the fourth was out")

        done = await answered_recorded()
        assert held not in {r.id for r in done} and len({r.sent_at for r in done}) == 1
        (out,) = rows("id = :i", i=held)
        assert out.status == "QUEUED" and out.leased_until is not None and not task.done()
        release.set()
        assert await asyncio.wait_for(task, 20) == 4
    finally:
        release.set()
        await redis.aclose()
    assert {r.status for r in rows("id = ANY(:ids)", ids=ids)} == {"SENT"}
    assert_invariants()


def test_a_retry_is_claimed_when_its_backoff_ends_not_at_the_next_idle_poll(sys_, redis_db, batched_lanes,
                                                                             relay_stopped):
    """The receiver answers one 503; the webhook's retry (backoff at most 0.5 s here) is due long before the idle
    loop's poll (30 s for this worker) and no wake-up is published for it: the loop sleeps until the lane's next due
    row instead, so the second attempt starts within a few seconds of the first, and the row is delivered."""
    import httpx

    from tests.integration.conftest import RECEIVER

    httpx.post(f"{RECEIVER}/faults", json={"fail_503": 1})
    sys_.start_worker("high", env={**BATCHED, "OUTBOX_BATCH_IDLE_POLL": "30"})
    (hook,) = _approve_several((913,))
    asyncio.run(_enqueue(hook))
    wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=hook.notification_id), 20,
             "the retry delivered well before the 30 s poll")
    with get_engine().connect() as c:
        first, second = c.execute(sa.text(
            "SELECT finished_at, started_at FROM notification_attempts WHERE notification_id = :n "
            "ORDER BY attempt_no"), {"n": hook.notification_id}).all()
    assert (second.started_at - first.finished_at).total_seconds() < 5, (first, second)
