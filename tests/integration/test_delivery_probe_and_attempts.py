"""The breaker's probe goes to a claim that will send, and no claim runs past its attempts — on real PostgreSQL,
through both of the worker's stores (long_way.py, and store.py on its async pool).

Invariants:
- an endpoint whose breaker's time is up lets one probe through, and only a claim that will send takes it: a claim
  suppressed for want of balance takes none, and a claim the worker gives back (too little lease left, the endpoint
  gone meanwhile) gives its probe back with it — the next claim probes at once, not a cooldown later;
- a claim never runs past `max_attempts`: a re-claim after the last attempt's lease ran out settles the row FAILED
  as that attempt's failure would (no answer in time: `timeout`, not for review), fenced by its token, the attempt
  count left at the maximum and what it held given back; the stale worker's late retry changes nothing.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan, store
from domain.delivery.retry import Retry, Succeeded
from domain.settings import get_settings
from tests.integration.conftest import rows
from tests.support.db import assert_invariants, one
from tests.support.endpoints import PUBLIC, endpoint, endpoint_row
from tests.support.ledger import new_recipient, send_body, set_balance
from tests.support.long_way import lease_runs_out, record
from tests.support.orders import approve, orders_of

LEASE = 30.0


def half_open(endpoint_id: int) -> None:
    """The breaker opened after a run of failures and its cooldown is over: the next claim may probe."""
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE webhook_endpoints SET breaker_open_until = now() - interval '1 second', "
                          "failure_streak = :n WHERE id = :i"),
                  {"i": endpoint_id, "n": get_settings().endpoint_breaker_failures})


def probe_free(endpoint_id: int) -> bool:
    until = endpoint_row(endpoint_id).breaker_open_until
    return until is not None and until <= datetime.now(UTC)


def webhook_row(endpoint_id: int, order_id: int) -> Any:
    (r,) = rows("event_id = :e AND endpoint_id = :i", e=approve(order_id).event_id, i=endpoint_id)
    return r


def set_webhook_price(cents: int) -> None:
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE channel_prices SET price_cents = :c WHERE tenant_id = 42 AND channel = 'webhook'"),
                  {"c": cents})


def test_a_claim_suppressed_for_want_of_balance_does_not_spend_the_probe(db, redis_db):
    """Before: the probe was taken before the money check, so the suppressed claim held the breaker open for a
    whole cooldown and the next row was deferred."""
    e = endpoint(42, PUBLIC)
    set_webhook_price(7)  # a price the balance cannot cover
    first, second = orders_of(42)[:2]
    poor = webhook_row(e["id"], first)
    set_webhook_price(0)
    good = webhook_row(e["id"], second)
    set_balance(42, 6)
    half_open(e["id"])
    now = datetime.now(UTC)
    got = long_way.claim(poor.id, LEASE, now)
    assert isinstance(got, plan.Suppressed) and got.reason == "insufficient_balance", got
    assert probe_free(e["id"]), "a claim that will not send takes no probe"
    probe = long_way.claim(good.id, LEASE, now)
    assert isinstance(probe, plan.Ready), probe
    assert endpoint_row(e["id"]).breaker_open_until > now + timedelta(seconds=1), "the probe holds the breaker"
    assert record(probe.claim, Succeeded(False), code=200) == "sent"
    ep = endpoint_row(e["id"])
    assert ep.breaker_open_until is None and ep.failure_streak == 0, "the probe's success closes the breaker"
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == 6, "nothing charged"
    assert_invariants()


def test_a_claim_given_back_gives_its_probe_back(db, redis_db):
    """Before: a probe whose claim the worker gave back (pacing: too little of its lease left) kept the breaker
    open for another cooldown, and the row's next claim was deferred instead of probing."""
    e = endpoint(42, PUBLIC)
    a = webhook_row(e["id"], orders_of(42)[0])
    half_open(e["id"])
    first = long_way.claim(a.id, LEASE, datetime.now(UTC))
    assert isinstance(first, plan.Ready), first
    assert not probe_free(e["id"]), "the probe is taken by the claim that will send"
    assert long_way.give_back(first.claim)
    assert probe_free(e["id"]), "given back with the claim"
    again = long_way.claim(a.id, LEASE, datetime.now(UTC))
    assert isinstance(again, plan.Ready), again
    assert again.claim.attempts == 1, "a claim given back is not an attempt"
    # A probe the breaker no longer holds (its answer came, another claim probed since) is not given back twice.
    assert long_way.give_back(first.claim) is False and not probe_free(e["id"])
    assert record(again.claim, Retry("server_error", 0.01), code=503) == "retry"
    assert endpoint_row(e["id"]).breaker_open_until > datetime.now(UTC), "the probe's failure opens it again"
    assert_invariants()


def _used_up(nid: int) -> None:
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET attempts = max_attempts - 1 WHERE id = :i"), {"i": nid})


async def _last_attempt_lost(client, key42, period: str) -> tuple[int, plan.Claim, int]:  # type: ignore[no-untyped-def]
    rid = await new_recipient(client, key42)
    nid = int((await client.post("/api/v1/notifications", json=send_body(rid, period), headers=key42))
              .json()["notification_id"])
    await asyncio.to_thread(_used_up, nid)
    before = int(one("SELECT balance_cents FROM balances WHERE tenant_id = 42"))
    last = await asyncio.to_thread(long_way.claim, nid, LEASE, datetime.now(UTC), "stalled")
    assert isinstance(last, plan.Ready) and last.claim.attempts == last.claim.max_attempts, last
    await asyncio.to_thread(lease_runs_out, nid)  # the worker of the last attempt stalls past its lease
    return nid, last.claim, before


