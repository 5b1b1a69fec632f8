"""The layers in front of every route (dashboard/api/guard.py), on real PostgreSQL and Redis.

Invariants: every error — 400, 401, 404, 405, 413, 422, 429 and a 500 — is JSON carrying the request id that is
also the X-Request-Id header, and a 405 names the allowed methods; every 401 names the scheme its door takes in
WWW-Authenticate (RFC 9110 11.6.1), and no 401 is built anywhere but `errors.unauthorized`; every response (API and
pages) carries nosniff, a Referrer-Policy and a CSP with frame-ancestors; the API key is checked from the headers
before the body is read; unknown keys are throttled per client address before any database lookup; the login failure
counter of an address is a window that decays, and a success from that address does not reset it.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from dashboard.api.app import build_api
from domain.db import get_engine


def assert_error(r: httpx.Response, status: int, error: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["request_id"] == r.headers["X-Request-Id"] and len(body["request_id"]) >= 8
    if error is not None:
        assert body["error"] == error, body
    return body


def assert_security_headers(r: httpx.Response, csp: str) -> None:
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    assert r.headers["Content-Security-Policy"] == csp
    assert "frame-ancestors 'none'" in csp


async def test_every_error_is_json_with_the_request_id_and_405_names_the_allowed_methods(client, key42):
    """Invariant: each error status the API can answer is a JSON body with `error` and `request_id` (equal to the
    X-Request-Id header); an undeclared method is a JSON 405 whose Allow lists every method of that path."""
    assert_error(await client.post("/api/v1/orders/913/approve", content=b"{nope",
                                   headers={**key42, "content-type": "application/json"}), 400, "malformed_json")
    assert_error(await client.get("/api/v1/orders"), 401, "unauthorized")
    assert_error(await client.get("/api/v1/orders/999999", headers=key42), 404, "not_found")
    assert_error(await client.get("/api/v1/nope"), 404, "not_found")
    for method in ("OPTIONS", "TRACE"):  # a path no route has is a 404 whatever the method (no made-up Allow)
        assert_error(await client.request(method, "/api/v1/nope"), 404, "not_found")
    r = await client.request("OPTIONS", "/api/v1/orders", headers=key42)
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "GET, POST"
    r = await client.request("TRACE", "/api/v1/orders", headers=key42)
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "GET, POST"
    r = await client.get("/api/v1/orders/913/approve", headers=key42)  # a POST-only path asked with GET
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "POST"
    r = await client.request("DELETE", "/api/v1/recipients/1", headers=key42)
    assert_error(r, 405)
    assert r.headers["Allow"] == "GET, PATCH"
    assert_error(await client.post("/api/v1/orders/913/approve", content=b"{" + b" " * 70_000 + b"}",
                                   headers={**key42, "content-type": "application/json"}), 413, "payload_too_large")
    body = assert_error(await client.post("/api/v1/orders/913/approve", json={"expected_revision": "x"},
                                          headers=key42), 422, "invalid_request")
    assert body["field"] == "expected_revision"
    incoming = await client.get("/api/v1/orders/1", headers={**key42, "X-Request-Id": "proxy-id-1234"})
    assert incoming.headers["X-Request-Id"] == "proxy-id-1234", "a harmless proxy id is kept for correlation"
    forged = await client.get("/api/v1/orders/1", headers={**key42, "X-Request-Id": "x\ny<script>"})
    assert forged.headers["X-Request-Id"] != "x\ny<script>"


def assert_challenge(r: httpx.Response, challenge: str, error: str = "unauthorized") -> None:
    assert_error(r, 401, error)
    assert r.headers.get_list("WWW-Authenticate") == [challenge], (r.request.url.path, r.headers)


async def test_every_401_names_the_scheme_it_takes(client, monkeypatch):
    """Invariant: each way the API answers 401 carries a WWW-Authenticate challenge naming the scheme that door
    takes — an API key (the gate, and the route dependency a request reaches without the gate), the dashboard's
    login ticket, a receipt's Standard Webhooks signature, the metrics token in production — with
    error="invalid_token" where a bearer token was sent and refused (RFC 6750); and no module builds a 401 itself
    (it would carry no challenge)."""
    from fastapi import FastAPI

    from dashboard.api import errors, health, orders
    from domain.delivery.signing import signed_headers
    from domain.settings import get_settings, reload_settings

    # The API key, checked by the gate before the body is read.
    assert_challenge(await client.get("/api/v1/orders"), errors.API_KEY)
    assert_challenge(await client.get("/api/v1/orders", headers={"Authorization": "Basic YTpi"}), errors.API_KEY)
    assert_challenge(await client.post("/api/v1/orders/913/approve", json={},
                                       headers={"Authorization": "Bearer obx_not-a-key"}), errors.API_KEY_REFUSED)
    # The same key, checked by the route's own dependency (a route reached without the gate).
    bare = FastAPI()
    errors.install(bare)
    bare.include_router(orders.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=bare), base_url="http://app") as c:
        r = await c.get("/api/v1/orders")
        assert r.status_code == 401 and r.headers.get_list("WWW-Authenticate") == [errors.API_KEY], r.headers
        r = await c.get("/api/v1/orders", headers={"Authorization": "Bearer obx_unknown"})
        assert r.headers.get_list("WWW-Authenticate") == [errors.API_KEY_REFUSED], r.headers
    # The dashboard's login ticket.
    assert_challenge(await client.post("/api/session", json={"ticket": "x" * 43}), errors.LOGIN_TICKET)
    # A provider's receipt: a wrong signature, and a right one whose webhook-id is not the body's receipt id.
    body = '{"receipt_id": "rcpt-x", "provider_reference": "email-x", "outcome": "failed"}'
    forged = signed_headers("whsec_" + "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", "rcpt-x", body)
    assert_challenge(await client.post("/api/v1/receipts/email", content=body, headers=forged),
                     errors.RECEIPT_SIGNATURE, "bad_signature")
    swapped = signed_headers(get_settings().receipt_secret, "rcpt-other", body)
    assert_challenge(await client.post("/api/v1/receipts/email", content=body, headers=swapped),
                     errors.RECEIPT_SIGNATURE, "bad_signature")
    # /metrics in production, without and with a wrong token.
    for var, value in {"OUTBOX_ENV": "production", "OUTBOX_METRICS_TOKEN": "m-token",
                       "OUTBOX_WEBHOOK_SECRET": "whsec_cmVhbC1zZWNyZXQtZm9yLXRoZS10ZXN0LTAwMDE=",
                       "OUTBOX_RECEIPT_SECRET": "whsec_cmVhbC1zZWNyZXQtZm9yLXRoZS10ZXN0LTAwMDI=",
                       "OUTBOX_OTP_SECRET": "otp-test-secret", "OUTBOX_FAULT": "", "OUTBOX_DEV_MODE": "0"}.items():
        monkeypatch.setenv(var, value)
    reload_settings()
    try:
        assert_challenge(await client.get("/metrics"), errors.METRICS_TOKEN)
        assert_challenge(await client.get("/metrics", headers={"Authorization": "Bearer wrong"}),
                         errors.METRICS_TOKEN_REFUSED)
    finally:
        monkeypatch.undo()
        reload_settings()
        health._cache = None
    # Nothing else builds a 401: a new door must go through errors.unauthorized() and name its scheme.
    root = Path(errors.__file__).resolve().parent.parent
    own_401 = re.compile(r"status_code\s*=\s*401|(?:ApiError|HTTPException)\(\s*401")
    builders = {str(f.relative_to(root)) for f in root.rglob("*.py") if own_401.search(f.read_text())}
    assert builders == {"api/errors.py"}, f"a 401 built outside errors.unauthorized(): {builders}"
    with pytest.raises(TypeError):
        errors.ApiError(401, "unauthorized")


async def test_an_unexpected_exception_is_a_json_500_with_the_request_id_logged(client, key42, monkeypatch, caplog):
    """Invariant: a bug answers JSON 500 with the request id (header and body) and the security headers; the
    traceback goes to the log under that id, never to the caller."""
    from domain.orders import views as order_views

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug in a read model")

    monkeypatch.setattr(order_views, "get_order", broken)
    with caplog.at_level(logging.ERROR, logger="outbox.api"):
        r = await client.get("/api/v1/orders/913", headers=key42)
    body = assert_error(r, 500, "internal_error")
    assert "bug" not in r.text and "Traceback" not in r.text
    assert_security_headers(r, "default-src 'none'; frame-ancestors 'none'")
    assert any(body["request_id"] in rec.getMessage() and rec.exc_info for rec in caplog.records)


async def test_every_response_carries_the_security_headers_api_and_pages(db, redis_db, key42):
    """Invariant: JSON answers forbid loading anything and being framed; pages (the Reflex app is mounted inside
    the API app exactly like this, `api_transformer`) and the API docs may load their own scripts but can never be
    framed; every answer says nosniff and no-referrer; no JSON answer is stored by a cache."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    async def page(_: Any) -> HTMLResponse:
        return HTMLResponse("<html>orders</html>")

    api = build_api()
    api.mount("", Starlette(routes=[Route("/orders", page)]))  # what reflex.App does with api_transformer
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://app") as c:
        json_csp = "default-src 'none'; frame-ancestors 'none'"
        for r in (await c.get("/api/v1/orders", headers=key42), await c.get("/api/v1/orders"),
                  await c.get("/healthz"), await c.get("/metrics"), await c.get("/api/openapi.json")):
            assert_security_headers(r, json_csp)
            assert r.headers["X-Request-Id"]
            assert r.headers["Cache-Control"] == "no-store", r.request.url.path
        for r in (await c.get("/orders"), await c.get("/api/docs")):
            assert r.status_code == 200
            assert_security_headers(r, "frame-ancestors 'none'")
        assert (await c.get("/orders")).headers["X-Frame-Options"] == "DENY"


