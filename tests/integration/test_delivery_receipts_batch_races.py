"""A batch of receipts racing the worker that records the same rows, and another batch carrying the same receipt
ids (probes of the adversarial review of "Receipts in batches", kept: each held) — on real PostgreSQL, two at once.

Invariants protected: a `failed` receipt arriving while the worker records the send — through the long way
(`long_way.record`) or a drain loop's batch record (`store_batch.record_batch`) — is never left pending on a settled
row (invariant 14): the row ends FAILED `undeliverable`, charged once and refunded once, whichever commits first; a
receipt id is kept once ever (invariant 13), whichever of two concurrent batches carries it first, and the other
answers "duplicate" and moves nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial

from domain.delivery import store_batch
from domain.delivery.receipts import Receipt, apply_receipts
from domain.delivery.retry import Succeeded
from tests.integration.test_delivery_batch import claim, pool, sent, sms_rows  # noqa: F401 (pool: a fixture)
from tests.support.db import assert_invariants, one
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person, sms
from tests.support.threads import at_once


def bounced_once(nid: int) -> None:
    r = row(nid)
    assert (r.status, r.last_error_class) == ("FAILED", "undeliverable"), (nid, r.status)
    assert entries(nid) == [("reserve", -r.cost_cents), ("refund", r.cost_cents)]


def test_a_failed_receipt_racing_the_workers_record_refunds_once(db):
    rid, _ = person(cap=None)
    for attempt in range(8):
        s = uuid.uuid4().hex[:6]
        other = sms(rid, f"race-other-{attempt}")
        assert record(ready(other), Succeeded(False), f"ro-{s}") == "sent"
        nid = sms(rid, f"race-{attempt}")
        c = ready(nid)
        batch = [Receipt(f"rc-{s}-o", f"ro-{s}", "delivered"), Receipt(f"rc-{s}-f", f"rf-{s}", "failed", c.dedupe_key)]
        recorded, answers = at_once(partial(record, c, Succeeded(False), f"rf-{s}"),
                                    partial(apply_receipts, "sms", batch))
        assert recorded == "sent" and answers[0].status == "applied" and answers[1].status in ("applied", "pending")
        bounced_once(nid)
        assert row(other).status == "DELIVERED"
    assert_invariants()


async def test_a_batch_of_receipts_racing_a_drain_loops_batch_record_refunds_each_bounce_once(pool):  # noqa: F811
    for attempt in range(4):
        ids = sms_rows(6)
        claims = {r.claim.id: r.claim for r in (await claim(pool)).ready}
        assert sorted(claims) == ids
        s = uuid.uuid4().hex[:6]
        receipts = [Receipt(f"rc-{s}-{i}", f"hb-{s}-{i}", "failed" if i % 2 else "delivered", claims[i].dedupe_key)
                    for i in reversed(ids)]
        records = store_batch.record_batch(pool, [sent(claims[i], f"hb-{s}-{i}") for i in ids], "w")
        answers = asyncio.to_thread(apply_receipts, "sms", receipts)
        await (asyncio.gather(records, answers) if attempt % 2 else asyncio.gather(answers, records))
        for i in ids:
            if i % 2:
                bounced_once(i)
            else:
                assert row(i).status == "DELIVERED" and entries(i) == [("reserve", -row(i).cost_cents)]
    assert_invariants()


def test_a_receipt_id_in_two_concurrent_batches_is_kept_once(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    a, b = (sms(rid, f"twice-{x}") for x in "ab")
    for nid, ref in ((a, f"ta-{s}"), (b, f"tb-{s}")):
        assert record(ready(nid), Succeeded(False), ref) == "sent"
    one_way = [Receipt(f"X-{s}", f"ta-{s}", "failed"), Receipt(f"Y-{s}", f"tb-{s}", "failed")]
    other_way = [Receipt(f"Y-{s}", f"tb-{s}", "delivered"), Receipt(f"X-{s}", f"ta-{s}", "delivered")]
    answers = at_once(partial(apply_receipts, "sms", one_way), partial(apply_receipts, "sms", other_way))
    assert sorted([r.status for r in got] for got in answers) == [["applied"] * 2, ["duplicate"] * 2]
    assert one("SELECT count(*) FROM delivery_receipts WHERE receipt_id IN (:x, :y)", x=f"X-{s}", y=f"Y-{s}") == 2
    first = 0 if answers[0][0].status == "applied" else 1
    for nid in (a, b):  # the batch that came first decided, the other moved nothing
        if first == 0:
            bounced_once(nid)
        else:
            assert row(nid).status == "DELIVERED" and entries(nid) == [("reserve", -row(nid).cost_cents)]
    assert_invariants()
