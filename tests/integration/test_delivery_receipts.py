"""A receipt kept pending never outlives its row (issue 25, item 2) — on real PostgreSQL, through the worker's own
store, the campaign and journey commands, the receipt path and the archive.

The way it was stranded: a worker's attempt timed out although the provider had taken the message (a Retry is
recorded, the row stays QUEUED); the provider's `failed` receipt then finds the row still owed and is kept pending.
The row is then settled some other way — the campaign cancelled, a further journey step superseding the nudge, a
`delivered` receipt for the same message — and the `failed` receipt stayed `applied_at IS NULL` for ever: `outbox
archive` counted it owed and refused that month and every later cutoff, `outbox check` said all 0.

Invariants protected: whatever settles a row settles the receipts pending on it in the same transaction (applied,
or closed with why it no longer applies) — invariant 14, a receipt pending on a settled row, is 0; the money is
exact (nothing charged or refunded twice); the archive of that month is not refused.
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Retry, Succeeded
from domain.invariants import invariant_counts
from domain.journeys.store import create_lead, record_lead_event
from domain.retention.archive import archive_before
from tests.support.db import one
from tests.support.long_way import entries, lease_runs_out, ready, record, row
from tests.support.people import campaign_row, person, sms

STRANDED = "14 a receipt pending on a settled row"
AUG = datetime(2026, 8, 14, 10, 30, tzinfo=UTC)  # a month long settled, before the test database's partitions


def balance() -> int:
    return int(one("SELECT balance_cents FROM balances WHERE tenant_id = 42"))


def receipts(nid: int) -> list[Any]:
    with get_engine().connect() as c:
        return list(c.execute(sa.text(
            "SELECT receipt_id, outcome, applied_at, closed_reason FROM delivery_receipts WHERE notification_id = :n "
            "ORDER BY id"), {"n": nid}))


def pending_on_settled() -> int:
    """Receipts still waiting on a row that can no longer change (the stranded ones), read directly."""
    return int(one("SELECT count(*) FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id "
                   "WHERE r.applied_at IS NULL AND n.status <> 'QUEUED'"))


def timed_out_then_bounced(nid: int) -> None:
    """The provider took the message but the worker's wait ran out (Retry, the row stays QUEUED); then the
    provider's `failed` receipt arrives and finds the row still owed: kept pending."""
    c = ready(nid, "A")
    assert record(c, Retry("timeout", 0.0), code=None) == "retry"
    assert row(nid).status == "QUEUED"
    got = apply_receipt(row(nid).channel, f"rc-failed-{nid}", f"ref-{nid}", "failed", c.dedupe_key)
    assert got.status == "pending"


def assert_settled_and_archivable(nid: int, tmp_path: Path) -> None:
    """No receipt pending on a settled row, every invariant 0 (14 among them), and that month archives: the row,
    its attempts and its receipts moved back to August (as if it had all happened then), `outbox archive --before
    2026-09` is not refused."""
    assert pending_on_settled() == 0, receipts(nid)
    counts = invariant_counts()
    assert counts[STRANDED] == 0 and not any(counts.values()), counts
    with get_engine().begin() as c:
        rids = [str(r) for r in c.execute(sa.text(
            "SELECT receipt_id FROM delivery_receipts WHERE notification_id = :n"), {"n": nid}).scalars()]
        c.execute(sa.text("UPDATE notifications SET created_at = :at, next_attempt_at = :at WHERE id = :n"),
                  {"n": nid, "at": AUG})
        c.execute(sa.text("UPDATE notification_attempts SET notification_created_at = :at WHERE notification_id = :n"),
                  {"n": nid, "at": AUG})
        c.execute(sa.text("UPDATE delivery_receipts SET received_at = :at WHERE notification_id = :n"),
                  {"n": nid, "at": AUG + timedelta(days=1)})
        c.execute(sa.text("UPDATE delivery_receipt_keys SET received_at = :at WHERE receipt_id = ANY(:r)"),
                  {"r": rids, "at": AUG + timedelta(days=1)})
    done = archive_before(date(2026, 9, 1), tmp_path, actor_ref="test:oncall")
    assert [(m.month, m.messages, m.receipts) for m in done] == [("2026-08", 1, len(rids))], done
    assert not any(invariant_counts().values())


def test_a_failed_receipt_pending_at_campaign_cancel_is_closed_with_the_row(db, tmp_path):
    """Cancel settles the campaign's rows SUPPRESSED `campaign_cancelled` and, in the same transaction, closes the
    `failed` receipt pending on one of them (it no longer applies: nothing was charged, so nothing to refund).
    Money: the price reserved at claim is given back once."""
    start = balance()
    cid, nid = campaign_row()
    timed_out_then_bounced(nid)
    price = row(nid).cost_cents
    assert price > 0 and balance() == start - price
    assert campaign_fan_out.cancel(42, cid) >= 1
    r = row(nid)
    assert (r.status, r.suppressed_reason, r.reserved_cents) == ("SUPPRESSED", "campaign_cancelled", 0)
    assert pending_on_settled() == 0, "the failed receipt was left pending on the cancelled row"
    (rc,) = receipts(nid)
    assert rc.applied_at is not None and "campaign_cancelled" in rc.closed_reason, rc
    assert entries(nid) == [("reserve", -price), ("refund", price)] and balance() == start
    assert_settled_and_archivable(nid, tmp_path)


