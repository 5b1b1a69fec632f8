"""Durable delivery against real processes: receiver, relay, lane workers, the API (for receipts).

Invariants: a crash after the remote effect yields >= 2 deliveries and exactly 1 effect; Redis can be flushed at
any moment and everything is still delivered once in effect; SIGKILL mid-batch loses nothing; transient failures
retry with the same event id; contract failures land in review; outbox check stays at 0 after each fault.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid

import httpx
import pytest
import sqlalchemy as sa

from domain import faults
from domain.db import get_engine
from domain.delivery.lanes import set_lane_paused
from domain.delivery.signing import signed_headers
from domain.delivery.wakeups import arq_pool, batched, enqueue
from domain.orders.commands import Committed
from domain.orders.envelope import body_digest
from domain.settings import get_settings
from jobs.ops.procs import ROOT, batch_claim_ran, job_tries, wait_worker_ready
from tests.conftest import SLOT_SUFFIX
from tests.integration.conftest import API_PORT, BATCHED, PER_ROW, RECEIVER, effects, rows, wait_for
from tests.support.orders import authorize_and_approve


async def _enqueue(r: Committed) -> None:
    pool = await arq_pool()
    try:
        await enqueue(pool, r.owed)
    finally:
        await pool.aclose()


def test_crash_after_remote_effect_gives_two_deliveries_one_effect(sys_):
    faulty = sys_.start_worker("high", fault="after_remote_accept_before_local_ack")
    r = authorize_and_approve()
    assert faulty.wait_exit(30) == faults.EXIT_CODE
    assert effects(r.event_id)["effects"] == 1
    sys_.start_worker("high")
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id),
             what="redelivery after the crash")
    fx = effects(r.event_id)
    assert fx["effects"] == 1 and fx["deliveries"] >= 2
    (row,) = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)
    # Two claims at least: on a loaded machine an attempt may also reach its deadline and be retried.
    assert row.provider_reference == fx["result_refs"][0] and row.attempts >= 2


def test_redis_flushed_mid_flight_everything_delivered_once(sys_, redis_db):
    for lane in ("high", "normal"):
        set_lane_paused(lane, True)
    events = [authorize_and_approve(oid).event_id for oid in (913, 914, 915, 916, 917, 918)]
    sys_.start_worker("high")
    sys_.start_worker("normal")
    for lane in ("high", "normal"):
        wait_worker_ready(redis_db, lane, 30)
    redis_db.flushdb()  # every wake-up and queued job is gone
    for lane in ("high", "normal"):
        set_lane_paused(lane, False)
    t0 = time.monotonic()
    wait_for(lambda: not rows("status = 'QUEUED'"), 60, "all owed rows delivered after the flush")
    print(f"recovered after redis flush in {time.monotonic() - t0:.2f}s")
    for e in events:
        assert effects(e)["effects"] == 1


def test_sigkill_mid_batch_loses_nothing(sys_):
    httpx.post(f"{RECEIVER}/faults", json={"slow_seconds": 0.4})
    events = [authorize_and_approve(oid).event_id for oid in range(913, 925)]
    victim = sys_.start_worker("high")
    wait_for(lambda: rows("channel = 'webhook' AND attempts > 0"), 20, "the worker to start the batch")
    victim.stop(signal.SIGKILL)
    httpx.post(f"{RECEIVER}/faults", json={})
    sys_.start_worker("high")
    wait_for(lambda: not rows("channel = 'webhook' AND status = 'QUEUED'"), 60, "every webhook delivered")
    for e in events:
        assert effects(e)["effects"] == 1


def test_503_is_retried_with_the_same_event_id(sys_):
    httpx.post(f"{RECEIVER}/faults", json={"fail_503": 2})
    r = authorize_and_approve()
    sys_.start_worker("high")
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id),
             what="delivery after two 503s")
    fx = effects(r.event_id)
    assert fx["deliveries"] == 3 and fx["effects"] == 1, "all three calls carried the one event id"
    with get_engine().connect() as c:
        outcomes = c.execute(sa.text(
            "SELECT a.outcome, a.error_class FROM notification_attempts a JOIN notifications n "
            "ON n.id = a.notification_id WHERE n.event_id = :e AND n.channel = 'webhook' ORDER BY attempt_no"),
            {"e": r.event_id}).all()
    assert [tuple(o) for o in outcomes] == [("retry", "server_error"), ("retry", "server_error"), ("sent", None)]


def test_422_goes_to_review_not_retry(sys_):
    httpx.post(f"{RECEIVER}/faults", json={"fail_422": 1})
    r = authorize_and_approve()
    sys_.start_worker("high")
    (row,) = wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'FAILED'", e=r.event_id),
                      what="FAILED into review")
    assert row.review == "needs_review" and row.last_error_class == "contract" and row.attempts == 1
    assert effects(r.event_id)["effects"] == 0


def test_identity_conflict_is_refused_and_changes_nothing(sys_):
    r = authorize_and_approve()
    sys_.start_worker("high")
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id))

    from domain.orders.views import envelope_for

    wire = envelope_for(r.event_id).wire()
    wire["aggregate_id"] = "914"  # evt-77 with an altered order id
    body = json.dumps(wire)
    h = {**signed_headers(get_settings().webhook_secret, str(r.event_id), body), "Idempotency-Key": str(r.event_id)}
    resp = httpx.post(f"{RECEIVER}/webhooks/orders", content=body, headers=h)
    assert resp.status_code == 409 and resp.json()["error"] == "identity_conflict"
    assert body_digest(wire) != body_digest(envelope_for(r.event_id).wire())
    assert effects(r.event_id)["effects"] == 1


def test_bad_or_stale_signature_is_refused(sys_):
    eid = str(uuid.uuid4())
    body = json.dumps({"event_id": eid, "schema_version": 1})
    h = {**signed_headers("whsec_" + "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", eid, body), "Idempotency-Key": eid}
    assert httpx.post(f"{RECEIVER}/webhooks/orders", content=body, headers=h).status_code == 401
    from datetime import UTC, datetime, timedelta

    old = signed_headers(get_settings().webhook_secret, eid, body, now=datetime.now(UTC) - timedelta(hours=1))
    assert httpx.post(f"{RECEIVER}/webhooks/orders", content=body,
                      headers={**old, "Idempotency-Key": eid}).status_code == 401
    assert effects(eid)["effects"] == 0


def test_email_receipt_moves_sent_to_delivered_and_debits(sys_):
    r = authorize_and_approve()
    sys_.start_worker("normal")
    (row,) = wait_for(lambda: rows("event_id = :e AND channel = 'email' AND status = 'DELIVERED'", e=r.event_id),
                      what="email receipt")
    assert row.provider_reference.startswith("email-") and row.settled_at is not None
    with get_engine().connect() as c:
        debit = c.execute(sa.text("SELECT sum(amount_cents) FROM balance_entries WHERE notification_id = :n"),
                          {"n": row.id}).scalar_one()
        receipts = c.execute(sa.text("SELECT count(*) FROM delivery_receipts")).scalar_one()
    assert debit == -row.cost_cents and receipts == 1


def test_forged_receipt_is_refused(sys_):
    body = '{"receipt_id": "rcpt-x", "provider_reference": "email-x", "outcome": "failed"}'
    h = signed_headers("whsec_" + "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", "rcpt-x", body)
    resp = httpx.post(f"http://127.0.0.1:{API_PORT}/api/v1/receipts/email", content=body, headers=h)
    assert resp.status_code == 401


def test_paused_lane_keeps_work_pending_until_resume(sys_, redis_db, per_row_lanes, relay_stopped):
    """Per-row path: a paused lane's worker takes its job and sends nothing: the row stays QUEUED with no attempt."""
    set_lane_paused("high", True)
    r = authorize_and_approve()
    (webhook,) = [o for o in r.owed if o.lane == "high"]
    asyncio.run(_enqueue(r))  # what the API does after commit: the wake-up reaches the paused lane's queue
    sys_.start_worker("high", env=PER_ROW)
    # Proof the worker ran this very job while paused (arq counts each try), not merely that time passed.
    wait_for(lambda: job_tries(redis_db, webhook.job_id) >= 1, 30, "the paused worker to take the job")
    (row,) = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)
    assert row.status == "QUEUED" and row.attempts == 0
    set_lane_paused("high", False)
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id))


