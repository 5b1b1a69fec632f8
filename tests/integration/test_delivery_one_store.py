"""One store in one driver: the workers' claim and record take their long way on the connection and in the
transaction their common case opened (domain/delivery/store.py, store_batch.py over `domain.db.run_sync`).

Invariants protected: a claim or a record the long way settles (a cap, a stale token, a late truth, a receipt
pending, a batch's refused take) is ONE checkout of the workers' pool — one connection, one transaction — with no
thread and no SQLAlchemy connection, and settles the row exactly as the long way always has (reason, money, attempt
line); sync code run on that connection cannot swallow a failed statement into a commit; a batch record whose
connection dies is recorded row by row, nothing lost, nothing doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from domain.db import UnitOfWork, get_engine, run_sync
from domain.delivery import plan, store, store_batch
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Fail, Retry, Succeeded, decide_retry
from domain.ledger.send import send
from domain.settings import get_settings
from jobs.ops.procs import wait_until
from tests.support.db import assert_invariants, one, waiting_on_a_lock
from tests.support.long_way import entries, lease_runs_out, ready, row
from tests.support.people import person, sms

LEASE = 30.0
APP = "outbox-test-one-store"


@pytest.fixture
async def pool(db) -> AsyncIterator[store.Pool]:  # type: ignore[no-untyped-def]
    p = await store.open_pool(get_settings().database_url, APP, max_size=2)
    try:
        yield p
    finally:
        await p.close()


@contextlib.contextmanager
def one_checkout_only(pool: store.Pool) -> Iterator[None]:
    """Inside: no thread may be started for the store (`asyncio.to_thread`) and no SQLAlchemy connection opened;
    on leaving, the pool was asked for exactly one connection (one transaction: the store never commits twice on
    one checkout)."""
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the workers' store left its connection (a thread or a SQLAlchemy connection)")

    pool.pop_stats()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(asyncio, "to_thread", refuse)
        patch.setattr(sa.engine.Engine, "connect", refuse)
        yield
    assert pool.pop_stats().get("requests_num", 0) == 1


async def test_a_claim_the_long_way_suppresses_is_one_transaction_on_the_workers_connection(pool):
    """Cap 1: the second message of the day is settled `daily_cap` by the long way inside the claim's own
    transaction — the lease, the suppression, its attempt line and no charge, one checkout, no thread."""
    rid, _ = person(cap=1)
    first, second = sms(rid, "one-1"), sms(rid, "one-2")
    assert isinstance(await store.claim(pool, first, LEASE, datetime.now(UTC), "w"), plan.Ready)
    with one_checkout_only(pool):
        got = await store.claim(pool, second, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Suppressed) and got.reason == "daily_cap", got
    r = row(second)
    assert (r.status, r.suppressed_reason, r.reserved_cents, r.claim_token, r.attempts) == (
        "SUPPRESSED", "daily_cap", 0, 1, 1)
    assert entries(second) == []
    with get_engine().connect() as c:
        lines = c.execute(sa.text("SELECT outcome, error_class, worker FROM notification_attempts "
                                  "WHERE notification_id = :i"), {"i": second}).all()
    assert [tuple(x) for x in lines] == [("suppressed", "daily_cap", "w")]
    assert_invariants()


async def test_a_stale_retry_is_answered_in_the_records_own_transaction(pool):
    """A's late Retry after B claimed: `RECORD_RETRY` matches nothing and the long way, in the same transaction,
    answers `stale` and writes only A's attempt line; B's lease stands."""
    rid, _ = person()
    nid = sms(rid, "one-stale")
    a = await store.claim(pool, nid, LEASE, datetime.now(UTC), "A")
    assert isinstance(a, plan.Ready)
    lease_runs_out(nid)
    b = ready(nid, "B")
    with one_checkout_only(pool):
        out = await store.record(pool, a.claim, Retry("timeout", 0.0), worker="A", started=datetime.now(UTC),
                                 status_code=None, latency_ms=1.0, provider_reference=None)
    assert out == "stale"
    r = row(nid)
    assert (r.status, r.claim_token, r.attempts) == ("QUEUED", b.claim_token, 2) and r.leased_until is not None
    assert_invariants()


async def test_a_pending_receipt_is_settled_in_the_records_own_transaction(pool):
    """A `failed` receipt kept while the row was owed: the record's statement matches, its receipt check finds the
    receipt, and the long way settles it in the same transaction — FAILED, refunded, one checkout."""
    rid, _ = person()
    nid = sms(rid, "one-receipt")
    got = await store.claim(pool, nid, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Ready)
    kept = apply_receipt("sms", "rcpt-one-1", "sms-one", "failed", client_reference=plan.idempotency_key(got.claim))
    assert kept.status == "pending"
    with one_checkout_only(pool):
        out = await store.record(pool, got.claim, Succeeded(False), worker="w", started=datetime.now(UTC),
                                 status_code=201, latency_ms=1.0, provider_reference="sms-one")
    assert out == "sent"
    r = row(nid)
    assert (r.status, r.reserved_cents) == ("FAILED", 0)
    assert_invariants()


async def test_a_batch_claim_settles_its_long_way_rows_before_its_commit(pool):
    """A batch of three where the third is over its recipient's cap: one checkout claims all three, takes for the
    two that may go, and suppresses the third `daily_cap` before the COMMIT (never a claimed row left to a second
    transaction)."""
    rid, _ = person(cap=2)
    ids = [sms(rid, f"one-batch-{i}") for i in range(3)]
    with one_checkout_only(pool):
        batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    assert sorted(r.claim.id for r in batch.ready) == ids[:2]
    assert [(r.claim.id, getattr(r, "reason", None)) for r in batch.settled] == [(ids[2], "daily_cap")]
    assert batch.long_way >= 1
    assert (row(ids[2]).status, row(ids[2]).suppressed_reason, entries(ids[2])) == ("SUPPRESSED", "daily_cap", [])
    for r in batch.ready:
        assert await store.give_back(pool, r.claim)
    assert_invariants()


async def test_a_batch_record_with_one_stale_row_is_one_transaction(pool):
    """Three rows answered; the second's lease ran out and B claimed it. One checkout records the first and third
    SENT under their tokens and answers the second `stale` by the long way, B's lease untouched."""
    rid, _ = person()
    ids = [sms(rid, f"one-rec-{i}") for i in range(3)]
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "A")
    claims = {r.claim.id: r.claim for r in batch.ready}
    assert sorted(claims) == ids
    lease_runs_out(ids[1])
    b = ready(ids[1], "B")
    attempts = [store_batch.Attempted(claims[i], Succeeded(False) if i != ids[1] else Retry("timeout", 0.0),
                                      datetime.now(UTC), 201 if i != ids[1] else None, 1.0, f"ref-{i}")
                for i in ids]
    with one_checkout_only(pool):
        out = await store_batch.record_batch(pool, attempts, "A")
    assert out == {ids[0]: "sent", ids[1]: "stale", ids[2]: "sent"}
    assert [row(i).status for i in ids] == ["SENT", "QUEUED", "SENT"]
    assert row(ids[1]).claim_token == b.claim_token
    assert_invariants()


