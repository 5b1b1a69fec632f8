"""Claims are leases, and leases are fenced — on real PostgreSQL, through the worker's own store.

Each test drives the exact interleaving a review found broken (issue 15), by calling the store the way two
workers would: worker A claims, its lease runs out (we move `leased_until` into the past, as a stalled process
would find it), worker B claims, then A comes back late. Invariants protected:
- a write that follows a claim is guarded by the claim's token: a stale worker changes nothing and moves no money;
- an accepted send is the truth, recorded even after the row was settled unsent (charged again, with why);
- a cancelled campaign sends nothing after cancel, even when the attempt in flight ends in a retry;
- two workers settling a nudge's two messages at once never leave a phantom live intent;
- a replayed bounce is a new message for the provider; receipts are never lost, early or late.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from domain.delivery import plan, review
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Fail, Retry, Succeeded
from domain.journeys.store import create_lead, record_lead_event
from tests.support.db import assert_invariants, one
from tests.support.ledger import new_recipient, send_body
from tests.support.long_way import claim, entries, lease_runs_out, ready, record, row


async def one_sms(client, key42) -> int:  # type: ignore[no-untyped-def]
    rid = await new_recipient(client, key42)
    r = await client.post("/api/v1/notifications", json=send_body(rid), headers=key42)
    assert r.status_code == 201, r.text
    return int(r.json()["notification_id"])


async def test_stale_failure_after_another_worker_sent_changes_nothing(client, key42):
    """1a: A's late failure must not refund a row B already marked SENT (was: SENT, held 0, reserve + refund)."""
    nid = await one_sms(client, key42)
    a = ready(nid, "A")
    lease_runs_out(nid)
    b = ready(nid, "B")
    assert b.claim_token > a.claim_token
    assert record(b, Succeeded(False), "sms-b") == "sent"
    assert record(a, Fail("server_error", review=False), code=503) == "stale"
    r = row(nid)
    assert (r.status, r.reserved_cents) == ("SENT", r.cost_cents)
    assert entries(nid) == [("reserve", -r.cost_cents)]
    assert_invariants()


async def test_stale_failure_while_another_send_is_in_flight_is_fenced(client, key42):
    """1b: A's late failure must not settle the row FAILED while B's send is in flight; B's success lands."""
    nid = await one_sms(client, key42)
    a = ready(nid, "A")
    lease_runs_out(nid)
    b = ready(nid, "B")
    assert record(a, Fail("server_error", review=False), code=503) == "stale"
    assert row(nid).status == "QUEUED"
    assert record(b, Succeeded(False), "sms-b") == "sent"
    r = row(nid)
    assert (r.status, r.provider_reference, r.reserved_cents) == ("SENT", "sms-b", r.cost_cents)
    assert entries(nid) == [("reserve", -r.cost_cents)]
    assert_invariants()


async def test_stale_retry_cannot_clear_a_live_lease(client, key42):
    """1c: A's late Retry must not end B's lease: no third claim is granted while B holds the row."""
    nid = await one_sms(client, key42)
    a = ready(nid, "A")
    lease_runs_out(nid)
    ready(nid, "B")
    assert record(a, Retry("timeout", 0.0), code=None) == "stale"
    assert row(nid).leased_until is not None
    assert claim(nid, "C") is None
    assert_invariants()


async def test_accepted_after_settled_unsent_is_recorded_as_sent_and_charged(client, key42):
    """Late truth: A's lease ran out, the row was settled unsent (here: refused by balance at B's claim and
    refunded); A's 2xx then arrives. The row says SENT, is charged once, says why, and the attempt is counted
    as `late_accept` (the metric outbox_late_accepts reads it)."""
    nid = await one_sms(client, key42)
    a = ready(nid, "A")
    lease_runs_out(nid)
    b = ready(nid, "B")
    assert record(b, Fail("contract", review=True), code=400) == "failed"
    assert row(nid).reserved_cents == 0
    assert record(a, Succeeded(False), "sms-a") == "late_accept"
    r = row(nid)
    assert (r.status, r.provider_reference, r.reserved_cents) == ("SENT", "sms-a", r.cost_cents)
    assert r.review is None and "accepted after it was settled failed" in r.reason_detail
    assert sum(amount for _, amount in entries(nid)) == -r.cost_cents
    assert one("SELECT count(*) FROM notification_attempts WHERE notification_id = :i AND outcome = 'late_accept'",
               i=nid) == 1
    assert_invariants()


def _campaign_rows() -> tuple[int, list[int]]:
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET quiet_start = NULL, quiet_end = NULL, daily_cap = NULL, "
                          "opted_out_channels = ARRAY[]::text[] WHERE tenant_id = 42"))
    cid = campaign_fan_out.create(tenant_id=42, name="t", segment="all_reachable", template="offer", channel="sms",
                           actor_ref="test")
    campaign_fan_out.fan_out(cid)
    with get_engine().connect() as c:
        ids = [int(i) for i in c.execute(sa.text(
            "SELECT id FROM notifications WHERE campaign_id = :c ORDER BY id"), {"c": cid}).scalars()]
    assert len(ids) >= 2, ids
    return cid, ids