def test_a_failed_receipt_pending_at_journey_supersede_is_closed_with_the_row(db, tmp_path):
    """A further step supersedes the nudge: its owed rows are settled SUPPRESSED `superseded` and the `failed`
    receipt pending on one of them is closed in the same transaction; the money held is given back once."""
    lead = create_lead(42, "cust-003", "advisor-anna")
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET quiet_start = NULL, quiet_end = NULL, daily_cap = NULL, "
                          "opted_out_channels = ARRAY[]::text[] WHERE tenant_id = 42"))
    start = balance()
    first = record_lead_event(42, lead, "offers_viewed", event_id="sup-1")
    nid = first.notification_ids[0]
    with get_engine().begin() as c:  # the nudge's time has come
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE id = :n"), {"n": nid})
    timed_out_then_bounced(nid)
    price = row(nid).cost_cents
    record_lead_event(42, lead, "offer_submitted", event_id="sup-2")
    r = row(nid)
    assert (r.status, r.suppressed_reason, r.reserved_cents) == ("SUPPRESSED", "superseded", 0)
    assert pending_on_settled() == 0, "the failed receipt was left pending on the superseded row"
    (rc,) = receipts(nid)
    assert rc.applied_at is not None and "superseded" in rc.closed_reason, rc
    assert entries(nid) == ([("reserve", -price), ("refund", price)] if price else []) and balance() == start
    assert_settled_and_archivable(nid, tmp_path)


def test_a_delivered_receipt_after_a_pending_failed_one_settles_both(db, tmp_path):
    """The `delivered` receipt is the truth: the row becomes DELIVERED, charged once; the `failed` one pending
    before it is closed in the same transaction (DELIVERED is final: no refund), not left waiting for ever."""
    rid, _ = person(cap=None)
    start = balance()
    nid = sms(rid, "p1")
    timed_out_then_bounced(nid)
    got = apply_receipt("sms", f"rc-delivered-{nid}", f"ref-{nid}", "delivered", row(nid).dedupe_key)
    assert got.status == "applied"
    r = row(nid)
    assert (r.status, r.reserved_cents) == ("DELIVERED", r.cost_cents)
    assert pending_on_settled() == 0, "the failed receipt was left pending on the delivered row"
    failed, delivered = receipts(nid)
    assert (failed.outcome, delivered.outcome) == ("failed", "delivered")
    assert delivered.applied_at is not None and delivered.closed_reason is None, delivered
    assert failed.applied_at is not None and "DELIVERED is final" in failed.closed_reason, failed
    assert entries(nid) == [("reserve", -r.cost_cents)] and balance() == start - r.cost_cents
    assert_settled_and_archivable(nid, tmp_path)


def test_a_failed_receipt_pending_at_a_recorded_send_refunds_it_once(db):
    """The record of an accepted send applies what was pending (today's rule, through the one mechanism now): the
    row is FAILED `undeliverable` and refunded once; a second `failed` receipt for it changes no money."""
    rid, _ = person(cap=None)
    start = balance()
    nid = sms(rid, "p1")
    c = ready(nid, "A")
    assert apply_receipt("sms", "rc-early", "sms-e", "failed", c.dedupe_key).status == "pending"
    assert record(c, Succeeded(False), "sms-e") == "sent"
    r = row(nid)
    assert (r.status, r.last_error_class, r.reserved_cents) == ("FAILED", "undeliverable", 0)
    assert apply_receipt("sms", "rc-early-2", "sms-e", "failed", c.dedupe_key).status == "applied"
    assert entries(nid) == [("reserve", -r.cost_cents), ("refund", r.cost_cents)] and balance() == start
    assert [x.closed_reason for x in receipts(nid)] == [None, None]
    assert pending_on_settled() == 0 and not any(invariant_counts().values())


