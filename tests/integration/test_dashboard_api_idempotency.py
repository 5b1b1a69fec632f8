"""`Idempotency-Key` on every POST that needs an API key, stored per tenant in PostgreSQL (real ASGI app, real
database).

Invariants: the same key with the same request answers the first answer again and changes nothing more; the same
key with another request is 422 `idempotency_key_reused` and changes nothing; keys are per tenant; a refused
request shape does not use the key up; an expired key is free again; two concurrent requests with one key create
once; every such POST documents the header.
"""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from domain.db import get_engine

ORDER = {"customer_ref": "cust-idem", "amount_cents": 4200, "currency": "EUR"}


def orders_of(ref: str) -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT count(*) FROM orders WHERE customer_ref = :r"), {"r": ref}).scalar())


async def test_same_key_and_body_replays_the_first_answer_and_creates_once(client, key42):
    """Invariant: a retried create (same key, same body) gets the first 201 back, byte for byte; one order."""
    h = {**key42, "Idempotency-Key": "order-create-0001"}
    first = await client.post("/api/v1/orders", json=ORDER, headers=h)
    again = await client.post("/api/v1/orders", json=dict(reversed(list(ORDER.items()))), headers=h)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert orders_of("cust-idem") == 1


async def test_same_key_with_another_body_is_422_reused_and_changes_nothing(client, key42):
    """Invariant: a key names one request; another body under it is refused and writes nothing."""
    h = {**key42, "Idempotency-Key": "order-create-0002"}
    assert (await client.post("/api/v1/orders", json=ORDER, headers=h)).status_code == 201
    r = await client.post("/api/v1/orders", json={**ORDER, "amount_cents": 5}, headers=h)
    assert r.status_code == 422 and r.json()["error"] == "idempotency_key_reused", r.text
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "x"},
                          headers=h)
    assert r.status_code == 422 and r.json()["error"] == "idempotency_key_reused"
    assert orders_of("cust-idem") == 1
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT revision FROM orders WHERE id = 913")).scalar() == 17


async def test_a_replayed_transition_is_not_applied_twice(client, key42):
    """Invariant: an approve retried with its key answers the first 200 (not a 409), and the revision moved once."""
    h = {**key42, "Idempotency-Key": "approve-913"}
    body = {"expected_revision": 17, "request_id": "req-idem"}
    first = await client.post("/api/v1/orders/913/approve", json=body, headers=h)
    again = await client.post("/api/v1/orders/913/approve", json=body, headers=h)
    assert first.status_code == again.status_code == 200 and again.json() == first.json()
    without_key = await client.post("/api/v1/orders/913/approve", json=body, headers=key42)
    assert without_key.status_code == 409, "without a key the second approve is a stale revision, as before"
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM outbox_events WHERE aggregate_id = '913' "
                                 "AND aggregate_revision = 18")).scalar() == 1


async def test_keys_are_per_tenant(client, key42, key7):
    """Invariant: another tenant's use of the same key string is its own request (no cross-tenant replay)."""
    h42, h7 = {**key42, "Idempotency-Key": "shared-key"}, {**key7, "Idempotency-Key": "shared-key"}
    a = await client.post("/api/v1/orders", json=ORDER, headers=h42)
    b = await client.post("/api/v1/orders", json={**ORDER, "amount_cents": 1}, headers=h7)
    assert a.status_code == b.status_code == 201 and a.json()["order_id"] != b.json()["order_id"]
    assert "Idempotent-Replayed" not in b.headers


async def test_a_refused_shape_does_not_use_the_key_up(client, key42):
    """Invariant: a request refused before anything ran (invalid_request) frees its key: the corrected request
    under the same key is created."""
    h = {**key42, "Idempotency-Key": "fix-and-retry"}
    bad = await client.post("/api/v1/orders", json={**ORDER, "amount_cents": "5"}, headers=h)
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"
    good = await client.post("/api/v1/orders", json=ORDER, headers=h)
    assert good.status_code == 201 and "Idempotent-Replayed" not in good.headers


async def test_an_expired_key_is_free_again(client, key42):
    """Invariant: keys are kept until expires_at, not for ever."""
    h = {**key42, "Idempotency-Key": "expiring"}
    assert (await client.post("/api/v1/orders", json=ORDER, headers=h)).status_code == 201
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'"))
    r = await client.post("/api/v1/orders", json={**ORDER, "amount_cents": 7}, headers=h)
    assert r.status_code == 201 and "Idempotent-Replayed" not in r.headers
    assert orders_of("cust-idem") == 2


async def test_concurrent_requests_with_one_key_create_once(client, key42):
    """Invariant: racing duplicates create one order; each answer is the first 201 replayed or 409 in_use."""
    h = {**key42, "Idempotency-Key": "racing"}
    answers = await asyncio.gather(*[client.post("/api/v1/orders", json=ORDER, headers=h) for _ in range(6)])
    created = {r.json()["order_id"] for r in answers if r.status_code == 201}
    assert len(created) == 1, [r.text for r in answers]
    assert all(r.status_code == 201 or r.json()["error"] == "idempotency_key_in_use" for r in answers)
    assert orders_of("cust-idem") == 1


async def test_a_bad_key_is_422_naming_the_header(client, key42):
    """Invariant: a key that is not 1..255 printable ASCII characters is refused and nothing is created."""
    for bad in ("", "has space", "x" * 256):
        r = await client.post("/api/v1/orders", json=ORDER, headers={**key42, "Idempotency-Key": bad})
        assert r.status_code == 422 and r.json()["field"] == "Idempotency-Key", (bad, r.text)
    assert orders_of("cust-idem") == 0


async def test_every_keyed_post_documents_the_header(client):
    """Invariant: the OpenAPI document names Idempotency-Key on every POST that needs an API key."""
    spec = (await client.get("/api/openapi.json")).json()
    posts = [(p, ops["post"]) for p, ops in spec["paths"].items() if "post" in ops and ops["post"].get("security")]
    assert len(posts) >= 10
    for path, op in posts:
        assert "Idempotency-Key" in [x["name"] for x in op.get("parameters", [])], path
