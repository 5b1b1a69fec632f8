"""The receipts API against a provider's hostile or broken bodies (the adversarial review of "Receipts in batches") —
the real ASGI API on real PostgreSQL.

A body under a good signature is the provider's, but not therefore well formed. Found: a batch id or a receipt's
fields of another JSON type were read through `str()` — a `null` receipt id became the receipt id "None" (kept for
ever: every later receipt with a null id answered "duplicate" and was dropped), a batch id 5 signed as "5" was
taken; a missing field or an item that is not an object answered 401 `bad_signature` (the provider is told its
secret is wrong); a NUL in a body posted as `text/plain` (the guard reads JSON content types only) reached
PostgreSQL and answered 500, which the provider retries.

Invariants protected: bad input changes nothing and is answered a clear 4xx — 422 `invalid_receipt` naming the
field at fault for a signed body of the wrong shape, 401 only for a bad signature or a webhook id that is not the
body's own; a receipt id applied once ever (a receipt signed alone and then carried in a batch is a duplicate).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from domain.delivery.signing import signed_headers
from domain.settings import get_settings
from tests.integration.test_dashboard_api_hostile_input import fingerprint
from tests.integration.test_delivery_receipts_batch import kept, sent
from tests.support.long_way import entries, row
from tests.support.people import person


def signed(body: str, webhook_id: str, content_type: str = "application/json") -> dict[str, str]:
    return {**signed_headers(get_settings().receipt_secret, webhook_id, body), "content-type": content_type}


async def test_a_signed_body_of_the_wrong_shape_is_a_422_naming_the_field_and_changes_nothing(db, client):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    nid = sent(rid, "shape", f"sh-{s}")
    good = {"receipt_id": f"rc-{s}", "provider_reference": f"sh-{s}", "outcome": "delivered"}
    cases: list[tuple[dict[str, Any], str, str]] = [  # body, webhook id, the field named
        ({"batch_id": 5, "receipts": [good]}, "5", "batch_id"),
        ({"batch_id": None, "receipts": [good]}, "None", "batch_id"),
        ({"batch_id": "b", "receipts": {"0": good}}, "b", "receipts"),
        ({"batch_id": "b", "receipts": [good, 5]}, "b", "receipts[1]"),
        ({"batch_id": "b", "receipts": [good, {**good, "outcome": None}]}, "b", "receipts[1].outcome"),
        ({"batch_id": "b", "receipts": [good, {"receipt_id": "x", "outcome": "failed"}]}, "b",
         "receipts[1].provider_reference"),
        ({"batch_id": "b", "receipts": [{**good, "receipt_id": None}]}, "b", "receipts[0].receipt_id"),
        ({"batch_id": "b", "receipts": [{**good, "receipt_id": 12}]}, "b", "receipts[0].receipt_id"),
        ({"batch_id": "b", "receipts": [{**good, "provider_reference": {"a": 1}}]}, "b",
         "receipts[0].provider_reference"),
        ({"batch_id": "b", "receipts": [{**good, "client_reference": [1]}]}, "b", "receipts[0].client_reference"),
        ({"batch_id": "b", "receipts": []}, "b", "receipts"),
        ({**good, "receipt_id": 77}, "77", "receipt_id"),
        ({"receipt_id": f"rc-{s}", "outcome": "delivered"}, f"rc-{s}", "provider_reference"),
    ]
    before = fingerprint()
    for body, webhook_id, field in cases:
        raw = json.dumps(body)
        r = await client.post("/api/v1/receipts/sms", content=raw, headers=signed(raw, webhook_id))
        assert (r.status_code, r.json().get("error"), r.json().get("field")) == (422, "invalid_receipt", field), \
            (body, r.text)
    assert fingerprint() == before and kept("None") == 0 and row(nid).status == "SENT"


async def test_a_nul_or_lone_surrogate_in_a_body_posted_as_plain_text_is_a_422_not_a_500(db, client):
    s = uuid.uuid4().hex[:6]
    good = {"receipt_id": f"rc-{s}", "provider_reference": f"pt-{s}", "outcome": "delivered"}
    before = fingerprint()
    for bad in ("a\u0000b", "\ud800"):
        for body, webhook_id, field in (
                ({"batch_id": f"b-{s}", "receipts": [good, {**good, "provider_reference": bad}]}, f"b-{s}",
                 "receipts[1].provider_reference"),
                ({**good, "provider_reference": bad}, f"rc-{s}", "provider_reference")):
            raw = json.dumps(body)
            r = await client.post("/api/v1/receipts/sms", content=raw, headers=signed(raw, webhook_id, "text/plain"))
            assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert fingerprint() == before


async def test_a_receipt_signed_alone_then_carried_in_a_batch_is_a_duplicate(db, client):
    rid, _ = person(cap=None)
    s = uuid.uuid4().hex[:6]
    nid = sent(rid, "alone", f"al-{s}")
    receipt = {"receipt_id": f"rc-{s}", "provider_reference": f"al-{s}", "outcome": "failed"}
    alone = json.dumps(receipt)
    r = await client.post("/api/v1/receipts/sms", content=alone, headers=signed(alone, f"rc-{s}"))
    assert r.json() == {"status": "applied"}, r.text
    batch = json.dumps({"batch_id": f"rb-{s}", "receipts": [receipt]})
    r = await client.post("/api/v1/receipts/sms", content=batch, headers=signed(batch, f"rc-{s}"))
    assert r.status_code == 401, "the batch under the receipt's id: not its own signature"
    r = await client.post("/api/v1/receipts/sms", content=batch, headers=signed(batch, f"rb-{s}"))
    assert r.json() == {"results": [{"receipt_id": f"rc-{s}", "status": "duplicate"}]}, r.text
    assert entries(nid) == [("reserve", -row(nid).cost_cents), ("refund", row(nid).cost_cents)]
    assert kept(f"rc-{s}") == 1