async def test_the_key_is_checked_before_the_body_is_read(db, redis_db):
    """Invariant: a request with no or an unknown key is refused from its headers alone — its body is never read,
    so neither its size, its JSON nor its content reaches any parser."""
    app = build_api()

    async def call(headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, Any]]:
        out: dict[str, Any] = {}

        async def receive() -> dict[str, Any]:
            raise AssertionError("the body was read before the key was checked")

        async def send(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                out["status"] = msg["status"]
            elif msg["type"] == "http.response.body":
                out["body"] = out.get("body", b"") + msg.get("body", b"")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/api/v1/orders/913/approve", "raw_path": b"/api/v1/orders/913/approve",
                 "query_string": b"", "root_path": "", "client": ("10.7.7.7", 1), "server": ("app", 80),
                 "headers": [(b"content-type", b"application/json"), (b"content-length", b"999999"), *headers]}
        await app(scope, receive, send)
        return out["status"], json.loads(out["body"])

    for headers in ([], [(b"authorization", b"Bearer obx_not-a-key")], [(b"authorization", b"Basic x")]):
        status, body = await call(headers)
        assert status == 401 and body["error"] == "unauthorized", body


async def test_unknown_keys_are_throttled_per_client_address_before_any_lookup(db, redis_db, key42, monkeypatch):
    """Invariant: each client address gets a burst of unknown keys (each one a database lookup); beyond it a 429
    with Retry-After and no lookup at all; another address is unaffected and a valid key from it still works."""
    from dashboard.api import deps

    lookups: list[str] = []
    real = deps.principal_for_key

    def counting(key: str, *a: Any) -> Any:
        lookups.append(key)
        return real(key, *a)

    monkeypatch.setattr(deps, "principal_for_key", counting)
    app = build_api()

    def at(addr: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(addr, 4321)), base_url="http://app")

    async with at("10.66.0.1") as attacker, at("10.66.0.2") as other:
        burst = int(deps.UNKNOWN_KEY_BURST)
        for i in range(burst):
            assert_error(await attacker.get("/api/v1/orders", headers={"Authorization": f"Bearer obx_guess{i}"}),
                         401, "unauthorized")
        assert len(lookups) == burst
        refused = await attacker.get("/api/v1/orders", headers={"Authorization": "Bearer obx_guess-more"})
        assert_error(refused, 429, "rate_limited")
        assert int(refused.headers["Retry-After"]) >= 1
        assert len(lookups) == burst, "a throttled address costs no database lookup"
        ok = await other.get("/api/v1/orders", headers=key42)
        assert ok.status_code == 200, "another address is not affected"
        # Behind one proxy the attacker and a real client share an address: a key in use keeps working.
        assert (await attacker.get("/api/v1/orders", headers=key42)).status_code == 200, \
            "a key this process knows is not refused because its address is over the unknown-key budget"
        assert_error(await other.get("/api/v1/orders", headers={"Authorization": "Bearer obx_typo"}), 401)


