"""Two batches of receipts for the same rows, posted at once in opposite orders (the adversarial review of
"Receipts in batches") — on real PostgreSQL, two threads.

Found: a batch's rows found by the provider's reference were locked in id order, but a row found by the key we sent
(its send not recorded yet: the worker timed out, or is recording it) was locked receipt by receipt, in the order the
receipts came — so two batches naming the same such rows in opposite orders deadlocked: each waited out
PostgreSQL's deadlock_timeout (1 s) holding every row it had locked, and one was run again from the start.

Invariants protected: a batch's rows, however found, are locked in one order (id order) by one statement — two
batches, or a batch and a worker, take turns instead of deadlocking; each answers as if it had come alone; the
rows end as the receipts say; every `outbox check` count 0.
"""

from __future__ import annotations

import threading
import time
import uuid
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import receipts as receipts_module
from domain.delivery.receipts import Receipt, apply_receipts
from domain.delivery.retry import Retry
from jobs.ops.procs import wait_until
from tests.support.db import assert_invariants, waiting_on_a_lock
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person, sms
from tests.support.threads import at_once


def test_two_batches_naming_unrecorded_rows_in_opposite_orders_take_turns(db, monkeypatch: pytest.MonkeyPatch):
    rid, _ = person(cap=None)
    runs: list[int] = []
    apply_once = receipts_module._apply

    def counted(*args: Any) -> Any:
        runs.append(1)
        return apply_once(*args)

    monkeypatch.setattr(receipts_module, "_apply", counted)
    for attempt in range(3):
        s = uuid.uuid4().hex[:6]
        owed = []
        for j in range(3):
            nid = sms(rid, f"lk{attempt}-{j}")
            c = ready(nid)
            assert record(c, Retry("timeout", 0.0), code=None) == "retry"  # the provider took it; not recorded
            owed.append((nid, c.dedupe_key))
        bounces = [Receipt(f"rc-{s}-f{j}", f"lk-{s}-{j}", "failed", key) for j, (_, key) in enumerate(owed)]
        truths = [Receipt(f"rc-{s}-d{j}", f"lk-{s}-{j}", "delivered", key) for j, (_, key) in enumerate(owed)][::-1]
        runs.clear()
        began = time.monotonic()
        a, b = at_once(partial(apply_receipts, "sms", bounces), partial(apply_receipts, "sms", truths))
        took = time.monotonic() - began
        assert isinstance(a, list) and isinstance(b, list), (a, b)
        assert len(runs) == 2 and took < 1.0, f"a deadlock: {len(runs)} runs of 2, {took:.2f} s"
        assert [r.status for r in b] == ["applied"] * 3
        assert {r.status for r in a} <= {"pending", "applied"} and len({r.status for r in a}) == 1
        for nid, _ in owed:
            assert row(nid).status == "DELIVERED" and entries(nid) == [("reserve", -row(nid).cost_cents)]
    assert_invariants()


def test_a_row_replayed_while_a_batch_waits_for_its_lock_is_not_the_receipts_row(db):
    """The batch finds the row by our key, then waits for its lock while the row is replayed under a key of its
    own (a bounce's replay is a new message for the provider): once locked, the row is no longer the receipt's, and
    the old receipt does not land on the replayed message (unknown, as alone)."""
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    nid = sms(rid, "replayed")
    c = ready(nid)
    assert record(c, Retry("timeout", 0.0), code=None) == "retry"
    with get_engine().connect() as other:
        other.execute(sa.text("UPDATE notifications SET provider_key = :k WHERE id = :n"),
                      {"k": f"replay-{s}", "n": nid})
        out: list[Any] = []
        batch = threading.Thread(target=lambda: out.append(apply_receipts(
            "sms", [Receipt(f"rc-{s}", f"old-{s}", "delivered", c.dedupe_key)])))
        batch.start()
        # The batch has found the row by our key and waits for its lock (the UPDATE above holds it).
        wait_until(waiting_on_a_lock, 10, "the batch waiting for the row's lock")  # the only backend that can
        other.commit()
    batch.join()
    assert [r.status for r in out[0]] == ["unknown_reference"]
    assert row(nid).status == "QUEUED" and entries(nid) == [("reserve", -row(nid).cost_cents)]
    assert_invariants()
