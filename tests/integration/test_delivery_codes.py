"""A one-time code's life is a floor rule (issue 25, item 3), on real PostgreSQL through both claim stores.

Invariants protected: a code still owed at or after its `expires_at` (a paused critical lane, an outage, a provider
down) is never sent nor charged — the claim, the sync one and the workers' pool alike, settles it SUPPRESSED
`code_expired` with its end of life in plain words, and gives back what it held; a code's retry that would come due
after its end of life is not scheduled (the record settles it `code_expired` instead); a replay of an expired FAILED
code is refused with that reason by the one function every door shares (one row, the rows chosen, a whole lane) and
by `outbox replay`, changing nothing and auditing nothing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan, review, store
from domain.delivery.retry import Fail, Retry
from domain.ledger import otp, reasons
from domain.settings import get_settings
from tests.support.cli import OUTBOX, run
from tests.support.db import assert_invariants
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person
from tests.support.review import actions, failed

LEASE = 30.0


@pytest.fixture
async def pool(db) -> AsyncIterator[store.Pool]:  # type: ignore[no-untyped-def]
    p = await store.open_pool(get_settings().database_url, "outbox-test-codes", max_size=2)
    try:
        yield p
    finally:
        await p.close()


def code(rid: int) -> int:
    got = otp.request(42, rid, "sms", datetime.now(UTC))
    assert got is not None
    return got.notification_id


def expires_in(nid: int, seconds: float) -> datetime:
    """Move the code's end of life to `seconds` from the database's now (negative: it is over)."""
    with get_engine().begin() as c:
        return c.execute(sa.text(
            "UPDATE otp_codes SET expires_at = now() + make_interval(secs => :s) WHERE notification_id = :n "
            "RETURNING expires_at"), {"s": seconds, "n": nid}).scalar_one()  # type: ignore[no-any-return]


def attempt_outcomes(nid: int) -> list[str]:
    with get_engine().connect() as c:
        return [str(o) for o in c.execute(sa.text(
            "SELECT outcome FROM notification_attempts WHERE notification_id = :n ORDER BY id"), {"n": nid}).scalars()]


def assert_expired_unsent(nid: int, detail: str) -> Any:
    r = row(nid)
    assert (r.status, r.suppressed_reason, r.reason_detail, r.reserved_cents, r.sent_at, r.cap_day) == (
        "SUPPRESSED", "code_expired", detail, 0, None, None), tuple(r)  # no cap slot taken either
    assert sum(a for _, a in entries(nid)) == 0, entries(nid)
    return r


def test_a_code_claimed_after_its_end_of_life_is_suppressed_code_expired_and_charged_nothing(db):
    """Today's bug: the claim read `otp_codes` only for the nonce and answered Ready ("It expires in 10
    minutes"), charged. Now: SUPPRESSED `code_expired`, "not sent: the code had expired at HH:MM UTC" in every
    plain-words answer, no money entry at all, no attempt counted as a send."""
    rid, _ = person(cap=None)
    nid = code(rid)
    at = expires_in(nid, -120)
    got = long_way.claim(nid, LEASE, datetime.now(UTC), "w")
    assert isinstance(got, plan.Suppressed) and got.reason == "code_expired", got
    r = assert_expired_unsent(nid, f"the code had expired at {at.astimezone(UTC):%H:%M} UTC")
    assert entries(nid) == []  # nothing was ever reserved
    assert attempt_outcomes(nid) == ["suppressed"]
    assert reasons.message_answer(r._mapping, datetime.now(UTC)) == \
        f"not sent: the code had expired at {at.astimezone(UTC):%H:%M} UTC"
    assert reasons.ledger_reason(r._mapping) == f"Not sent: the code had expired at {at.astimezone(UTC):%H:%M} UTC."
    assert long_way.claim(nid, LEASE, datetime.now(UTC), "w") is None  # settled: never owed again
    assert_invariants()


async def test_the_pool_claim_of_an_expired_code_goes_the_long_way_and_is_suppressed(pool):
    """The workers' fast path (store.py) asks the same floor rule through `plan`: no Ready, no TAKE; the long way
    settles it `code_expired` with nothing charged."""
    rid, _ = person(cap=None)
    nid = code(rid)
    at = expires_in(nid, -1)
    got = await store.claim(pool, nid, LEASE, datetime.now(UTC), "hot")
    assert isinstance(got, plan.Suppressed) and got.reason == "code_expired", got
    assert_expired_unsent(nid, reasons.code_expired(at))
    assert entries(nid) == []
    assert_invariants()


def test_a_code_holding_its_price_from_an_earlier_try_gives_it_back_when_claimed_expired(db):
    """A code that was tried (its price held) and retried, then waited past its life (a paused lane): the next
    claim suppresses it and refunds what it held in the same transaction."""
    rid, _ = person(cap=None)
    nid = code(rid)
    first = ready(nid, "A")
    assert record(first, Retry("server_error", 0.0), code=503) == "retry"
    assert row(nid).reserved_cents == row(nid).cost_cents > 0
    at = expires_in(nid, -30)
    got = long_way.claim(nid, LEASE, datetime.now(UTC), "B")
    assert isinstance(got, plan.Suppressed) and got.reason == "code_expired", got
    assert_expired_unsent(nid, reasons.code_expired(at))
    assert [k for k, _ in entries(nid)] == ["reserve", "refund"]
    assert_invariants()


@pytest.mark.parametrize("store_kind", ["sync", "pool"])
async def test_a_retry_due_after_the_code_expires_is_never_scheduled(db, pool, store_kind):
    """The critical lane's retry schedule never outlives the code: a retry that would come due at or after
    `expires_at` is not scheduled — the record (either store) settles the row `code_expired` under its token and
    refunds it; a retry within the code's life is scheduled as before. Today: next_attempt_at 120 s on, past the
    code's end of life, and the next claim sent it."""

    async def rec(c: plan.Claim, delay: float) -> str:
        d = Retry("server_error", delay)
        if store_kind == "pool":
            return await store.record(pool, c, d, worker="t", started=datetime.now(UTC), status_code=503,
                                      latency_ms=1.0, provider_reference=None)
        return record(c, d, code=503)

    rid, _ = person(cap=None)
    nid = code(rid)
    at = expires_in(nid, 60)
    assert await rec(ready(nid), 5.0) == "retry"  # within its life: scheduled as before
    r = row(nid)
    assert r.status == "QUEUED" and r.next_attempt_at < at
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE id = :n"), {"n": nid})
    assert await rec(ready(nid), 120.0) == "code_expired"
    r = assert_expired_unsent(nid, reasons.code_outlived(at))
    assert r.next_attempt_at <= at, "no retry scheduled past the code's end of life"
    assert [k for k, _ in entries(nid)] == ["reserve", "refund"]
    assert attempt_outcomes(nid) == ["retry", "code_expired"]
    assert_invariants()