def throttle(key: str) -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT coalesce(max(failures), 0) FROM login_throttle WHERE key = :k"),
                             {"k": key}).scalar_one())


def test_the_address_failure_counter_is_a_window_that_decays_and_a_success_does_not_reset(db):
    """Invariant: after CLIENT_LIMIT failures from one address every login from it waits (lockout); a correct
    password from that address once the lockout ends resets only its own login, not the address (the next failure
    locks the address again); and the address's failures decay with time — a window, not a life sentence (it used
    to lock an address, e.g. a reverse proxy, forever after 20 failures ever)."""
    from domain.access.auth import CLIENT_LIMIT, FAILURE_WINDOW, LockedOut, Principal, login_operator

    addr, t0 = "10.44.0.1", datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for i in range(CLIENT_LIMIT):
        assert login_operator(f"ghost{i}", "wrong", addr, t0) is None  # distinct logins: only the address counts
    assert isinstance(login_operator("alice", "outbox-demo", addr, t0 + timedelta(seconds=1)), LockedOut)
    assert isinstance(login_operator("alice", "outbox-demo", "10.44.0.2", t0), Principal), "other addresses pass"
    after_lock = t0 + timedelta(seconds=31)
    assert isinstance(login_operator("alice", "outbox-demo", addr, after_lock), Principal)
    assert throttle(f"client:{addr}") == CLIENT_LIMIT, "alice's success did not reset the address"
    assert login_operator("ghost-x", "wrong", addr, after_lock) is None
    assert isinstance(login_operator("bob", "outbox-demo", addr, after_lock + timedelta(seconds=1)), LockedOut)
    half = t0 + FAILURE_WINDOW / 2 + timedelta(minutes=2)  # lockouts over; about half the failures forgiven
    assert login_operator("ghost-y", "wrong", addr, half) is None
    assert 0 < throttle(f"client:{addr}") < CLIENT_LIMIT, "the counter decays with time"
    assert isinstance(login_operator("bob", "outbox-demo", addr, half), Principal)
    later = half + FAILURE_WINDOW
    assert login_operator("ghost-z", "wrong", addr, later) is None
    assert throttle(f"client:{addr}") == 1, "a whole window later only the new failure counts"


@pytest.mark.parametrize("limit", [5, 20])
def test_the_leak_spreads_one_limit_over_the_window(limit):
    """Invariant: a counter with limit N forgives one failure every WINDOW/N, so N failures are gone one window
    later."""
    from domain.access.auth import FAILURE_WINDOW, leak_seconds

    assert leak_seconds(limit) * limit == FAILURE_WINDOW.total_seconds()