def test_cancelled_campaign_sends_nothing_after_a_retry(db):
    """2: cancel leaves the leased row to its worker; that attempt ends in Retry (a 503); the next claim must
    refuse it (`campaign_cancelled`) and give its money back — never send it."""
    cid, ids = _campaign_rows()
    held = ready(ids[0])
    assert campaign_fan_out.cancel(42, cid) == len(ids) - 1
    assert row(ids[0]).status == "QUEUED"  # under a live lease: left to its worker
    assert record(held, Retry("server_error", 0.0), code=503) == "retry"
    again = claim(ids[0])
    assert isinstance(again, plan.Suppressed) and again.reason == "campaign_cancelled"
    r = row(ids[0])
    assert (r.status, r.suppressed_reason, r.reserved_cents) == ("SUPPRESSED", "campaign_cancelled", 0)
    assert one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND status IN ('SENT', 'DELIVERED')",
               c=cid) == 0
    assert_invariants()


def _claim_together(ids: tuple[int, ...]) -> list[Any]:
    """Claim each row in its own thread, all released at once; an exception in a thread is a result too."""
    gate = threading.Barrier(len(ids))
    results: list[Any] = []

    def go(nid: int) -> None:
        gate.wait()
        try:
            results.append(claim(nid))
        except Exception as exc:  # a deadlock or any error is a failure of the test, not a lost thread
            results.append(exc)

    threads = [threading.Thread(target=go, args=(nid,)) for nid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_workers_suppressing_a_nudges_two_messages_leave_no_phantom_intent(db):
    """3: the applicant's and the advisor's message suppressed in overlapping transactions (here: both opted
    out) must close the intent every time — 50 tries, two threads released together."""
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET opted_out_channels = ARRAY['whatsapp', 'email'] "
                          "WHERE tenant_id = 42 AND ref IN ('cust-003', 'advisor-anna')"))
    phantoms = []
    for i in range(50):
        lead = create_lead(42, "cust-003", "advisor-anna")
        r = record_lead_event(42, lead, "offer_submitted", event_id=f"phantom-{i}")
        assert len(r.notification_ids) == 2, r
        results = _claim_together(r.notification_ids)
        assert len(results) == 2 and all(isinstance(x, plan.Suppressed) for x in results), results
        status = one("SELECT status FROM lead_notification_intents WHERE id = :i", i=r.intent_id)
        if status in ("pending", "scheduled"):
            phantoms.append(r.intent_id)
    assert phantoms == [], f"{len(phantoms)} of 50 intents stayed live with nothing owed"
    assert_invariants()


async def test_replaying_a_bounced_message_is_a_new_message_for_the_provider(client, key42):
    """4: after a `failed` receipt the row is refunded; replay must not reuse the provider's idempotency key
    (the provider would answer `already_processed`, send nothing, and we would charge). A receipt for the old
    send never lands on the new one."""
    nid = await one_sms(client, key42)
    first = ready(nid)
    assert plan.idempotency_key(first) == first.dedupe_key
    record(first, Succeeded(False), "sms-old")
    assert apply_receipt("sms", "rc-old", "sms-old", "failed", first.dedupe_key).status == "applied"
    assert (row(nid).status, row(nid).reserved_cents) == ("FAILED", 0)
    assert review.replay(42, nid, actor_ref="test")
    r = row(nid)
    assert r.status == "QUEUED" and r.provider_reference is None and r.provider_key not in (None, r.dedupe_key)
    second = ready(nid)
    assert plan.idempotency_key(second) == r.provider_key
    # The old send's late `delivered` receipt (same old key, old reference) must not settle the new send.
    assert apply_receipt("sms", "rc-old-2", "sms-old", "delivered", first.dedupe_key).status == "unknown_reference"
    assert row(nid).status == "QUEUED"
    record(second, Succeeded(False), "sms-new")
    assert (row(nid).status, row(nid).provider_reference) == ("SENT", "sms-new")
    assert apply_receipt("sms", "rc-new", "sms-new", "delivered", r.provider_key).status == "applied"
    assert row(nid).status == "DELIVERED"
    assert_invariants()


async def test_receipt_before_the_send_is_recorded_is_applied_when_it_is(client, key42):
    """6a: a bounce that arrives before the worker records the send is kept and applied then (refund), even
    if the provider never posts it again."""
    nid = await one_sms(client, key42)
    c = ready(nid)
    assert apply_receipt("sms", "rc-early", "sms-e", "failed", c.dedupe_key).status == "pending"
    record(c, Succeeded(False), "sms-e")
    r = row(nid)
    assert (r.status, r.last_error_class, r.reserved_cents) == ("FAILED", "undeliverable", 0)
    assert one("SELECT count(*) FROM delivery_receipts WHERE applied_at IS NULL") == 0
    assert_invariants()


async def test_delivered_receipt_after_the_row_failed_is_the_truth(client, key42):
    """6b: the worker timed out every attempt and the row ended FAILED (refunded), yet the provider had
    accepted: its `delivered` receipt (found by the key we sent) makes the row DELIVERED and charged."""
    nid = await one_sms(client, key42)
    c = ready(nid)
    assert record(c, Fail("timeout", review=False), code=None) == "failed"
    assert (row(nid).status, row(nid).reserved_cents) == ("FAILED", 0)
    assert apply_receipt("sms", "rc-late", "sms-l", "delivered", c.dedupe_key).status == "applied"
    r = row(nid)
    assert (r.status, r.provider_reference, r.reserved_cents) == ("DELIVERED", "sms-l", r.cost_cents)
    assert_invariants()


def test_an_attempt_has_one_deadline_shorter_than_its_lease():
    """The send is bounded as a whole (httpx's timeouts are per phase), so a worker records its attempt under
    its own token before another worker may claim the row."""
    from jobs.attempt import attempt_deadline

    for lease in (0.5, 2.0, 30.0):
        assert 0 < attempt_deadline(lease) < lease