async def test_a_batch_record_whose_connection_dies_is_recorded_row_by_row(pool):
    """The server ends the pool's connections before a batch record: the batch's transaction fails whole, and each
    row is recorded on its own (once each: one SENT, one attempt line, one charge)."""
    rid, _ = person()
    ids = [sms(rid, f"one-drop-{i}") for i in range(3)]
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    assert sorted(r.claim.id for r in batch.ready) == ids
    with get_engine().begin() as c:
        killed = c.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :a AND datname = current_database()"), {"a": APP}).scalar_one()
    assert killed >= 1
    attempts = [store_batch.Attempted(r.claim, Succeeded(False), datetime.now(UTC), 201, 1.0, f"ref-{r.claim.id}")
                for r in batch.ready]
    out = await store_batch.record_batch(pool, attempts, "w")
    assert out == dict.fromkeys(ids, "sent")
    with get_engine().connect() as c:
        lines = c.execute(sa.text("SELECT notification_id, count(*) FROM notification_attempts "
                                  "WHERE notification_id = ANY(:ids) GROUP BY notification_id"), {"ids": ids}).all()
    assert sorted(n for _, n in lines) == [1, 1, 1]
    assert [len(entries(i)) for i in ids] == [1, 1, 1]
    assert_invariants()


def _swallows_a_failed_statement(uow: UnitOfWork, nid: int) -> str:
    uow.execute(sa.text("UPDATE notifications SET reason_detail = 'written-then-lost' WHERE id = :i"), {"i": nid})
    try:
        uow.execute(sa.text("SELECT 1 / 0"))
    except psycopg.errors.DivisionByZero:
        return "swallowed"
    return "not reached"