def expired_failed_code(rid: int) -> tuple[int, datetime]:
    """A code that really failed (a contract error, refunded), then outlived its 10 minutes."""
    nid = code(rid)
    assert record(ready(nid), Fail("contract", review=True), code=400) == "failed"
    return nid, expires_in(nid, -60)


def test_replaying_an_expired_failed_code_is_refused_with_its_reason_and_changes_nothing(db):
    """Today's bug: an operator's replay owed it again and it was sent, charged. Now one row, the rows chosen and
    a whole lane each leave it FAILED with the same token and money, audit nothing, and say why
    (`code_expired`); a FAILED code still alive, and any other FAILED row, are replayed as before."""
    rid, _ = person(cap=None)
    nid, at = expired_failed_code(rid)
    before, money = row(nid), entries(nid)
    one = review.replay(42, nid, actor_ref="test")
    assert not one and one.refused == review.Refused(nid, "code_expired", reasons.code_expired(at)), one
    assert review.left_as_it_is((one.refused,)) == f"#{nid} (the code had expired at {at.astimezone(UTC):%H:%M} UTC)"
    other = failed(rid)
    many = review.review_many("replay", 42, [nid, other], actor_ref="test", note="provider back")
    assert many.done == (other,) and [r.id for r in many.refused] == [nid], many
    since = datetime.now(UTC) - timedelta(hours=1)
    lane = review.review_lane("replay", 42, "critical", since, actor_ref="test", note="provider back")
    assert (lane.done, lane.left, [r.id for r in lane.refused]) == ((), 0, [nid]), lane
    assert review.review_many("replay", 7, [nid], actor_ref="test", note="not yours").refused == ()
    after = row(nid)
    assert (after.status, after.claim_token, after.reserved_cents) == ("FAILED", before.claim_token, 0)
    assert actions([nid], "replay") == [] and entries(nid) == money
    assert review.resolve(42, nid, actor_ref="test", note="asked for a new code")  # still resolvable
    alive = code(rid)
    assert record(ready(alive), Fail("contract", review=True), code=400) == "failed"
    assert review.replay(42, alive, actor_ref="test")  # a code still alive is owed again
    assert_invariants()


def test_outbox_replay_and_why_say_the_code_had_expired(db):
    """`outbox replay` shares review.py: an expired code is left as it is, named with its reason on stderr and
    never in the "queued again" line; `outbox why` answers a suppressed expired code in plain words."""
    rid, ref = person(cap=None)
    nid, at = expired_failed_code(rid)
    other = failed(rid)
    r = run("replay", str(nid), str(other), "--note", "provider back")
    assert r.returncode == 0, r.stderr
    assert f"#{other}" in r.stdout and f"#{nid}" not in r.stdout, r.stdout
    assert f"left as it is: #{nid} (the code had expired at {at.astimezone(UTC):%H:%M} UTC)" in " ".join(
        r.stderr.split()), r.stderr
    assert row(nid).status == "FAILED" and actions([nid], "replay") == []
    owed = code(rid)
    at_owed = expires_in(owed, -60)
    assert isinstance(long_way.claim(owed, LEASE, datetime.now(UTC), "w"), plan.Suppressed)
    why = subprocess.run([OUTBOX, "why", ref, "--tenant", "42"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "300"})  # one table row a line
    assert why.returncode == 0, why.stderr
    assert f"not sent: {reasons.code_expired(at_owed)}" in why.stdout, why.stdout


async def test_the_api_answers_an_expired_code_in_plain_words(client, key42):
    """GET /api/v1/messages/{id} (support's door) gives the reason `code_expired` and its plain words."""
    rid, _ = person(cap=None)
    nid = code(rid)
    at = expires_in(nid, -5)
    assert isinstance(long_way.claim(nid, LEASE, datetime.now(UTC), "w"), plan.Suppressed)
    got = await client.get(f"/api/v1/messages/{nid}", headers=key42)
    assert got.status_code == 200, got.text
    body = got.text
    assert "code_expired" in body and reasons.code_expired(at) in body, body