def _settled_as_the_last_failure(nid: int, before: int, stale: plan.Claim) -> None:
    n = one("SELECT status || ':' || last_error_class || ':' || coalesce(review, 'none') || ':' || attempts "
            "|| '/' || max_attempts || ':' || reserved_cents FROM notifications WHERE id = :i", i=nid)
    m = get_settings().max_attempts
    assert n == f"FAILED:timeout:none:{m}/{m}:0", n
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == before, "what it held is given back"
    assert one("SELECT count(*) FROM notification_attempts WHERE notification_id = :i AND attempt_no > :m",
               i=nid, m=m) == 0
    assert record(stale, Retry("timeout", 0.01), code=None) == "stale", "the stalled worker changes nothing"
    assert one("SELECT status FROM notifications WHERE id = :i", i=nid) == "FAILED"
    assert_invariants()


async def test_a_reclaim_after_the_last_attempts_lease_ran_out_settles_failed_not_attempt_nine(client, key42):
    """Before: the re-claim ran as attempt 9 of 8 (Ready, sent again)."""
    nid, stale, before = await _last_attempt_lost(client, key42, "attempts-sync")
    got = await asyncio.to_thread(long_way.claim, nid, LEASE, datetime.now(UTC), "next")
    assert not isinstance(got, plan.Ready), f"ran as attempt {got.claim.attempts} of {got.claim.max_attempts}"
    assert isinstance(got, plan.Exhausted), got
    await asyncio.to_thread(_settled_as_the_last_failure, nid, before, stale)


async def test_the_async_store_never_claims_past_max_attempts_either(client, key42):
    """Before: the async store's common case (store.py) took the row as attempt 9 of 8 in one statement."""
    nid, stale, before = await _last_attempt_lost(client, key42, "attempts-hot")
    pool = await store.open_pool(get_settings().database_url, "test-attempts", max_size=2)
    try:
        got = await store.claim(pool, nid, LEASE, datetime.now(UTC), "next")
    finally:
        await pool.close()
    assert not isinstance(got, plan.Ready), f"ran as attempt {got.claim.attempts} of {got.claim.max_attempts}"
    assert isinstance(got, plan.Exhausted), got
    await asyncio.to_thread(_settled_as_the_last_failure, nid, before, stale)


def test_a_record_that_disables_an_endpoint_takes_the_balance_before_the_endpoint(db, redis_db):
    """Invariant: one lock order, balance before endpoint, on both sides — a probe's claim takes the tenant's
    balance (the money), then the endpoint's row (the probe); the record whose failure disables the endpoint gives
    back what the endpoint's owed rows hold (the balance) after counting the failure (the endpoint's row). Before:
    the record held the endpoint's row while it waited for the balance a probe's claim held, so that claim's next
    step (the endpoint) deadlocked against it. Here the claim's side holds the balance and must still get the
    endpoint's row at once while the disabling record waits."""
    import threading

    s = get_settings()
    e = endpoint(42, PUBLIC)
    set_webhook_price(5)
    first, second = orders_of(42)[:2]
    failing, holding = webhook_row(e["id"], first), webhook_row(e["id"], second)
    set_balance(42, 100)
    now = datetime.now(UTC)
    held = long_way.claim(holding.id, LEASE, now)
    assert isinstance(held, plan.Ready), held
    assert record(held.claim, Retry("server_error", 0.01), code=503) == "retry"  # owed again, its price held
    with get_engine().begin() as c:  # one failure short of the automatic disable, for long enough
        c.execute(sa.text("UPDATE webhook_endpoints SET failure_streak = :n, failing_since = now() - interval '1 day',"
                          " breaker_open_until = NULL WHERE id = :i"),
                  {"i": e["id"], "n": s.endpoint_disable_failures - 1})
    got = long_way.claim(failing.id, LEASE, now)
    assert isinstance(got, plan.Ready), got
    outcome: list[str] = []
    with get_engine().connect() as probe_side:
        tx = probe_side.begin()
        probe_side.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 42 FOR UPDATE"))
        me = probe_side.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        t = threading.Thread(target=lambda: outcome.append(record(got.claim, Retry("server_error", 0.01), code=503)))
        t.start()
        deadline = datetime.now(UTC) + timedelta(seconds=20)
        with get_engine().connect() as watch:
            while not watch.execute(sa.text("SELECT count(*) FROM pg_stat_activity "
                                            "WHERE :me = ANY(pg_blocking_pids(pid))"), {"me": me}).scalar_one():
                assert datetime.now(UTC) < deadline, "the disabling record never waited for the balance"
                watch.rollback()
        probe_side.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
        probe_side.execute(sa.text("SELECT 1 FROM webhook_endpoints WHERE id = :i FOR UPDATE"), {"i": e["id"]})
        tx.commit()
    t.join(20)
    assert outcome == ["retry"], outcome
    ep = endpoint_row(e["id"])
    assert ep.disabled_at is not None and "disabled automatically" in ep.disabled_reason
    (settled,) = rows("id = :i", i=holding.id)
    assert settled.status == "SUPPRESSED" and settled.suppressed_reason == "endpoint_disabled"
    assert settled.reserved_cents == 0, "what it held was given back"
    assert_invariants()
