"""What a batch of receipts may reach (probes of the adversarial review of "Receipts in batches", kept: each held) —
on real PostgreSQL.

Invariants protected: a provider's batch reaches only its own channel's rows — an SMS batch naming an email row's
reference, or the key we sent for an email row, answers unknown_reference and changes nothing there; a batch
whose rows and receipts lie in different months (the ledger and its receipts are partitioned by month) settles each
row and moves money exactly as if every receipt had come alone and in one month: charged once, refunded at most once
(a later truth charging again), the receipt kept pending in an older month settled with its row (invariant 14),
every `outbox check` count 0.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.receipts import Receipt, apply_receipt, apply_receipts
from domain.delivery.retry import Retry, Succeeded
from domain.ledger.send import send
from tests.support.db import assert_invariants
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person, sms

AUG = datetime(2026, 8, 14, 10, 30, tzinfo=UTC)  # a month long settled, before the test database's partitions


def email(rid: int, period: str) -> int:
    return send(tenant_id=42, recipient_id=rid, channel="email", template="offer", lane="normal",
                data={"headline": "x"}, subject_period=period).notification_id


def to_august(nid: int) -> None:
    """The message, its attempts, its key and its receipts moved back to August, as if it had all happened then."""
    with get_engine().begin() as c:
        for statement in (
                "UPDATE notifications SET created_at = :at, next_attempt_at = :at WHERE id = :n",
                "UPDATE notification_attempts SET notification_created_at = :at WHERE notification_id = :n",
                "UPDATE ledger_keys SET created_at = :at WHERE notification_id = :n",
                "UPDATE delivery_receipt_keys k SET received_at = :at + interval '1 day' FROM delivery_receipts r "
                "WHERE r.receipt_id = k.receipt_id AND r.notification_id = :n",
                "UPDATE delivery_receipts SET received_at = :at + interval '1 day' WHERE notification_id = :n"):
            c.execute(sa.text(statement), {"n": nid, "at": AUG})


def test_an_sms_batch_never_reaches_an_email_row(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    mail = email(rid, "scope-sent")
    assert record(ready(mail), Succeeded(False), f"em-{s}") == "sent"
    owed = email(rid, "scope-owed")
    c = ready(owed)
    assert record(c, Retry("timeout", 0.0), code=None) == "retry"
    text = sms(rid, "scope-sms")
    assert record(ready(text), Succeeded(False), f"sm-{s}") == "sent"
    got = apply_receipts("sms", [Receipt(f"rc-{s}-1", f"em-{s}", "failed"),
                                 Receipt(f"rc-{s}-2", f"nope-{s}", "delivered", c.dedupe_key),
                                 Receipt(f"rc-{s}-3", f"sm-{s}", "delivered")])
    assert [r.status for r in got] == ["unknown_reference", "unknown_reference", "applied"]
    assert (row(mail).status, row(owed).status, row(text).status) == ("SENT", "QUEUED", "DELIVERED")
    assert entries(mail) == [("reserve", -row(mail).cost_cents)]
    assert_invariants()


def test_a_batch_across_months_settles_each_row_as_one_at_a_time(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    old_sent = sms(rid, "month-sent")
    assert record(ready(old_sent), Succeeded(False), f"mo-{s}") == "sent"
    old_owed = sms(rid, "month-owed")
    c = ready(old_owed)
    assert record(c, Retry("timeout", 0.0), code=None) == "retry"
    assert apply_receipt("sms", f"rc-{s}-aug", f"mw-{s}", "failed", c.dedupe_key).status == "pending"
    to_august(old_sent)
    to_august(old_owed)
    new_sent = sms(rid, "month-new")
    assert record(ready(new_sent), Succeeded(False), f"mn-{s}") == "sent"
    got = apply_receipts("sms", [Receipt(f"rc-{s}-1", f"mn-{s}", "failed"),
                                 Receipt(f"rc-{s}-2", f"mo-{s}", "failed"),
                                 Receipt(f"rc-{s}-3", f"mw-{s}", "delivered", c.dedupe_key),
                                 Receipt(f"rc-{s}-4", f"mo-{s}", "delivered")])
    assert [r.status for r in got] == ["applied"] * 4
    price = row(new_sent).cost_cents
    assert (row(old_sent).status, entries(old_sent)) == ("DELIVERED", [("reserve", -price), ("refund", price),
                                                                        ("reserve", -price)])
    assert (row(old_owed).status, entries(old_owed)) == ("DELIVERED", [("reserve", -price)])
    assert (row(new_sent).status, entries(new_sent)) == ("FAILED", [("reserve", -price), ("refund", price)])
    assert row(old_sent).created_at == AUG
    assert_invariants()
