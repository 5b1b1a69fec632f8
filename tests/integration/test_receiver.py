"""The receiver's own tests (the mock outside world, standing alone: its own database, settings and signing).

Invariant 4: one effect per (event_id, effect_type), however many times and however concurrently an event is
delivered — by one server process or by several racing on the same event id; a reused event id with another body is
an identity conflict, never a second effect. Checked through its HTTP API (`/effects`, `/invariants`), as `outbox
check` does, and by its UNIQUE constraint on real PostgreSQL. The fault switches hold across processes: N shots of a
counted fault are N answers, whichever process takes them.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import httpx
import pytest
import sqlalchemy as sa

from jobs.ops.procs import wait_http, wait_until
from tests.conftest import PG_BASE, SLOT_SUFFIX

RECEIVER_DB = f"{PG_BASE}/outbox_receiver_selftest{SLOT_SUFFIX}"


class _Capture(BaseHTTPRequestHandler):
    """Stands in for our app: records every receipt the receiver posts."""

    seen: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        _Capture.seen.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def app_stub() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def receiver_app(app_stub):  # type: ignore[no-untyped-def]
    from receiver import db, settings

    env = {"RECEIVER_DATABASE_URL": RECEIVER_DB, "RECEIVER_APP_URL": app_stub, "RECEIVER_RECEIPT_DELAY": "0"}
    os.environ.update(env)
    settings.get_settings.cache_clear()
    db.migrate(reset=True)
    from receiver.app import app

    yield app
    for k in env:
        os.environ.pop(k, None)
    settings.get_settings.cache_clear()


def _signed(body: dict[str, object]) -> tuple[str, dict[str, str]]:
    from receiver.settings import get_settings
    from receiver.signing import signed_headers

    raw = json.dumps(body)
    eid = str(body["event_id"])
    return raw, {**signed_headers(get_settings().webhook_secret, eid, raw), "Idempotency-Key": eid}


async def _post_many(app, raw: str, headers: dict[str, str], n: int) -> list[httpx.Response]:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://receiver") as c:
        return await asyncio.gather(*(c.post("/webhooks/orders", content=raw, headers=headers) for _ in range(n)))


def test_twenty_concurrent_deliveries_apply_one_effect(receiver_app):
    body = {"event_id": str(uuid.uuid4()), "schema_version": 1, "event_type": "order.approved"}
    raw, headers = _signed(body)
    answers = asyncio.run(_post_many(receiver_app, raw, headers, 20))
    statuses = sorted(r.json()["status"] for r in answers)
    assert [r.status_code for r in answers] == [200] * 20
    assert statuses.count("accepted") == 1 and statuses.count("already_processed") == 19
    assert len({r.json()["result_ref"] for r in answers}) == 1, "every answer names the one effect"
    fx = asyncio.run(_get(receiver_app, f"/effects/{body['event_id']}"))
    assert fx["effects"] == 1 and fx["deliveries"] == 20
    assert all(v == 0 for v in asyncio.run(_get(receiver_app, "/invariants")).values())


def test_a_burst_of_many_events_with_duplicates_applies_each_once(receiver_app):
    """Invariant 4 under the grouped write (receiver/batch.py puts a process's concurrent POSTs in one statement):
    30 events each posted 3 times at once (duplicates in the same burst, never twice in one statement) — one
    effect per event, one `accepted` and two `already_processed` naming it, every call counted."""
    bodies = [{"event_id": str(uuid.uuid4()), "schema_version": 1, "event_type": "order.approved"} for _ in range(30)]
    signed = [_signed(b) for b in bodies]

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver_app), base_url="http://r") as c:
            return await asyncio.gather(*(c.post("/webhooks/orders", content=raw, headers=h)
                                          for raw, h in signed for _ in range(3)))

    answers = asyncio.run(burst())
    assert [r.status_code for r in answers] == [200] * 90, [r.text for r in answers if r.status_code != 200]
    for i, body in enumerate(bodies):
        mine = [r.json() for r in answers[3 * i:3 * i + 3]]
        assert sorted(a["status"] for a in mine) == ["accepted", "already_processed", "already_processed"]
        assert {a["event_id"] for a in mine} == {body["event_id"]} and len({a["result_ref"] for a in mine}) == 1
        fx = asyncio.run(_get(receiver_app, f"/effects/{body['event_id']}"))
        assert fx["effects"] == 1 and fx["deliveries"] == 3 and fx["result_refs"] == [mine[0]["result_ref"]]
    assert all(v == 0 for v in asyncio.run(_get(receiver_app, "/invariants")).values())


async def _get(app, path: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://receiver") as c:
        return (await c.get(path)).json()  # type: ignore[no-any-return]


def test_same_event_id_with_another_body_is_an_identity_conflict(receiver_app):
    eid = str(uuid.uuid4())
    first, h1 = _signed({"event_id": eid, "schema_version": 1, "payload": {"status": "approved"}})
    other, h2 = _signed({"event_id": eid, "schema_version": 1, "payload": {"status": "cancelled"}})
    (a,) = asyncio.run(_post_many(receiver_app, first, h1, 1))
    (b,) = asyncio.run(_post_many(receiver_app, other, h2, 1))
    assert a.status_code == 200 and a.json()["status"] == "accepted"
    assert b.status_code == 409 and b.json()["error"] == "identity_conflict"
    assert asyncio.run(_get(receiver_app, f"/effects/{eid}"))["effects"] == 1


def test_bad_signature_applies_nothing(receiver_app):
    eid = str(uuid.uuid4())
    raw, headers = _signed({"event_id": eid, "schema_version": 1})
    headers["webhook-signature"] = "v1,AAAA"
    (r,) = asyncio.run(_post_many(receiver_app, raw, headers, 1))
    assert r.status_code == 401
    assert asyncio.run(_get(receiver_app, f"/effects/{eid}"))["effects"] == 0


def test_the_database_itself_refuses_a_second_effect(receiver_app):
    from receiver import db

    eid = uuid.uuid4()
    row = {"event_id": eid, "effect_type": "customer_webhook", "request_digest": "d", "result_ref": "fx-1"}
    with db.engine().begin() as c:
        c.execute(db.webhook_effects.insert().values(**row))
    with pytest.raises(sa.exc.IntegrityError, match="webhook_effects_once"), db.engine().begin() as c:
        c.execute(db.webhook_effects.insert().values(**{**row, "result_ref": "fx-2"}))


def test_invariant_query_counts_a_duplicate_effect(receiver_app):
    """`/invariants` must fail when the invariant is broken: drop the constraint, insert a twin, count it."""
    from receiver import db

    eid = uuid.uuid4()
    row = {"event_id": eid, "effect_type": "customer_webhook", "request_digest": "d", "result_ref": "fx-1"}
    with db.engine().begin() as c:
        c.execute(sa.text("ALTER TABLE webhook_effects DROP CONSTRAINT webhook_effects_once"))
        c.execute(db.webhook_effects.insert().values(**row))
        c.execute(db.webhook_effects.insert().values(**row))
    try:
        assert asyncio.run(_get(receiver_app, "/invariants")) == {"4 two effects for one (event_id, effect_type)": 1}
    finally:
        with db.engine().begin() as c:
            c.execute(db.webhook_effects.delete().where(db.webhook_effects.c.event_id == eid))
            c.execute(sa.text("ALTER TABLE webhook_effects ADD CONSTRAINT webhook_effects_once "
                              "UNIQUE (event_id, effect_type)"))


def test_provider_messages_are_idempotent_by_key_and_receipts_go_only_to_the_configured_app(receiver_app):
    msg = {"to": "a@example.test", "template": "t", "idempotency_key": f"k-{uuid.uuid4().hex}",
           "callback_url": "http://attacker.example/steal"}

    async def twice() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver_app), base_url="http://r") as c:
            return [await c.post("/providers/email/messages", json=msg) for _ in range(2)]

    first, again = asyncio.run(twice())
    assert first.status_code == 201 and again.status_code == 200
    ref = first.json()["reference"]
    assert again.json()["reference"] == ref
    receipts = [(path, json.loads(body)) for path, body in _Capture.seen if ref.encode() in body]
    assert [path for path, _ in receipts] == ["/api/v1/receipts/email"], "one receipt, to the configured app only"
    assert receipts[0][1]["client_reference"] == msg["idempotency_key"]


def test_fault_switches_do_not_exist_unless_asked_for(receiver_app):
    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver_app), base_url="http://r") as c:
            return await c.post("/faults", json={"fail_503": 3})

    assert asyncio.run(post()).status_code == 404  # RECEIVER_FAULTS is off by default


@pytest.fixture(scope="module")
def served(receiver_app, tmp_path_factory):  # type: ignore[no-untyped-def]
    """`python -m receiver serve --workers 3` on its own port and the same database, with the switch board on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(tmp_path_factory.mktemp("receiver") / "served.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "receiver", "serve", "--port", str(port), "--workers", "3"],
                            env={**os.environ, "RECEIVER_FAULTS": "1"}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", 60)
        yield url
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def _pids_serving(url: str) -> set[int]:
    """Which server processes answer: a new connection each time, so the kernel hands them to any of them."""
    seen: set[int] = set()

    def several() -> bool:
        seen.update(httpx.get(f"{url}/healthz").json()["pid"] for _ in range(10))
        return len(seen) >= 2

    wait_until(several, 20, "two server processes to answer")
    return seen


async def _post_spread(url: str, raw: str, headers: dict[str, str], n: int) -> list[httpx.Response]:
    """n POSTs at once, each on its own connection (so they land on different processes)."""
    async def one() -> httpx.Response:
        async with httpx.AsyncClient(timeout=30) as c:
            return await c.post(f"{url}/webhooks/orders", content=raw, headers=headers)

    return await asyncio.gather(*(one() for _ in range(n)))


def test_processes_racing_on_one_event_id_apply_one_effect(served):
    """Invariant 4 with N server processes: 40 concurrent duplicates, one effect, 39 `already_processed` naming it."""
    assert len(_pids_serving(served)) >= 2
    for _ in range(3):
        body = {"event_id": str(uuid.uuid4()), "schema_version": 1, "event_type": "order.approved"}
        raw, headers = _signed(body)
        answers = asyncio.run(_post_spread(served, raw, headers, 40))
        assert [r.status_code for r in answers] == [200] * 40, [r.text for r in answers if r.status_code != 200]
        statuses = [r.json()["status"] for r in answers]
        assert statuses.count("accepted") == 1 and statuses.count("already_processed") == 39
        assert len({r.json()["result_ref"] for r in answers}) == 1, "every answer names the one effect"
        fx = httpx.get(f"{served}/effects/{body['event_id']}").json()
        assert fx["effects"] == 1 and fx["deliveries"] == 40
    assert all(v == 0 for v in httpx.get(f"{served}/invariants").json().values())


def test_a_counted_fault_is_taken_once_across_processes(served):
    """`fail_503: 5` set through one process is 5 answers of 503 in all, whichever processes serve the 30 calls;
    cleared (`{}`), no process fails another call."""
    assert len(_pids_serving(served)) >= 2
    assert httpx.post(f"{served}/faults", json={"fail_503": 5}).status_code == 200
    bodies = [_signed({"event_id": str(uuid.uuid4()), "schema_version": 1}) for _ in range(30)]

    async def all_at_once() -> list[httpx.Response]:
        return [r for rs in await asyncio.gather(*(_post_spread(served, raw, h, 1) for raw, h in bodies)) for r in rs]

    codes = sorted(r.status_code for r in asyncio.run(all_at_once()))
    assert codes == [200] * 25 + [503] * 5
    assert httpx.post(f"{served}/faults", json={"fail_422": 1000}).status_code == 200
    assert httpx.post(f"{served}/faults", json={}).status_code == 200
    raw, h = _signed({"event_id": str(uuid.uuid4()), "schema_version": 1})
    assert [r.status_code for r in asyncio.run(_post_spread(served, raw, h, 10))] == [200] * 10


def assert_receiver_security_headers(r: httpx.Response, page: bool = False) -> None:
    """What the dashboard's `guard.RequestContext` sets, the receiver sets too (its own code: it imports none of
    ours): nosniff, no referrer, never framed; JSON loads nothing and is never stored by a cache."""
    what = f"{r.request.method} {r.request.url.path} -> {r.status_code}"
    assert r.headers.get("x-content-type-options") == "nosniff", what
    assert r.headers.get("referrer-policy") == "no-referrer", what
    assert r.headers.get("x-frame-options") == "DENY", what
    csp = "frame-ancestors 'none'" if page else "default-src 'none'; frame-ancestors 'none'"
    assert r.headers.get("content-security-policy") == csp, what
    if not page:
        assert r.headers.get("cache-control") == "no-store", what


def test_every_answer_and_a_cors_preflight_carry_the_security_headers(served):
    """Invariant: every answer of the receiver over real HTTP — success, refusal, a switched fault, an unknown path,
    a CORS preflight (which grants no origin: nobody's browser talks to the outside world's API) — carries the
    security headers; its docs page may load its scripts but is never framed (issue 25 item 6: there were none)."""
    raw, h = _signed({"event_id": str(uuid.uuid4()), "schema_version": 1, "event_type": "order.approved"})
    with httpx.Client(base_url=served, timeout=30) as c:
        answers = [c.get("/healthz"), c.post("/webhooks/orders", content=raw, headers=h),
                   c.post("/webhooks/orders", content=raw, headers={**h, "webhook-signature": "v1,bm9wZQ=="}),
                   c.get(f"/effects/{uuid.uuid4()}"), c.get("/invariants"), c.get("/nope"),
                   c.post("/providers/sms/messages", json={}), c.get("/openapi.json")]
        preflight = c.options("/webhooks/orders", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert c.post("/faults", json={"fail_503": 1}).status_code == 200
        answers += [c.post("/webhooks/orders", content=raw, headers=h), preflight]
        assert c.post("/faults", json={}).status_code == 200
        docs = c.get("/docs")
    assert {r.status_code for r in answers} >= {200, 401, 404, 405, 422, 503}, [r.status_code for r in answers]
    for r in answers:
        assert_receiver_security_headers(r)
    assert "access-control-allow-origin" not in preflight.headers
    assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]
    assert_receiver_security_headers(docs, page=True)


async def _call(app, method: str, path: str, **kw: object) -> httpx.Response:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r") as c:
        return await c.request(method, path, **kw)  # type: ignore[arg-type]


ENDPOINT_SECRET = "whsec_" + "ZW5kcG9pbnQtc2VjcmV0LWZvci10aGUtbW9jay0wMQ=="


def _signed_with(secret: str, body: dict[str, object]) -> tuple[str, dict[str, str]]:
    from receiver.signing import signed_headers

    raw = json.dumps(body)
    eid = str(body["event_id"])
    return raw, {**signed_headers(secret, eid, raw), "Idempotency-Key": eid}


def test_the_endpoint_secrets_api_does_not_exist_unless_asked_for(receiver_app):
    """Invariant: without RECEIVER_SECRETS_API (production's default) nobody can tell the receiver a secret: 404,
    nothing stored, and a webhook signed with an unregistered secret is refused (401, no effect)."""
    put = asyncio.run(_call(receiver_app, "PUT", "/endpoint-secrets/t42-endpoint-1", json={"secret": ENDPOINT_SECRET}))
    assert put.status_code == 404
    eid = str(uuid.uuid4())
    raw, headers = _signed_with(ENDPOINT_SECRET, {"event_id": eid, "schema_version": 1})
    r = asyncio.run(_call(receiver_app, "POST", "/webhooks/orders", content=raw, headers=headers))
    assert r.status_code == 401 and r.json() == {"error": "bad_signature"}
    assert asyncio.run(_get(receiver_app, f"/effects/{eid}"))["effects"] == 0


def test_a_registered_endpoint_secret_verifies_and_is_never_answered_back(receiver_app, monkeypatch):
    """Invariant: with the secrets API on, a registered endpoint secret verifies a webhook signed with it (one
    effect) while the system-wide secret still does; a malformed secret is refused (422) and stores nothing; the
    answer names the endpoint, never the secret; a forgotten secret verifies nothing again."""
    from receiver import settings

    monkeypatch.setenv("RECEIVER_SECRETS_API", "1")
    settings.get_settings.cache_clear()
    try:
        bad = asyncio.run(_call(receiver_app, "PUT", "/endpoint-secrets/t42-endpoint-2", json={"secret": "nope"}))
        assert bad.status_code == 422
        put = asyncio.run(_call(receiver_app, "PUT", "/endpoint-secrets/t42-endpoint-2",
                                json={"secret": ENDPOINT_SECRET}))
        assert put.status_code == 200 and ENDPOINT_SECRET not in put.text and put.json()["name"] == "t42-endpoint-2"
        eid = str(uuid.uuid4())
        raw, headers = _signed_with(ENDPOINT_SECRET, {"event_id": eid, "schema_version": 1})
        r = asyncio.run(_call(receiver_app, "POST", "/webhooks/orders", content=raw, headers=headers))
        assert r.status_code == 200 and r.json()["status"] == "accepted"
        assert asyncio.run(_get(receiver_app, f"/effects/{eid}"))["effects"] == 1
        own = str(uuid.uuid4())
        raw, headers = _signed({"event_id": own, "schema_version": 1})
        assert asyncio.run(_call(receiver_app, "POST", "/webhooks/orders", content=raw, headers=headers)
                           ).status_code == 200, "the system-wide secret still verifies"
        gone = asyncio.run(_call(receiver_app, "DELETE", "/endpoint-secrets/t42-endpoint-2"))
        assert gone.status_code == 204
        again = str(uuid.uuid4())
        raw, headers = _signed_with(ENDPOINT_SECRET, {"event_id": again, "schema_version": 1})
        assert asyncio.run(_call(receiver_app, "POST", "/webhooks/orders", content=raw, headers=headers)
                           ).status_code == 401
    finally:
        monkeypatch.delenv("RECEIVER_SECRETS_API")
        settings.get_settings.cache_clear()