def test_a_paused_batched_lane_claims_nothing_until_resume(sys_, redis_db, batched_lanes, relay_stopped):
    """Batched lane: the paused lane's drain loops claim (the guard skips its rows) and send nothing: the row stays
    QUEUED with no attempt; resumed, it is delivered."""
    set_lane_paused("high", True)
    r = authorize_and_approve()
    asyncio.run(_enqueue(r))  # the lane's wake-up
    sys_.start_worker("high", env=BATCHED)
    # Proof the worker's drain loop ran its batch claim while paused (its pool's last statement), not merely
    # that time passed.
    wait_for(lambda: batch_claim_ran("outbox-worker-high"), 30, "the paused worker's batch claim")
    (row,) = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)
    assert row.status == "QUEUED" and row.attempts == 0
    set_lane_paused("high", False)
    asyncio.run(_enqueue(r))  # what the per-row relay's scan does on the resume's NOTIFY (its job may have ended)
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id))


def test_bulk_token_bucket_is_shared_and_never_exceeds_its_rate(redis_db):
    """One bucket per channel in Redis, shared by every bulk worker: 30 concurrent takers at 20/s with a burst of 2
    get their tokens no faster than the rate allows (first 2 at once, then one every 1/20 s), and another channel's
    bucket is untouched by them."""
    import asyncio

    import redis.asyncio as aioredis

    from jobs.worker import take_bulk_token

    async def run() -> list[float]:
        client = aioredis.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
        t0 = time.monotonic()
        stamps: list[float] = []

        async def one() -> None:
            await take_bulk_token(client, "email", 20)
            stamps.append(time.monotonic() - t0)

        await asyncio.gather(*(one() for _ in range(30)))
        other = await take_bulk_token(client, "sms", 20)  # sms has its own, full bucket: no wait
        await client.aclose()
        assert other == 0.0
        return sorted(stamps)

    stamps = run_async(run())
    for k, t in enumerate(stamps):  # the k-th token cannot come before (k - burst + 1) / rate seconds
        assert t >= (k - 2 + 1) / 20 - 0.02, (k, t)
    assert stamps[-1] < 3.0, "and they do come: 30 tokens at 20/s take about 1.4 s"


