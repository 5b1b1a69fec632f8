"""Money never raises on the way back — on real PostgreSQL, through the real ASGI app and the worker's own store.

Invariants: the balance's ceiling counts the money owed rows hold (a top-up that would carry the balance past the
ceiling once that money is given back is refused with `balance_limit` in plain words, and changes nothing); no
refund raises, whatever the balance (a refund at the ceiling, a failed receipt of a SENT row whose charge the
ceiling does not count): the record that refunds is never lost to arithmetic, so the row never stays owed to be
sent again; entries still sum to the balance (invariant 7).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from domain.delivery import long_way, plan
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Fail, Succeeded
from domain.ledger import metering
from domain.ledger.metering import MAX_BALANCE_CENTS, BalanceLimit
from tests.support.db import assert_invariants, one
from tests.support.ledger import new_recipient, send_body

SMS_CENTS = 5  # tenant 42's seeded SMS price


def balance() -> int:
    return int(one("SELECT balance_cents FROM balances WHERE tenant_id = 42"))


def entries() -> int:
    return int(one("SELECT count(*) FROM balance_entries WHERE tenant_id = 42"))


def claimed_sms(nid: int) -> plan.Claim:
    r = long_way.claim(nid, 30.0, datetime.now(UTC), "t")
    assert isinstance(r, plan.Ready), r
    assert one("SELECT reserved_cents FROM notifications WHERE id = :i", i=nid) == SMS_CENTS
    return r.claim


async def owed_sms(client, key42, period: str) -> int:  # type: ignore[no-untyped-def]
    rid = await new_recipient(client, key42)
    r = await client.post("/api/v1/notifications", json=send_body(rid, period), headers=key42)
    assert r.status_code == 201, r.text
    return int(r.json()["notification_id"])


def top_up_to(cents: int, reference: str) -> None:
    """Raise tenant 42's balance to `cents` through the one way money comes in (no per-call API limit here)."""
    r = metering.top_up(42, cents - balance(), reference, "test")
    assert r.credited and r.balance_cents == cents


async def test_a_top_up_counts_what_owed_rows_hold_and_the_refund_at_the_ceiling_never_raises(client, key42):
    """Invariant: balance + what owed rows hold never passes the ceiling, so the refund of an owed row's hold
    cannot overflow. Before: the top-up to exactly the ceiling was credited (the hold ignored) and the refund of
    the row's 5 cents raised NumericValueOutOfRange — the record was lost and the row stayed QUEUED."""
    nid = await owed_sms(client, key42, "ceiling-1")
    c = await asyncio.to_thread(claimed_sms, nid)  # the row holds 5 cents
    before, count = balance(), entries()
    with pytest.raises(BalanceLimit, match="held for messages still owed"):
        await asyncio.to_thread(metering.top_up, 42, MAX_BALANCE_CENTS - before, "ceiling-too-much", "test")
    assert (balance(), entries()) == (before, count), "a refused top-up changes nothing"
    # Up to the ceiling less what is held: credited.
    await asyncio.to_thread(top_up_to, MAX_BALANCE_CENTS - SMS_CENTS, "ceiling-exact")
    outcome = await asyncio.to_thread(
        long_way.record, c, Fail("contract", review=True), worker="t", started=datetime.now(UTC), status_code=422,
        latency_ms=1.0, provider_reference=None)
    assert outcome == "failed"
    assert one("SELECT status || ':' || reserved_cents FROM notifications WHERE id = :i", i=nid) == "FAILED:0"
    assert balance() == MAX_BALANCE_CENTS, "the refund brings the balance to the ceiling exactly"
    with pytest.raises(BalanceLimit):
        await asyncio.to_thread(metering.top_up, 42, 1, "ceiling-one-more", "test")
    assert_invariants()


async def test_a_failed_receipt_refunds_a_sent_row_at_the_ceiling_without_raising(client, key42):
    """Invariant: no refund raises — a SENT row's charge (not held for an owed row, so not counted by the
    ceiling) comes back when the provider says it could not deliver, even with the balance at the ceiling. Before:
    the 32-bit balance overflowed, the receipt's transaction raised, and the receipt was lost."""
    nid = await owed_sms(client, key42, "ceiling-2")
    c = await asyncio.to_thread(claimed_sms, nid)
    assert long_way.record(c, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=202,
                           latency_ms=1.0, provider_reference="sms-ceiling-2") == "sent"
    await asyncio.to_thread(top_up_to, MAX_BALANCE_CENTS, "ceiling-sent")
    got = await asyncio.to_thread(apply_receipt, "sms", "rc-ceiling-2", "sms-ceiling-2", "failed")
    assert got.status == "applied"
    assert one("SELECT status || ':' || last_error_class FROM notifications WHERE id = :i",
               i=nid) == "FAILED:undeliverable"
    assert balance() == MAX_BALANCE_CENTS + SMS_CENTS, "refunded in full, past the ceiling: nothing lost"
    with pytest.raises(BalanceLimit, match=r"at most 0\.00"):
        await asyncio.to_thread(metering.top_up, 42, 1, "ceiling-past", "test")
    assert_invariants()


async def test_the_api_refuses_a_top_up_past_the_ceiling_with_what_is_held_in_plain_words(client, key42):
    """Invariant: the API answers 422 `balance_limit` (amount_cents) with how much can still be credited when a
    top-up would pass the ceiling once what owed rows hold comes back, and credits nothing; the largest amount
    that fits is credited. Before: the first top-up was credited (the 5 cents held were not counted)."""
    nid = await owed_sms(client, key42, "ceiling-3")
    await asyncio.to_thread(claimed_sms, nid)
    await asyncio.to_thread(top_up_to, MAX_BALANCE_CENTS - SMS_CENTS - 1000, "ceiling-api-base")
    count = entries()
    r = await client.post("/api/v1/balance/top-ups", json={"amount_cents": 1001, "reference": "api-over"},
                          headers=key42)
    assert r.status_code == 422, r.text
    body = r.json()
    assert (body["error"], body["field"]) == ("balance_limit", "amount_cents"), body
    assert "0.05 held for messages still owed" in body["detail"] and "at most 10.00" in body["detail"], body
    assert entries() == count and balance() == MAX_BALANCE_CENTS - SMS_CENTS - 1000
    ok = await client.post("/api/v1/balance/top-ups", json={"amount_cents": 1000, "reference": "api-fits"},
                           headers=key42)
    assert ok.status_code == 201, ok.text
    assert ok.json()["balance_cents"] == MAX_BALANCE_CENTS - SMS_CENTS
    assert_invariants()
