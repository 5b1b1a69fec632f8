"""A provider's receipts in batches (issue 26: receipts applied in batches, a campaign's receipts off the per-message
path) — on real PostgreSQL, through the ledger's one settling mechanism and the signed API.

Invariants protected: a batch answers each receipt exactly as it would have been answered alone (applied, pending,
duplicate, unknown_reference), in order; a receipt id is kept once, even twice in one batch; the money is exact (a
`delivered` receipt on a SENT row moves none, a `failed` one refunds once); a bad batch changes nothing; a batch
costs a bounded number of statements and ONE commit, however many receipts it carries; the API takes a batch only
under the signature of its own batch id.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.receipts import MAX_BATCH, Receipt, apply_receipt, apply_receipts
from domain.delivery.retry import Retry, Succeeded
from domain.delivery.signing import signed_headers
from domain.invariants import invariant_counts
from domain.settings import get_settings
from tests.support.db import one
from tests.support.long_way import entries, ready, record, row
from tests.support.people import person, sms


def kept(receipt_id: str) -> int:
    return int(one("SELECT count(*) FROM delivery_receipts WHERE receipt_id = :i", i=receipt_id))


def sent(rid: int, period: str, ref: str) -> int:
    """An SMS claimed and recorded as accepted by the provider under `ref` (SENT, charged)."""
    nid = sms(rid, period)
    assert record(ready(nid), Succeeded(False), ref) == "sent"
    return nid


def test_a_batch_answers_each_receipt_as_if_it_came_alone(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    delivered, early, seen, twice = (sent(rid, "b1", f"b-{s}-1"), sms(rid, "b2"), sent(rid, "b3", f"b-{s}-3"),
                                     sent(rid, "b4", f"b-{s}-4"))
    early_claim = ready(early)
    assert record(early_claim, Retry("timeout", 0.0), code=None) == "retry"  # the provider took it, we timed out
    assert apply_receipt("sms", f"rc-{s}-seen", f"b-{s}-3", "delivered").status == "applied"
    results = apply_receipts("sms", [
        Receipt(f"rc-{s}-1", f"b-{s}-1", "delivered"),
        Receipt(f"rc-{s}-2", f"b-{s}-2", "failed", early_claim.dedupe_key),  # reference not recorded: by our key
        Receipt(f"rc-{s}-seen", f"b-{s}-3", "delivered"),  # a provider's retry of a receipt already applied
        Receipt(f"rc-{s}-4", f"b-{s}-4", "delivered"),
        Receipt(f"rc-{s}-4", f"b-{s}-4", "delivered"),  # the same receipt twice in one batch
        Receipt(f"rc-{s}-x", f"b-{s}-nobody", "delivered"),
    ])
    assert [r.status for r in results] == ["applied", "pending", "duplicate", "applied", "duplicate",
                                           "unknown_reference"]
    assert [r.notification_id for r in results] == [delivered, early, seen, twice, twice, None]
    assert [row(n).status for n in (delivered, early, seen, twice)] == ["DELIVERED", "QUEUED", "DELIVERED", "DELIVERED"]
    assert kept(f"rc-{s}-4") == 1 and kept(f"rc-{s}-x") == 1, "each receipt id kept once; the unknown one kept too"
    for nid in (delivered, seen, twice):  # charged once at the send; a delivered receipt moves no money
        assert entries(nid) == [("reserve", -row(nid).cost_cents)]
    # The pending `failed` receipt is settled by the row's record: FAILED undeliverable, refunded once.
    assert record(ready(early), Succeeded(False), f"b-{s}-2") == "sent"
    assert (row(early).status, row(early).last_error_class) == ("FAILED", "undeliverable")
    assert entries(early) == [("reserve", -row(early).cost_cents), ("refund", row(early).cost_cents)]
    assert not any(invariant_counts().values()), invariant_counts()


def test_a_failed_receipt_before_a_delivered_one_in_a_batch_keeps_their_order(db):
    """Two receipts for one SENT row in one batch, `failed` first: the order they came in holds (the bounce refunds,
    then the delivered is the late truth and charges again: one charge in the end), as if each had come alone."""
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    nid = sent(rid, "o1", f"o-{s}")
    price = row(nid).cost_cents
    results = apply_receipts("sms", [Receipt(f"rc-{s}-f", f"o-{s}", "failed"),
                                     Receipt(f"rc-{s}-d", f"o-{s}", "delivered")])
    assert [r.status for r in results] == ["applied", "applied"]
    assert row(nid).status == "DELIVERED"
    assert entries(nid) == [("reserve", -price), ("refund", price), ("reserve", -price)]
    assert not any(invariant_counts().values()), invariant_counts()


def test_a_batch_with_a_bad_receipt_changes_nothing(db):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    nid = sent(rid, "x1", f"x-{s}")
    with pytest.raises(ValueError, match="outcome must be delivered or failed"):
        apply_receipts("sms", [Receipt(f"rc-{s}-ok", f"x-{s}", "delivered"), Receipt(f"rc-{s}-no", f"x-{s}", "read")])
    assert kept(f"rc-{s}-ok") == 0 and row(nid).status == "SENT"
    with pytest.raises(ValueError, match=f"at most {MAX_BATCH}"):
        apply_receipts("sms", [Receipt(f"rc-{s}-{i}", f"x-{s}", "delivered") for i in range(MAX_BATCH + 1)])
    assert kept(f"rc-{s}-0") == 0 and row(nid).status == "SENT"


def test_a_batch_is_one_commit_and_a_bounded_number_of_statements(db):
    """The common case — `delivered` on SENT rows — costs the same few statements for 3 receipts as for 30."""
    rid, _ = person(cap=None)
    counts = []
    for size in (3, 30):
        s = uuid.uuid4().hex[:6]
        nids = [sent(rid, f"n{size}-{i}", f"n-{s}-{i}") for i in range(size)]
        statements: list[str] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any, seen: list[str] = statements) -> None:
            seen.append(statement)

        sa.event.listen(get_engine(), "before_cursor_execute", count)
        try:
            results = apply_receipts("sms", [Receipt(f"rc-{s}-{i}", f"n-{s}-{i}", "delivered") for i in range(size)])
        finally:
            sa.event.remove(get_engine(), "before_cursor_execute", count)
        assert [r.status for r in results] == ["applied"] * size
        assert all(row(n).status == "DELIVERED" for n in nids)
        counts.append(len(statements))
    assert counts[0] == counts[1] <= 6, counts


async def test_the_api_takes_a_batch_signed_under_its_own_id(db, client):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    a, b = sent(rid, "api1", f"api-{s}-1"), sent(rid, "api2", f"api-{s}-2")
    secret = get_settings().receipt_secret

    def batch(batch_id: str, receipts: list[dict[str, str]]) -> tuple[str, dict[str, str]]:
        body = json.dumps({"batch_id": batch_id, "receipts": receipts})
        return body, {**signed_headers(secret, batch_id, body), "content-type": "application/json"}

    items = [{"receipt_id": f"rc-{s}-1", "provider_reference": f"api-{s}-1", "outcome": "delivered"},
             {"receipt_id": f"rc-{s}-2", "provider_reference": f"api-{s}-2", "outcome": "delivered"},
             {"receipt_id": f"rc-{s}-3", "provider_reference": f"api-{s}-nobody", "outcome": "failed"}]
    # Signed under another id than the batch's (a receipt's signature replayed around a forged batch): refused.
    body, headers = batch(f"rb-{s}", items)
    forged = {**headers, **{k: v for k, v in signed_headers(secret, f"rc-{s}-1", body).items()}}
    forged["webhook-id"] = f"rc-{s}-1"
    r = await client.post("/api/v1/receipts/sms", content=body, headers=forged)
    assert r.status_code == 401 and kept(f"rc-{s}-1") == 0, r.text
    too_many = [{**items[0], "receipt_id": f"rc-{s}-m{i}"} for i in range(MAX_BATCH + 1)]
    r = await client.post("/api/v1/receipts/sms", content=batch(f"rb-{s}-big", too_many)[0],
                          headers=batch(f"rb-{s}-big", too_many)[1])
    assert r.status_code == 422 and kept(f"rc-{s}-m0") == 0, r.text
    body, headers = batch(f"rb-{s}", items)
    r = await client.post("/api/v1/receipts/sms", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [{"receipt_id": f"rc-{s}-1", "status": "applied"},
                                    {"receipt_id": f"rc-{s}-2", "status": "applied"},
                                    {"receipt_id": f"rc-{s}-3", "status": "unknown_reference"}]}
    assert (row(a).status, row(b).status) == ("DELIVERED", "DELIVERED")
    r = await client.post("/api/v1/receipts/sms", content=body, headers=headers)  # the provider retries the batch
    assert [x["status"] for x in r.json()["results"]] == ["duplicate", "duplicate", "unknown_reference"]
    assert entries(a) == [("reserve", -row(a).cost_cents)] and kept(f"rc-{s}-1") == 1


def test_a_lone_receipt_finds_its_row_by_the_one_row_statements(db):
    """A quiet provider's receipt comes alone: it is found and locked by the one-row statements (`BY_REFERENCE`,
    else `BY_KEY`) as before batching, not by the batch's unnest statements (which cost PostgreSQL more to plan on
    every single receipt), and lands where a batch would put it: the row recorded under its reference, else the
    row sent under our key while the send is not recorded (kept pending)."""
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    recorded, unrecorded = sent(rid, "l1", f"l-{s}-1"), sms(rid, "l2")
    claim = ready(unrecorded)
    assert record(claim, Retry("timeout", 0.0), code=None) == "retry"  # the provider took it, we timed out
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(" ".join(statement.split()))

    sa.event.listen(get_engine(), "before_cursor_execute", seen)
    try:
        by_reference = apply_receipt("sms", f"rl-{s}-1", f"l-{s}-1", "delivered")
        by_key = apply_receipt("sms", f"rl-{s}-2", f"l-{s}-2", "failed", claim.dedupe_key)
    finally:
        sa.event.remove(get_engine(), "before_cursor_execute", seen)
    assert (by_reference.status, by_reference.notification_id) == ("applied", recorded)
    assert (by_key.status, by_key.notification_id) == ("pending", unrecorded)
    assert row(recorded).status == "DELIVERED"
    assert not [q for q in statements if "WITH ORDINALITY AS v(ref" in q], statements  # no batch locate statement