def run_async(coro):  # type: ignore[no-untyped-def]
    import asyncio

    return asyncio.run(coro)


def test_no_contact_point_or_secret_reaches_job_args_payloads_or_logs(sys_, redis_db):
    """Redaction: job arguments carry only the notification id and its month (the row's `created_at`, the ledger's
    partition key: the worker's claim reads that partition alone); payloads carry identity and state; logs of every
    process carry no address and no secret."""
    from arq.constants import job_key_prefix
    from arq.jobs import deserialize_job

    r = authorize_and_approve()
    # A batched lane's rows have no job at all (their wake-up names only the lane): the per-row lanes' jobs here.
    ids = [x.notification_id for x in r.owed if not batched(x.lane)]
    keys = [f"{job_key_prefix}n-{i}".encode() for i in ids]
    wait_for(lambda: all(redis_db.exists(k) for k in keys), 10, "the relay to enqueue wake-ups")
    months = {r.id: r.created_at for r in rows("id = ANY(:i)", i=ids)}
    for i, k in zip(ids, keys, strict=True):
        job = deserialize_job(redis_db.get(k))
        assert job.function == "deliver" and job.args == (i, months[i]) and not job.kwargs, job
    sys_.start_worker("normal")
    sys_.start_worker("high")
    wait_for(lambda: not rows("event_id = :e AND status = 'QUEUED'", e=r.event_id))
    with get_engine().connect() as c:
        payloads = c.execute(sa.text(
            "SELECT payload::text FROM notifications UNION ALL SELECT payload::text FROM outbox_events")).scalars()
        text = " ".join(payloads)
    assert "@" not in text and "amount" not in text and "+1555" not in text
    logs = " ".join(p.read_text(errors="replace") for p in (ROOT / ".run" / f"test-logs{SLOT_SUFFIX}").glob("*.log"))
    s = get_settings()
    for secret in (s.webhook_secret, s.receipt_secret, "@example.test"):
        assert secret not in logs