async def test_sync_code_on_the_workers_connection_cannot_swallow_a_failed_statement(pool):
    """Long-way code that catches a statement's error cannot turn a failed transaction into a quiet commit (which
    PostgreSQL would roll back while the caller believed it kept): `run_sync` raises it, and nothing is written."""
    rid, _ = person()
    nid = sms(rid, "one-swallow")
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with pool.connection() as conn, conn.transaction():
            await run_sync(conn, _swallows_a_failed_statement, nid)
    assert row(nid).reason_detail is None


def _read_like_sqlalchemy(uow: UnitOfWork) -> dict[str, Any]:
    stmt = sa.text("SELECT x AS n, x * 2 AS twice FROM generate_series(1, :k) AS x ORDER BY x")
    return {"first": tuple(uow.execute(stmt, {"k": 2}).first()), "mapping": uow.execute(stmt, {"k": 1}).one()._mapping,
            "attr": uow.execute(stmt, {"k": 1}).one().twice, "scalar": uow.execute(stmt, {"k": 3}).scalar(),
            "scalars": list(uow.execute(stmt, {"k": 3}).scalars()), "none": uow.execute(stmt, {"k": 0}).first(),
            "literal_percent": uow.execute(sa.text("SELECT '100%' AS p")).scalar_one(),
            # A Core construct carries its own values, None among them (write.settle_unsent_where's `leased_until`).
            "carried": tuple(uow.execute(sa.select(sa.bindparam("v", None, type_=sa.Integer).label("v"),
                                                   sa.bindparam("w", 7, type_=sa.Integer).label("w"))).one())}


async def test_rows_read_on_the_workers_connection_read_as_sqlalchemys(pool):
    """The long way reads its rows by attribute, by `_mapping`, as scalars: the same statement answers the same on
    the workers' connection as on the SQLAlchemy engine (a literal `%` included, and a Core statement's own values,
    None among them)."""
    with UnitOfWork() as uow:
        expected = _read_like_sqlalchemy(uow)
    async with pool.connection() as conn, conn.transaction():
        got = await run_sync(conn, _read_like_sqlalchemy)
    assert {k: dict(v) if k == "mapping" else v for k, v in got.items()} == {
        k: dict(v) if k == "mapping" else v for k, v in expected.items()}
    assert got["scalars"] == [1, 2, 3] and got["literal_percent"] == "100%" and got["carried"] == (None, 7)


async def _every_connection_idle(pool: store.Pool, n: int) -> None:
    """`n` connections opened and back in the pool, idle (held at once, so the pool had to open each)."""
    held = asyncio.Barrier(n)

    async def hold() -> None:
        async with pool.connection():
            await held.wait()

    await asyncio.wait_for(asyncio.gather(*(hold() for _ in range(n))), 20)
    assert pool.get_stats().get("pool_available") == n, pool.get_stats()


