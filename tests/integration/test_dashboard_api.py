"""The HTTP API on real PostgreSQL and Redis, through the real ASGI app.

Invariants: every bad input gets a clear error and changes nothing; tenant and actor come only from the key;
another tenant's order is indistinguishable from a missing one.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import sqlalchemy as sa

from dashboard.api.app import build_api
from domain.db import get_engine


def writes() -> tuple[int, int, int]:
    with get_engine().connect() as c:
        return tuple(c.execute(sa.text(  # type: ignore[return-value]
            "SELECT (SELECT sum(revision) FROM orders), (SELECT count(*) FROM outbox_events), "
            "(SELECT count(*) FROM notifications)")).one())


def error(r: httpx.Response) -> dict[str, object]:
    """An error body without its request id (which must be there, and equal to the X-Request-Id header)."""
    body = r.json()
    assert body.pop("request_id") == r.headers["X-Request-Id"], "every error names its request"
    return body  # type: ignore[no-any-return]


async def test_approve_returns_revision_and_event(client, key42):
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "req-501"},
                          headers=key42)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["order_id"] == 913 and body["status"] == "approved" and body["revision"] == 18
    ev = await client.get(f"/api/v1/events/{body['event_id']}", headers=key42)
    assert ev.status_code == 200 and ev.json()["aggregate_revision"] == 18
    assert [n["channel"] for n in ev.json()["notifications"]] == ["webhook", "email"]


async def test_stale_revision_is_409_with_current_revision(client, key42):
    before = writes()
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 16, "request_id": "r"},
                          headers=key42)
    assert r.status_code == 409 and error(r) == {"error": "optimistic_conflict", "current_revision": 17}
    assert writes() == before


async def test_policy_denied_is_422(client, key42):
    await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "a"}, headers=key42)
    before = writes()
    r = await client.post("/api/v1/orders/913/cancel", json={"expected_revision": 18, "request_id": "b"},
                          headers=key42)
    assert r.status_code == 422 and r.json()["error"] == "policy_denied"
    assert writes() == before


async def test_missing_and_foreign_orders_are_both_404(client, key7, key42):
    before = writes()
    foreign = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "x"},
                                headers=key7)
    missing = await client.post("/api/v1/orders/999999/approve", json={"expected_revision": 1, "request_id": "x"},
                                headers=key7)
    assert foreign.status_code == missing.status_code == 404
    assert error(foreign) == error(missing) == {"error": "not_found"}
    assert (await client.get("/api/v1/orders/913", headers=key7)).status_code == 404
    ok = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "y"},
                           headers=key42)
    assert (await client.get(f"/api/v1/events/{ok.json()['event_id']}", headers=key7)).status_code == 404
    assert writes()[0] == before[0] + 1  # only tenant 42's own approval changed anything


async def test_no_or_bad_key_is_401(client):
    assert (await client.get("/api/v1/orders")).status_code == 401
    r = await client.get("/api/v1/orders", headers={"Authorization": "Bearer obx_nope"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


async def test_malformed_json_is_400_and_bad_fields_422(client, key42):
    before = writes()
    r = await client.post("/api/v1/orders/913/approve", content=b"{not json",
                          headers={**key42, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "malformed_json"
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": "x"}, headers=key42)
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    r = await client.post("/api/v1/orders/913/approve",
                          json={"expected_revision": 17, "request_id": "r", "tenant_id": 7}, headers=key42)
    assert r.status_code == 422, "a tenant in the body is refused, never trusted"
    assert writes() == before


async def test_oversized_payload_is_413(client, key42):
    before = writes()
    big = json.dumps({"expected_revision": 17, "request_id": "r" * 200_000})
    r = await client.post("/api/v1/orders/913/approve", content=big,
                          headers={**key42, "content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    assert writes() == before


async def test_create_list_and_get_orders(client, key42, key7):
    r = await client.post("/api/v1/orders", json={"customer_ref": "cust-002", "amount_cents": 4200,
                                                  "currency": "eur"}, headers=key42)
    assert r.status_code == 201 and r.json()["revision"] == 1
    oid = r.json()["order_id"]
    got = await client.get(f"/api/v1/orders/{oid}", headers=key42)
    assert got.json()["status"] == "authorized" and got.json()["currency"] == "EUR"
    listed = await client.get("/api/v1/orders?status=authorized&limit=500", headers=key42)
    assert oid in [o["id"] for o in listed.json()["items"]]
    other = await client.get("/api/v1/orders?limit=500", headers=key7)
    assert oid not in [o["id"] for o in other.json()["items"]]
    assert (await client.get("/api/v1/orders?limit=0", headers=key42)).status_code == 422


async def test_unknown_api_path_is_json_404_and_openapi_served(client):
    r = await client.get("/api/v1/nope")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    spec = (await client.get("/api/openapi.json")).json()
    assert "/api/v1/orders/{order_id}/approve" in spec["paths"]


async def test_healthz_reports_both_dependencies(client):
    r = await client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "postgres": True, "redis": True}


async def test_event_lookup_with_random_id_is_404(client, key42):
    assert (await client.get(f"/api/v1/events/{uuid.uuid4()}", headers=key42)).status_code == 404


async def test_metrics_expose_lane_gauges_from_the_database(client, key42):
    await client.post("/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "m"}, headers=key42)
    text = (await client.get("/metrics")).text
    assert 'outbox_lane_depth{lane="high"} 1.0' in text
    assert 'outbox_lane_depth{lane="normal"} 1.0' in text
    assert "outbox_lane_oldest_owed_seconds" in text and "outbox_refresh_publishes_total" in text


async def test_metrics_need_the_token_in_production_and_are_cached(db, redis_db, monkeypatch):
    """Fail closed: in production /metrics answers 401 without its bearer token; scrapes are served from a cache
    of a few seconds instead of running whole-table aggregates each time."""
    from dashboard.api import health
    from domain.settings import reload_settings

    for var, value in {"OUTBOX_ENV": "production", "OUTBOX_METRICS_TOKEN": "m-token",
                       "OUTBOX_WEBHOOK_SECRET": "whsec_cmVhbC1zZWNyZXQtZm9yLXRoZS10ZXN0LTAwMDE=",
                       "OUTBOX_RECEIPT_SECRET": "whsec_cmVhbC1zZWNyZXQtZm9yLXRoZS10ZXN0LTAwMDI=",
                       "OUTBOX_OTP_SECRET": "otp-test-secret", "OUTBOX_FAULT": "", "OUTBOX_DEV_MODE": "0"}.items():
        monkeypatch.setenv(var, value)
    reload_settings()
    health._cache = None
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_api()), base_url="http://app") as c:
            assert (await c.get("/metrics")).status_code == 401
            assert (await c.get("/metrics", headers={"Authorization": "Bearer wrong"})).status_code == 401
            ok = await c.get("/metrics", headers={"Authorization": "Bearer m-token"})
            assert ok.status_code == 200 and "outbox_lane_depth" in ok.text
            cached_at = health._cache[0] if health._cache else None
            await c.get("/metrics", headers={"Authorization": "Bearer m-token"})
            assert health._cache is not None and health._cache[0] == cached_at
    finally:
        monkeypatch.undo()
        reload_settings()
        health._cache = None


def test_the_cli_refuses_to_run_in_production_without_secrets_and_names_them(db):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.endswith("_SECRET")}
    env["OUTBOX_ENV"] = "production"
    r = subprocess.run([str(Path(sys.executable).parent / "outbox"), "status"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode != 0
    assert "OUTBOX_WEBHOOK_SECRET is not set" in r.stderr and "OUTBOX_METRICS_TOKEN is not set" in r.stderr


def test_login_locks_out_after_five_failures_per_login_and_refuses_huge_passwords(db):
    """Throttling: five wrong passwords lock that login (even the right password then waits); the lockout grows;
    another login from elsewhere is unaffected; a password over the cap is refused before any hashing."""
    from datetime import UTC, datetime, timedelta

    from domain.access.auth import LockedOut, Principal, login_operator

    now = datetime.now(UTC)
    for _ in range(5):
        assert login_operator("bob", "wrong", "10.0.0.1", now) is None
    locked = login_operator("bob", "outbox-demo", "10.0.0.2", now)
    assert isinstance(locked, LockedOut) and locked.until == now + timedelta(seconds=30)
    assert isinstance(login_operator("alice", "outbox-demo", "10.0.0.3", now), Principal)
    later = now + timedelta(seconds=31)
    assert login_operator("bob", "wrong", "10.0.0.1", later) is None  # sixth failure: locked twice as long
    again = login_operator("bob", "outbox-demo", "10.0.0.2", later)
    assert isinstance(again, LockedOut) and again.until == later + timedelta(seconds=60)
    assert isinstance(login_operator("bob", "outbox-demo", "10.0.0.2", later + timedelta(seconds=61)), Principal)
    assert login_operator("carol", "x" * 10_000, "10.0.0.4", now) is None


async def test_an_api_key_over_its_rate_gets_429_with_retry_after(db, redis_db, monkeypatch, key42, key7):
    """Per-key rate limit: a burst beyond the bucket is refused with 429 and Retry-After; another key is unaffected."""
    from domain.settings import reload_settings

    monkeypatch.setenv("OUTBOX_API_RATE", "2")  # bursts of 4
    reload_settings()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_api()), base_url="http://app") as c:
            # 20 at once: whatever the machine's load, far more than the bucket (4) and what refills meanwhile (2/s)
            # — one by one on a loaded machine, each took long enough to earn the next token back.
            got = await asyncio.gather(*(c.get("/api/v1/orders/913", headers=key42) for _ in range(20)))
            codes = [r.status_code for r in got]
            assert set(codes) == {200, 429} and 4 <= codes.count(200) < codes.count(429), codes
            refused = next(r for r in got if r.status_code == 429)
            assert int(refused.headers["Retry-After"]) >= 1
            assert refused.json()["error"] == "rate_limited"
            assert (await c.get("/api/v1/orders/700", headers=key7)).status_code == 200
    finally:
        monkeypatch.undo()
        reload_settings()


async def test_a_campaign_cancelled_through_the_api_leaves_one_audit_row_naming_the_key(client, key42):
    """Issue 27, item 2: a cancel cannot be undone, so whichever door it comes through it is audited once, with
    who did it — through the API, the key's actor; another tenant's campaign looks missing and changes nothing."""
    from domain.access import actions
    from domain.campaigns import fan_out

    cid = fan_out.create(tenant_id=42, name="api cancel", segment="all_reachable", template="offer",
                         channel="email", actor_ref="operator:alice", note="start")
    other = fan_out.create(tenant_id=7, name="not yours", segment="all_reachable", template="offer",
                           channel="email", actor_ref="operator:carol", note="start")
    r = await client.post(f"/api/v1/campaigns/{cid}/cancel", headers=key42)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    missing = await client.post(f"/api/v1/campaigns/{other}/cancel", headers=key42)
    assert missing.status_code == 404
    from domain.access.auth import principal_for_key

    key = principal_for_key(key42["Authorization"].removeprefix("Bearer "))
    assert key is not None
    done = [(a["action"], a["actor_ref"]) for a in actions.on_target(42, f"campaign {cid}")]
    assert done == [("campaign start", "operator:alice"), ("campaign cancel", key.actor_ref)]
    assert [a["action"] for a in actions.on_target(7, f"campaign {other}")] == ["campaign start"]
    assert actions.on_target(42, f"campaign {other}") == []


async def test_a_campaign_of_a_system_template_is_refused_and_creates_nothing(client, key42):
    """Issue 27, item 9: the campaigns page offered `order_update` (the order's own message) as a campaign template.
    The system's own templates (order updates, one-time codes) are refused for a campaign, in plain words, through
    every door (the page no longer offers them; the API and the domain refuse them), and no campaign is created."""
    with get_engine().connect() as c:
        before = c.execute(sa.text("SELECT count(*) FROM campaigns")).scalar_one()
    for template in ("order_update", "otp_code"):
        r = await client.post("/api/v1/campaigns", json={"name": "sneaky", "segment": "all_reachable",
                                                         "template": template, "channel": "email"}, headers=key42)
        assert r.status_code == 422 and r.json()["error"] == "not_a_campaign_template", r.text
        assert "sent by the system itself" in r.json()["detail"]
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM campaigns")).scalar_one() == before