def test_invariant_14_counts_a_receipt_stranded_on_a_settled_row_and_archive_does_not_wait_on_it(db, tmp_path):
    """Invariant 14 sees a receipt left pending on a row that can no longer change (written here behind the code,
    as the old paths left one); the archive does not wait on such a row: a receipt is owed only while its message
    is (QUEUED)."""
    rid, _ = person(cap=None)
    nid = sms(rid, "p1")
    timed_out_then_bounced(nid)
    with get_engine().begin() as c:  # settled behind the mechanism's back (what cancel did before the fix)
        c.execute(sa.text("UPDATE notifications SET status = 'SUPPRESSED', suppressed_reason = 'campaign_cancelled', "
                          "settled_at = now(), leased_until = NULL WHERE id = :n"), {"n": nid})
        c.execute(sa.text("UPDATE balances SET balance_cents = balance_cents + n.reserved_cents FROM notifications n "
                          "WHERE n.id = :n AND balances.tenant_id = n.tenant_id"), {"n": nid})
        c.execute(sa.text("INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
                          "SELECT tenant_id, id, 'refund', reserved_cents, 'test' FROM notifications WHERE id = :n "
                          "AND reserved_cents > 0"), {"n": nid})
        c.execute(sa.text("UPDATE notifications SET reserved_cents = 0 WHERE id = :n"), {"n": nid})
    counts = invariant_counts()
    assert counts[STRANDED] == 1 and sum(counts.values()) == 1, counts
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET created_at = :at WHERE id = :n"), {"n": nid, "at": AUG})
        c.execute(sa.text("UPDATE notification_attempts SET notification_created_at = :at WHERE notification_id = :n"),
                  {"n": nid, "at": AUG})
        c.execute(sa.text("UPDATE delivery_receipts SET received_at = :at WHERE notification_id = :n"),
                  {"n": nid, "at": AUG})
        c.execute(sa.text("UPDATE delivery_receipt_keys SET received_at = :at WHERE receipt_id = :r"),
                  {"r": f"rc-failed-{nid}", "at": AUG})
    done = archive_before(date(2026, 9, 1), tmp_path, actor_ref="test:oncall")
    assert [m.month for m in done] == ["2026-08"]


def test_a_failed_receipt_racing_a_cancel_is_never_left_pending(db):
    """The receipt and the cancel in overlapping transactions, 20 rounds, two threads released together: whichever
    takes the row first, the other settles the receipt with it (the receipt's own transaction finds the row settled,
    or the cancel finds the receipt committed once the row's lock is its) — never one left pending."""
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET quiet_start = NULL, quiet_end = NULL, daily_cap = NULL, "
                          "opted_out_channels = ARRAY[]::text[] WHERE tenant_id = 42"))
    start = balance()
    stranded: list[int] = []
    for i in range(20):
        cid = campaign_fan_out.create(tenant_id=42, name=f"race-{i}", segment="all_reachable", template="offer",
                                      channel="sms", actor_ref="test")
        campaign_fan_out.fan_out(cid)
        nid = int(one("SELECT min(id) FROM notifications WHERE campaign_id = :c", c=cid))
        c = ready(nid, "A")
        assert record(c, Retry("timeout", 0.0), code=None) == "retry"
        gate = threading.Barrier(2)
        errors: list[BaseException] = []

        def go(fn: Any, gate: threading.Barrier = gate, errors: list[BaseException] = errors) -> None:
            gate.wait()
            try:
                fn()
            except BaseException as exc:  # an error in a thread is a failure of the test, not a lost thread
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(lambda cid=cid: campaign_fan_out.cancel(42, cid),)),
                   threading.Thread(target=go, args=(lambda c=c, nid=nid: apply_receipt(
                       "sms", f"rc-race-{nid}", f"ref-{nid}", "failed", c.dedupe_key),))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert row(nid).status == "SUPPRESSED"
        if pending_on_settled():
            stranded.append(nid)
    assert stranded == [], f"{len(stranded)} of 20 failed receipts left pending on a cancelled row"
    assert balance() == start and not any(invariant_counts().values())


def test_a_stalled_workers_late_accept_of_a_bounced_then_cancelled_row_is_old_news(db):
    """A worker claims a campaign's row and stalls past its lease; the provider's `failed` receipt comes while the
    row is owed (kept), the campaign is cancelled (the row SUPPRESSED, the receipt settled with it); then the stalled
    worker's 2xx arrives. The provider has said it could not deliver that message: the late accept is stale — the
    row stays SUPPRESSED and uncharged (before: the late truth made it SENT and charged, the bounce forgotten)."""
    start = balance()
    cid, nid = campaign_row()
    c = ready(nid, "A")
    lease_runs_out(nid)
    got = apply_receipt(row(nid).channel, f"rc-failed-{nid}", f"ref-{nid}", "failed", c.dedupe_key)
    assert got.status == "pending"
    assert campaign_fan_out.cancel(42, cid) >= 1
    assert (row(nid).status, row(nid).last_error_class) == ("SUPPRESSED", "undeliverable")
    assert record(c, Succeeded(False), f"ref-{nid}") == "stale"
    r = row(nid)
    assert (r.status, r.reserved_cents) == ("SUPPRESSED", 0), "a bounced message was recorded sent and charged"
    assert balance() == start and pending_on_settled() == 0
    assert not any(invariant_counts().values()), invariant_counts()
