"""Webhook endpoints per tenant through the real ASGI app on real PostgreSQL.

Invariants: create answers 201 with a `whsec_` secret once, and no later read (list, get, enable, disable) carries a
secret; a URL to a loopback, private, link-local or metadata address is 422 `url_not_allowed` and creates nothing,
except the development allowlist (the mock receiver); disable, enable and delete do what they say and are audited;
rotate answers a new secret and both sign for 24 h (a receiver holding either verifies), then only the new one;
another tenant's endpoint looks exactly like a missing one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.signing import verify
from domain.endpoints import store
from domain.endpoints.signing import signed_headers_all
from domain.settings import get_settings

PUBLIC = "http://93.184.216.34/outbox-hooks"  # a public literal: no DNS needed in the test


def count() -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT count(*) FROM webhook_endpoints")).scalar())


async def test_create_shows_the_secret_once_and_reads_never_do(client, key42):
    """Invariant: the secret is in the 201 only."""
    r = await client.post("/api/v1/endpoints", json={"url": PUBLIC, "description": "shop",
                                                     "event_types": ["order.approved"]}, headers=key42)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["secret"].startswith("whsec_") and body["enabled"] and body["event_types"] == ["order.approved"]
    eid, secret = body["id"], body["secret"]
    reads = [await client.get("/api/v1/endpoints", headers=key42), await client.get(f"/api/v1/endpoints/{eid}",
                                                                                     headers=key42),
             await client.post(f"/api/v1/endpoints/{eid}/disable", headers=key42),
             await client.post(f"/api/v1/endpoints/{eid}/enable", headers=key42)]
    assert all(x.status_code == 200 for x in reads) and all(secret not in x.text and "secret" not in x.json()
                                                            for x in reads[1:])
    assert secret not in reads[0].text


async def test_private_targets_are_refused_and_create_nothing(client, key42):
    """Invariant: SSRF targets are 422 url_not_allowed naming the field; the mock receiver passes in development."""
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/",
                "http://localhost/", "http://[::1]/", "http://192.168.0.1/", "http://metadata.google.internal/"):
        r = await client.post("/api/v1/endpoints", json={"url": url}, headers=key42)
        assert r.status_code == 422 and r.json()["error"] == "url_not_allowed" and r.json()["field"] == "url", url
    assert count() == 0
    receiver = get_settings().receiver_url + "/webhooks/orders"
    ok = await client.post("/api/v1/endpoints", json={"url": receiver}, headers=key42)
    assert ok.status_code == 201, ok.text


async def test_disable_enable_delete_and_audit(client, key42):
    """Invariant: each change shows in the endpoint and in the audit log; a deleted endpoint is gone."""
    eid = (await client.post("/api/v1/endpoints", json={"url": PUBLIC}, headers=key42)).json()["id"]
    assert (await client.post(f"/api/v1/endpoints/{eid}/disable", headers=key42)).json()["enabled"] is False
    assert (await client.get(f"/api/v1/endpoints/{eid}", headers=key42)).json()["enabled"] is False
    assert (await client.post(f"/api/v1/endpoints/{eid}/enable", headers=key42)).json()["enabled"] is True
    assert (await client.delete(f"/api/v1/endpoints/{eid}", headers=key42)).status_code == 204
    assert (await client.get(f"/api/v1/endpoints/{eid}", headers=key42)).status_code == 404
    assert (await client.delete(f"/api/v1/endpoints/{eid}", headers=key42)).status_code == 404
    with get_engine().connect() as c:
        done = [r.action for r in c.execute(sa.text(
            "SELECT action FROM operator_actions WHERE action LIKE '%webhook endpoint%' ORDER BY id"))]
    assert done == ["create webhook endpoint", "disable webhook endpoint", "enable webhook endpoint",
                    "delete webhook endpoint"]


async def test_rotation_signs_with_both_secrets_for_24_hours(client, key42):
    """Invariant: during the overlap a receiver holding the old or the new secret verifies; after it, only new."""
    first = (await client.post("/api/v1/endpoints", json={"url": PUBLIC}, headers=key42)).json()
    rotated = await client.post(f"/api/v1/endpoints/{first['id']}/rotate", headers=key42)
    assert rotated.status_code == 200 and rotated.json()["secret"] != first["secret"]
    assert rotated.json()["rotating_until"] is not None
    now = datetime.now(UTC)
    both = store.signing_secrets(42, first["id"], now)
    assert both == [rotated.json()["secret"], first["secret"]]
    body = '{"event_id": "e-1"}'
    headers = signed_headers_all(both, "e-1", body, now)
    for held in (first["secret"], rotated.json()["secret"]):
        assert verify(held, body.encode(), headers) == {"event_id": "e-1"}
    assert store.signing_secrets(42, first["id"], now + timedelta(hours=24, seconds=1)) == [rotated.json()["secret"]]


async def test_another_tenants_endpoint_looks_missing(client, key42, key7):
    """Invariant: every verb on another tenant's endpoint answers exactly as for a missing one."""
    eid = (await client.post("/api/v1/endpoints", json={"url": PUBLIC}, headers=key42)).json()["id"]
    for method, suffix in (("GET", ""), ("POST", "/disable"), ("POST", "/rotate"), ("DELETE", "")):
        theirs = await client.request(method, f"/api/v1/endpoints/{eid}{suffix}", headers=key7)
        missing = await client.request(method, f"/api/v1/endpoints/999999{suffix}", headers=key7)
        assert theirs.status_code == missing.status_code == 404
        assert {k: v for k, v in theirs.json().items() if k != "request_id"} == \
            {k: v for k, v in missing.json().items() if k != "request_id"}
    assert [e["id"] for e in (await client.get("/api/v1/endpoints", headers=key7)).json()["items"]] == []


async def test_the_endpoint_list_pages_newest_first_and_never_shows_a_secret(client, key42):
    """Invariant (paging on every list): `?limit=&cursor=` walks every endpoint of the tenant once, newest first,
    `next_cursor` null on the last page; no page carries a secret; a bad cursor or limit is a 422 naming it."""
    made = [(await client.post("/api/v1/endpoints", json={"url": PUBLIC, "description": f"p{i}"},
                               headers=key42)).json()["id"] for i in range(5)]
    seen: list[int] = []
    cursor: str | None = None
    while True:
        r = await client.get("/api/v1/endpoints", params={"limit": 2, **({"cursor": cursor} if cursor else {})},
                             headers=key42)
        assert r.status_code == 200 and len(r.json()["items"]) <= 2
        assert "secret" not in r.text and "whsec_" not in r.text
        seen += [e["id"] for e in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) and set(made) <= set(seen)
    for bad in ({"cursor": "x"}, {"cursor": "0"}, {"limit": "0"}, {"limit": "501"}, {"cursor": str(2**63)}):
        r = await client.get("/api/v1/endpoints", params=bad, headers=key42)
        assert r.status_code == 422 and next(iter(bad)) in r.text, (bad, r.text)