def _server_ends_every_pooled_connection() -> int:
    with get_engine().begin() as c:
        return int(c.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :a AND datname = current_database()"), {"a": APP}).scalar_one())


async def test_a_record_after_the_server_ended_every_pooled_connection_is_recorded(pool):
    """A restart or a failover ends every connection the pool holds idle, not just one: the record's second try
    must not take another dead one. The provider's answer is recorded (SENT, one attempt line, one charge), as the
    long way on its own pre-pinged engine recorded it before the store had one driver."""
    rid, _ = person()
    nid = sms(rid, "one-restart")
    got = await store.claim(pool, nid, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Ready)
    await _every_connection_idle(pool, 2)
    assert _server_ends_every_pooled_connection() == 2
    out = await store.record(pool, got.claim, Succeeded(False), worker="w", started=datetime.now(UTC),
                             status_code=201, latency_ms=1.0, provider_reference="ref-restart")
    assert out == "sent"
    assert (row(nid).status, len(entries(nid))) == ("SENT", 1)
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM notification_attempts WHERE notification_id = :i"),
                         {"i": nid}).scalar_one() == 1
    assert_invariants()


async def test_a_claim_after_the_server_ended_every_pooled_connection_is_claimed(pool):
    """The same restart before a claim: the claim is made on a live connection, not refused twice."""
    rid, _ = person()
    nid = sms(rid, "one-restart-claim")
    await _every_connection_idle(pool, 2)
    assert _server_ends_every_pooled_connection() == 2
    got = await store.claim(pool, nid, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Ready), got
    assert await store.give_back(pool, got.claim)
    assert_invariants()


# What a tenant's endpoint (anyone's server) may answer: a NUL in its body, a reference that is not a string.
HOSTILE_ANSWERS = [(400, "refused\x00here"), (200, '{"result_ref": {"x": 1}}'), (200, '{"result_ref": 7}'),
                   (200, '{"result_ref": "ref\\u0000nul"}'), (200, '{"result_ref": ["a", 1]}'),
                   (503, "busy\x00")]


@pytest.mark.parametrize(("code", "body"), HOSTILE_ANSWERS)
async def test_a_hostile_answer_costs_no_row_its_record(pool, code, body):
    """An answer's text is the other side's: whatever bytes or JSON it holds, the batch it is recorded in keeps
    every row's record — the other rows' accepted sends (SENT, charged once) and its own outcome — and the batch
    record never fails whole for it (a batch that failed left every answered row to be sent again)."""
    from jobs import attempt

    rid, _ = person()
    ids = [sms(rid, f"one-hostile-{i}") for i in range(3)]
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    claims = {r.claim.id: r.claim for r in batch.ready}
    assert sorted(claims) == ids
    outcome, ref = attempt._answered(code, body, "result_ref")  # a tenant endpoint's
    decision = decide_retry(outcome, 1, 5, 0.05, 0.5, random.Random(0))
    attempts = [store_batch.Attempted(claims[i], Succeeded(False), datetime.now(UTC), 201, 1.0, f"ref-{i}")
                for i in ids[:2]]
    attempts.append(store_batch.Attempted(claims[ids[2]], decision, datetime.now(UTC), outcome.status_code, 1.0,
                                          ref, outcome.excerpt))
    out = await store_batch.record_batch(pool, attempts, "w")
    assert (out[ids[0]], out[ids[1]]) == ("sent", "sent")
    assert out[ids[2]] == {Succeeded: "sent", Retry: "retry", Fail: "failed"}[type(decision)], out
    assert [row(i).status for i in ids[:2]] == ["SENT", "SENT"]
    with get_engine().connect() as c:
        lines = dict(c.execute(sa.text("SELECT notification_id, count(*) FROM notification_attempts "
                                       "WHERE notification_id = ANY(:ids) GROUP BY notification_id"),
                               {"ids": ids}).all())
    assert lines == dict.fromkeys(ids, 1)
    assert_invariants()