def test_accept_then_hang_ends_at_the_attempt_deadline_inside_the_lease(sys_):
    """The receiver applies the effect and never answers. The attempt has one deadline shorter than its lease
    (httpx's 5 s read timeout alone would outlive the 2 s lease): the worker records its own timeout under its
    claim token, never a stale write; the next claim hears `already_processed`; one effect."""
    httpx.post(f"{RECEIVER}/faults", json={"accept_then_hang": 1})
    r = authorize_and_approve()
    sys_.start_worker("high")
    (row,) = wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id),
                      what="delivery after the hung response")
    assert effects(r.event_id)["effects"] == 1
    with get_engine().connect() as c:
        outcomes = [tuple(x) for x in c.execute(sa.text(
            "SELECT outcome, error_class FROM notification_attempts WHERE notification_id = :n ORDER BY id"),
            {"n": row.id})]
    assert outcomes[0] == ("retry", "timeout") and ("stale", "timeout") not in outcomes, outcomes


def test_accept_then_drop_connection_retries_to_one_effect(sys_):
    """The receiver applies the effect and the connection dies mid-response: a transport error, a retry with the
    same event id, `already_processed`, one effect."""
    httpx.post(f"{RECEIVER}/faults", json={"accept_then_drop": 1})
    r = authorize_and_approve()
    sys_.start_worker("high")
    (row,) = wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id),
                      what="delivery after the dropped connection")
    fx = effects(r.event_id)
    assert fx["effects"] == 1 and fx["deliveries"] >= 2 and row.attempts >= 2
    with get_engine().connect() as c:
        first = c.execute(sa.text("SELECT outcome, error_class FROM notification_attempts WHERE notification_id = :n "
                                  "ORDER BY attempt_no LIMIT 1"), {"n": row.id}).one()
    assert tuple(first) == ("retry", "connection")


def test_replay_of_a_failed_row_keeps_the_event_id_and_one_effect(sys_):
    from domain.delivery.review import replay

    httpx.post(f"{RECEIVER}/faults", json={"fail_422": 1})
    r = authorize_and_approve()
    sys_.start_worker("high")
    (row,) = wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'FAILED'", e=r.event_id))
    assert replay(42, row.id)
    assert not replay(7, row.id), "another tenant cannot replay it"
    (done,) = wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=row.id), what="the replayed delivery")
    assert done.event_id == r.event_id and done.review is None and effects(r.event_id)["effects"] == 1


def _email_row(event_id):  # type: ignore[no-untyped-def]
    return wait_for(lambda: rows("event_id = :e AND channel = 'email' AND status <> 'QUEUED'", e=event_id)
                    or None, what="the email to settle")[0]


