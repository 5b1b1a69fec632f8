"""A batch of receipts settled in the order they came, as if each had come alone — on real PostgreSQL, through
`apply_receipts` and, for the twin, `apply_receipt` one receipt at a time.

Found by the adversarial review of "Receipts in batches": `settle_receipts` settled a batch's money-moving receipts
row by row (in row id order) and every other receipt after them against how its row finally stood, so
- a batch whose `failed` receipt (a refund) came before another row's late `delivered` (a charge) charged first:
  with the balance spent, the late truth was recorded uncharged ("the balance could not cover it", invariants 5
  and 8) although the refund the provider had sent first would have covered it;
- a `failed` receipt for a row settled unsent, followed by a `delivered` one, was closed as if the provider had
  said delivered first ("DELIVERED is final") instead of applied to the row as it stood when it came.

Invariants protected: money exact (the same entries as the receipts one at a time, in the order they came: a row
charged once, refunded at most once, never a sent message left uncharged for want of a refund still to come); a
receipt's record says what it did when it came; invariant 14 and every other `outbox check` count 0.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.receipts import Receipt, apply_receipt, apply_receipts
from domain.delivery.retry import Fail, Retry, Succeeded
from tests.support.db import assert_invariants
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person, sms


def spend_it_all() -> None:
    """The tenant's balance spent (an adjustment, so the entries still sum to it)."""
    with get_engine().begin() as c:
        c.execute(sa.text("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) SELECT 42, "
                          "'adjustment', -balance_cents, 'test: spend it all' FROM balances WHERE tenant_id = 42"))
        c.execute(sa.text("UPDATE balances SET balance_cents = 0 WHERE tenant_id = 42"))


def failed_unsent(rid: int, period: str) -> tuple[int, str]:
    """A row whose worker gave up (FAILED, refunded) although the provider had taken it: its key."""
    nid = sms(rid, period)
    c = ready(nid)
    assert record(c, Fail("timeout", False), code=None) == "failed"
    return nid, c.dedupe_key


def sent(rid: int, period: str, ref: str) -> int:
    nid = sms(rid, period)
    assert record(ready(nid), Succeeded(False), ref) == "sent"
    return nid


def receipts(nid: int) -> list[Any]:
    with get_engine().connect() as c:
        return [tuple(r) for r in c.execute(sa.text(
            "SELECT outcome, applied_at IS NOT NULL, closed_reason FROM delivery_receipts WHERE notification_id = :n "
            "ORDER BY id"), {"n": nid})]


def state(nid: int) -> tuple[Any, ...]:
    r = row(nid)
    return r.status, r.reason_detail, entries(nid), receipts(nid)


def test_a_refund_before_another_rows_late_charge_in_a_batch_pays_for_it_as_one_at_a_time(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    twins = {}
    for side in ("batch", "alone"):
        late, key = failed_unsent(rid, f"late-{side}")  # the lower id: settled first when rows went in id order
        bounced = sent(rid, f"bounce-{side}", f"bn-{s}-{side}")
        twins[side] = (late, key, bounced)
    spend_it_all()
    late, key, bounced = twins["batch"]
    got = apply_receipts("sms", [Receipt(f"rc-{s}-bf", f"bn-{s}-batch", "failed"),
                                 Receipt(f"rc-{s}-bd", f"lt-{s}-batch", "delivered", key)])
    assert [r.status for r in got] == ["applied", "applied"]
    spend_it_all()
    a_late, a_key, a_bounced = twins["alone"]
    assert apply_receipt("sms", f"rc-{s}-af", f"bn-{s}-alone", "failed").status == "applied"
    assert apply_receipt("sms", f"rc-{s}-ad", f"lt-{s}-alone", "delivered", a_key).status == "applied"
    price = row(late).cost_cents
    assert entries(late) == [("reserve", -price), ("refund", price), ("reserve", -price)], "the late truth charged"
    assert state(late) == state(a_late) and state(bounced) == state(a_bounced)
    assert_invariants()


def test_a_failed_then_delivered_receipt_for_a_row_settled_unsent_is_recorded_as_one_at_a_time(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    (late, key), (a_late, a_key) = failed_unsent(rid, "fd-batch"), failed_unsent(rid, "fd-alone")
    got = apply_receipts("sms", [Receipt(f"rc-{s}-bf", f"fd-{s}-b", "failed", key),
                                 Receipt(f"rc-{s}-bd", f"fd-{s}-b", "delivered", key)])
    assert [r.status for r in got] == ["applied", "applied"]
    assert apply_receipt("sms", f"rc-{s}-af", f"fd-{s}-a", "failed", a_key).status == "applied"
    assert apply_receipt("sms", f"rc-{s}-ad", f"fd-{s}-a", "delivered", a_key).status == "applied"
    assert receipts(late)[0] == ("failed", True, None), "applied to the FAILED row as it stood when it came"
    assert state(late) == state(a_late)
    assert_invariants()


def test_a_failed_then_delivered_receipt_for_a_row_still_owed_is_answered_as_one_at_a_time(db):
    """Alone, the `failed` receipt finds the row owed (the worker timed out, the provider had taken it) and is kept
    waiting (pending); the `delivered` one then settles the row and it. In one batch: the same answers, the same
    row, money and receipts."""
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    twins = []
    for side in ("batch", "alone"):
        nid = sms(rid, f"owed-{side}")
        c = ready(nid)
        assert record(c, Retry("timeout", 0.0), code=None) == "retry"
        twins.append((nid, c.dedupe_key))
    (nid, key), (a_nid, a_key) = twins
    got = apply_receipts("sms", [Receipt(f"rc-{s}-bf", f"ow-{s}-b", "failed", key),
                                 Receipt(f"rc-{s}-bd", f"ow-{s}-b", "delivered", key)])
    alone = [apply_receipt("sms", f"rc-{s}-af", f"ow-{s}-a", "failed", a_key),
             apply_receipt("sms", f"rc-{s}-ad", f"ow-{s}-a", "delivered", a_key)]
    assert [r.status for r in got] == [r.status for r in alone] == ["pending", "applied"]
    assert state(nid) == state(a_nid) and row(nid).status == "DELIVERED"
    assert_invariants()