async def test_a_row_whose_long_way_fails_costs_no_other_row_of_its_batch_its_record(pool, monkeypatch):
    """The long way of one row of a batch record fails (a bug, a value the database refuses): the batch's own
    transaction is rolled back whole with it, but the other rows' answers are still recorded (row by row: SENT,
    charged once, one attempt line each), as they were when a batch's odd rows went the long way after its commit.
    The failing row alone is left out (owed, its lease runs out)."""
    from domain.delivery import long_way

    rid, _ = person()
    ids = [sms(rid, f"one-poison-{i}") for i in range(3)]
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    claims = {r.claim.id: r.claim for r in batch.ready}
    assert sorted(claims) == ids
    poisoned, record_on = ids[1], long_way.record_on

    def failing_record_on(uow: UnitOfWork, claim: plan.Claim, *args: Any, **kwargs: Any) -> str:
        if claim.id == poisoned:
            raise RuntimeError("a bug in one row's long way")
        return record_on(uow, claim, *args, **kwargs)

    monkeypatch.setattr(long_way, "record_on", failing_record_on)
    attempts = [store_batch.Attempted(claims[i], Succeeded(False) if i != poisoned else Fail("client_error", False),
                                      datetime.now(UTC), 201 if i != poisoned else 400, 1.0, f"ref-{i}")
                for i in ids]
    out = await store_batch.record_batch(pool, attempts, "w")
    assert out == {ids[0]: "sent", ids[2]: "sent"}
    assert [row(i).status for i in ids] == ["SENT", "QUEUED", "SENT"]
    assert row(poisoned).leased_until is not None and len(entries(poisoned)) == 1  # still held: owed
    assert [len(entries(i)) for i in (ids[0], ids[2])] == [1, 1]
    assert_invariants()


def _person_of(tenant_id: int) -> int:
    ref = f"rv-{tenant_id}-{random.randrange(10**8)}"
    with get_engine().begin() as c:
        return int(c.execute(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, daily_cap) "
            "VALUES (:t, :r, 'Rev', 'rev@example.test', '+15550002222', 'UTC', 10) RETURNING id"),
            {"t": tenant_id, "r": ref}).scalar_one())