@pytest.mark.parametrize(("setup", "reason"), [
    ("UPDATE recipients SET daily_cap = 0 WHERE ref = 'cust-001'", "daily_cap"),
    ("UPDATE recipients SET opted_out_channels = '{email}' WHERE ref = 'cust-001'", "opted_out"),
    ("UPDATE recipients SET email = NULL WHERE ref = 'cust-001'", "no_contact_point"),
    ("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) SELECT 42, 'adjustment', -balance_cents, "
     "'test: spend it all' FROM balances WHERE tenant_id = 42; UPDATE balances SET balance_cents = 0 "
     "WHERE tenant_id = 42", "insufficient_balance"),
])
def test_floor_rules_suppress_with_a_reason_at_send_time(sys_, setup, reason):
    """The rules are evaluated when the worker sends, not when the order was approved."""
    r = authorize_and_approve()
    with get_engine().begin() as c:
        for statement in setup.split("; "):
            c.execute(sa.text(statement))
    sys_.start_worker("normal")
    row = _email_row(r.event_id)
    assert row.status == "SUPPRESSED" and row.suppressed_reason == reason
    with get_engine().connect() as c:
        net = c.execute(sa.text("SELECT coalesce(sum(amount_cents), 0) FROM balance_entries "
                                "WHERE notification_id = :n"), {"n": row.id}).scalar_one()
    assert net == 0 and row.reserved_cents == 0, "a suppressed message costs nothing"


def test_order_no_longer_in_the_state_is_not_messaged(sys_):
    r = authorize_and_approve()
    with get_engine().begin() as c:  # e.g. an administrative reversal committed before the send
        c.execute(sa.text("UPDATE orders SET status = 'cancelled' WHERE id = 913"))
    sys_.start_worker("normal")
    row = _email_row(r.event_id)
    assert row.status == "SUPPRESSED" and row.suppressed_reason == "no_longer_eligible"


def test_quiet_hours_defer_instead_of_dropping(sys_):
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET timezone = 'UTC', quiet_start = :s, quiet_end = :e "
                          "WHERE ref = 'cust-001'"),
                  {"s": (now - timedelta(hours=1)).time().replace(microsecond=0),
                   "e": (now + timedelta(hours=1)).time().replace(microsecond=0)})
    r = authorize_and_approve()
    sys_.start_worker("normal")
    wait_for(lambda: rows("event_id = :e AND channel = 'email' AND next_attempt_at > now() + interval '30 minutes'",
                          e=r.event_id), what="the email to be deferred to the end of quiet hours")
    (row,) = rows("event_id = :e AND channel = 'email'", e=r.event_id)
    assert row.status == "QUEUED" and row.attempts == 0 and row.suppressed_reason is None


def test_due_journey_nudge_is_delivered_and_its_intent_marked_sent(sys_):
    from datetime import UTC, datetime, timedelta

    from domain.journeys.store import record_lead_event

    r = record_lead_event(42, 1, "initiated", now=datetime.now(UTC) - timedelta(minutes=31))  # due now
    sys_.start_worker("normal")
    wait_for(lambda: len(rows("intent_id = :i AND status IN ('SENT', 'DELIVERED')", i=r.intent_id)) == 2,
             what="WhatsApp to the applicant and email to the advisor")
    with get_engine().connect() as c:
        status = c.execute(sa.text("SELECT status FROM lead_notification_intents WHERE id = :i"),
                           {"i": r.intent_id}).scalar_one()
    assert status == "sent"


def test_nudge_for_a_step_the_lead_has_passed_is_suppressed_at_send_time(sys_):
    from datetime import UTC, datetime, timedelta

    from domain.journeys.store import record_lead_event

    r = record_lead_event(42, 1, "initiated", now=datetime.now(UTC) - timedelta(minutes=31))
    with get_engine().begin() as c:  # the lead moved on by a path that did not tear the nudge down
        c.execute(sa.text("UPDATE leads SET current_step = 'offers_viewed' WHERE id = 1"))
    sys_.start_worker("normal")
    done = wait_for(lambda: [n for n in rows("intent_id = :i", i=r.intent_id) if n.status != "QUEUED"] or None,
                    what="the stale nudge to settle")
    assert all(n.status == "SUPPRESSED" and n.suppressed_reason == "superseded" for n in done), [
        (n.id, n.channel, n.status, n.suppressed_reason, n.reason_detail) for n in done]