def _deadlocks() -> int:
    return int(one("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


@pytest.mark.parametrize("crossing", ["two tenants", "two people of one tenant"])
async def test_two_batch_records_refunding_crossing_rows_never_deadlock(pool, crossing):
    """Two workers' batch records, each failing two rows whose refunds take what another's take too, their ids
    crossing: rows of tenants 42 and 7 (A: 42 then 7; B: 7 then 42: each refund holds its tenant's balance row to the
    commit), or of two people P and Q of one tenant (A: P then Q; B: Q then P: each refund holds its person's cap
    counter, then the balance). A is held up at its second row (a row lock another transaction holds) while B runs:
    both complete, every row FAILED and refunded once, and PostgreSQL found no deadlock. Before the long way ran
    inside the batch's transaction each failure was its own transaction, holding one counter and one balance."""
    p = person()[0]
    if crossing == "two tenants":
        q, tenant_q = _person_of(7), 7
    else:
        q, tenant_q = person()[0], 42
    of_q = functools.partial(send, tenant_id=tenant_q, recipient_id=q, channel="sms", template="offer",
                             lane="normal", data={"headline": "x"})
    a1 = sms(p, "dl-a1")
    b1 = of_q(subject_period="dl-b1").notification_id
    a2 = of_q(subject_period="dl-a2").notification_id
    b2 = sms(p, "dl-b2")
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    claims = {r.claim.id: r.claim for r in batch.ready}
    assert sorted(claims) == sorted([a1, b1, a2, b2])

    def failed(ids: list[int]) -> list[store_batch.Attempted]:
        return [store_batch.Attempted(claims[i], Fail("client_error", False), datetime.now(UTC), 400, 1.0, None)
                for i in ids]

    before = _deadlocks()
    blocker = get_engine().connect()
    tx = blocker.begin()
    blocker.execute(sa.text("SELECT 1 FROM notifications WHERE id = :i FOR UPDATE"), {"i": a2})
    try:
        a = asyncio.create_task(store_batch.record_batch(pool, failed([a1, a2]), "A"))
        await asyncio.to_thread(wait_until, waiting_on_a_lock, 20, "A waits for its second row")
        b = asyncio.create_task(store_batch.record_batch(pool, failed([b1, b2]), "B"))
        await asyncio.to_thread(wait_until, lambda: a.done() or b.done() or int(one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'")) >= 2, 20, "B finishes or waits too")
    finally:
        tx.rollback()
        blocker.close()
    out = {**await asyncio.wait_for(a, 30), **await asyncio.wait_for(b, 30)}
    assert out == dict.fromkeys([a1, b1, a2, b2], "failed")
    assert all(row(i).status == "FAILED" and row(i).reserved_cents == 0 for i in out)
    assert [[k for k, _ in entries(i)] for i in (a1, b1, a2, b2)] == [["reserve", "refund"]] * 4
    assert _deadlocks() == before
    assert_invariants()


async def test_a_retry_recorded_twice_counts_its_endpoints_failure_once(pool, redis_db):
    """The store makes a record once more when its first try's connection failed — after a COMMIT that may have
    landed. The same Retry recorded twice under one claim: the second matches nothing (`stale`), so the tenant
    endpoint's breaker counts the failure once and the row has one attempt line."""
    from tests.integration.conftest import rows
    from tests.support.endpoints import PUBLIC, endpoint, endpoint_row
    from tests.support.orders import approve, orders_of

    e = endpoint(42, PUBLIC)
    made = approve(orders_of(42)[0])
    (a,) = rows("event_id = :e AND endpoint_id = :i", e=made.event_id, i=e["id"])
    got = await store.claim(pool, a.id, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Ready), got
    kw: dict[str, Any] = {"worker": "w", "started": datetime.now(UTC), "status_code": 503, "latency_ms": 1.0,
                          "provider_reference": None}
    assert await store.record(pool, got.claim, Retry("server_error", 60.0), **kw) == "retry"
    assert await store.record(pool, got.claim, Retry("server_error", 60.0), **kw) == "stale"
    assert endpoint_row(e["id"]).failure_streak == 1
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM notification_attempts WHERE notification_id = :i"),
                         {"i": a.id}).scalar_one() == 1
    assert_invariants()


async def test_a_row_whose_long_way_fails_in_a_batch_claim_costs_the_others_nothing(pool, monkeypatch):
    """A bug in one row's long way (not a rule, not the database) must not fail its batch's claim: that claim would
    fail again on every turn of the lane, its oldest row first, and nothing behind it would be sent. The row stays
    claimed unsent (leased, its attempt counted: its attempts, used up, settle it FAILED), and the batch's other
    rows are claimed and settled as ever — the one that may go is ready, the one over the cap suppressed."""
    from domain.delivery import long_way

    rid, _ = person(cap=1)
    ids = [sms(rid, f"one-bug-{i}") for i in range(3)]
    real = long_way.take_or_decide

    def buggy(uow: UnitOfWork, claim: plan.Claim, *args: Any) -> plan.ClaimResult:
        if claim.id == ids[1]:
            raise RuntimeError("a bug in the long way")
        return real(uow, claim, *args)

    monkeypatch.setattr(long_way, "take_or_decide", buggy)
    batch = await store_batch.claim_batch(pool, "normal", 10, LEASE, datetime.now(UTC), "w")
    assert [r.claim.id for r in batch.ready] == [ids[0]]
    assert [(r.claim.id, getattr(r, "reason", None)) for r in batch.settled] == [(ids[2], "daily_cap")]
    stuck = row(ids[1])
    assert (stuck.status, stuck.attempts, stuck.reserved_cents) == ("QUEUED", 1, 0)
    assert stuck.leased_until is not None
    assert row(ids[2]).status == "SUPPRESSED"
    assert await store.give_back(pool, batch.ready[0].claim)
    assert_invariants()
