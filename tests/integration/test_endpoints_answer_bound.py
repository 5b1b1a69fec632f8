"""A tenant's webhook endpoint that answers without end, on real PostgreSQL and a real socket.

Invariant: what a tenant's endpoint answers is read up to a bound, never whole: an endpoint streaming an endless
body cannot hold a shared worker for its whole attempt deadline nor fill its memory — the send ends as soon as the
status and the first bytes are in, with the status as the outcome.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from domain.delivery import long_way, plan
from domain.endpoints import store, urls
from domain.settings import get_settings
from jobs import attempt, dns
from tests.conftest import PORT_OFFSET
from tests.integration.conftest import rows
from tests.support.endpoints import endpoint
from tests.support.orders import approve, orders_of

ENDLESS_PORT = 8089 + PORT_OFFSET


class Endless:
    """Answers 200 and then streams bytes until the client goes away; counts what it managed to send."""

    def __init__(self) -> None:
        self.sent = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                chunk = b'{"status": "ok", "pad": "' + b"x" * 65536
                try:
                    while owner.sent < 2_000_000_000:
                        self.wfile.write(chunk)
                        owner.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", ENDLESS_PORT), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def endless(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_ENDPOINT_ALLOWLIST", f"127.0.0.1:{ENDLESS_PORT}")
    get_settings.cache_clear()
    e = Endless()
    yield e
    e.server.shutdown()
    e.server.server_close()
    get_settings.cache_clear()


def claimed_send(e: dict[str, Any], tenant_id: int = 42) -> tuple[Any, Any]:
    """An approval's row for endpoint `e` (of `tenant_id`), claimed (Ready), and what the worker would send it with."""
    r = approve() if tenant_id == 42 else approve(order_id=orders_of(tenant_id)[0], tenant_id=tenant_id)
    (row,) = rows("event_id = :e AND endpoint_id = :i", e=r.event_id, i=e["id"])
    got = long_way.claim(row.id, 30, datetime.now(UTC))
    assert isinstance(got, plan.Ready), got
    target = store.send_target(tenant_id, e["id"])
    assert target is not None
    return got, target


class Hanging:
    """A resolver that never answers until released, counting the lookups that reached it."""

    def __init__(self) -> None:
        self.release, self.entered, self._lock = threading.Event(), 0, threading.Lock()

    def __call__(self, host: str, port: int) -> list[str]:
        with self._lock:
            self.entered += 1
        self.release.wait(60)
        return ["93.184.216.34"]

    async def reached(self, n: int, deadline_s: float = 10.0) -> None:
        """Wait (with a deadline, not a fixed sleep) until `n` lookups are hanging in the resolver."""
        async with asyncio.timeout(deadline_s):
            while self.entered < n:
                await asyncio.sleep(0.01)


def test_an_endless_answer_is_read_up_to_a_bound(db, redis_db, endless):  # type: ignore[no-untyped-def]
    """Invariant: the send returns with the endpoint's status long before its deadline, having read a bounded
    prefix of the answer (the server could push far more)."""
    got, target = claimed_send(endpoint(42, f"http://127.0.0.1:{ENDLESS_PORT}/hook"))

    async def once() -> Any:
        async with httpx.AsyncClient(timeout=30) as http:
            return await asyncio.wait_for(attempt._post_endpoint({"http": http}, got.claim, target), 10)

    outcome, _ = asyncio.run(once())
    assert outcome.status_code == 200
    assert endless.sent < 64 * 1024 * 1024, f"read {endless.sent} bytes of an endless answer"
    assert outcome.excerpt is not None and len(outcome.excerpt) <= 200


def test_a_hanging_dns_lookup_neither_outlives_its_deadline_nor_starves_the_database_threads(  # type: ignore[no-untyped-def]
        db, redis_db, monkeypatch):
    """Invariant: a tenant endpoint's name that never resolves ends its send as a connection failure (retried,
    nothing sent) within the DNS deadline, and while many such lookups hang, the worker's other work — every
    database call goes through the default executor — still gets a thread at once."""
    got, target = claimed_send(endpoint(42, "https://hangs.example/hook"))
    hanging = Hanging()
    check = urls.addresses_for_send
    monkeypatch.setattr(urls, "addresses_for_send", lambda url, allow: check(url, allow, resolve=hanging))
    monkeypatch.setattr(dns, "DNS_DEADLINE_S", 1.0, raising=False)

    async def many() -> tuple[list[Any], float]:
        async with httpx.AsyncClient(timeout=30) as http:
            sends = [asyncio.create_task(attempt._post_endpoint({"http": http}, got.claim, target)) for _ in range(12)]
            await hanging.reached(2)  # the tenant's share of the DNS threads is hanging
            t0 = asyncio.get_running_loop().time()
            await asyncio.wait_for(asyncio.to_thread(lambda: None), 2)  # a database call's thread hop
            hop = asyncio.get_running_loop().time() - t0
            return await asyncio.wait_for(asyncio.gather(*sends), 10), hop

    try:
        outcomes, hop = asyncio.run(many())
    finally:
        hanging.release.set()
    assert hop < 1.0, f"a thread hop waited {hop:.2f} s behind hanging DNS lookups"
    assert all(o.status_code is None and o.error == "connection" and "did not resolve" in (o.excerpt or "")
               for o, _ in outcomes), outcomes


def test_one_tenants_hanging_names_never_fail_another_tenants_endpoint(  # type: ignore[no-untyped-def]
        db, redis_db, endless, monkeypatch):
    """Invariant: a lookup that outlives its deadline still holds its thread, so a tenant whose endpoint names hang
    (a dead DNS server, or one the tenant runs to never answer) holds at most its share of the DNS threads; another
    tenant's endpoint meanwhile resolves and is sent to at once. On the old code its lookup queued behind the hung
    ones, ran out its deadline unstarted and counted as that innocent endpoint's connection failure (its breaker
    opens on a run of those, then the endpoint is disabled)."""
    got42, target42 = claimed_send(endpoint(42, "https://hangs.example/hook"))
    got7, target7 = claimed_send(endpoint(7, f"http://127.0.0.1:{ENDLESS_PORT}/hook"), tenant_id=7)
    hanging = Hanging()
    check = urls.addresses_for_send
    monkeypatch.setattr(urls, "addresses_for_send",
                        lambda url, allow: check(url, allow, resolve=hanging) if "hangs.example" in url
                        else check(url, allow))
    monkeypatch.setattr(dns, "DNS_DEADLINE_S", 1.0, raising=False)

    async def both() -> tuple[list[Any], Any]:
        async with httpx.AsyncClient(timeout=30) as http:
            hung = [asyncio.create_task(attempt._post_endpoint({"http": http}, got42.claim, target42))
                    for _ in range(12)]
            await hanging.reached(2)  # tenant 42's share of the DNS threads is hanging
            theirs = await asyncio.wait_for(attempt._post_endpoint({"http": http}, got7.claim, target7), 10)
            return await asyncio.wait_for(asyncio.gather(*hung), 10), theirs

    try:
        outcomes, (theirs, _) = asyncio.run(both())
    finally:
        hanging.release.set()
    assert theirs.status_code == 200 and theirs.error is None, theirs
    assert all(o.status_code is None and o.error == "connection" for o, _ in outcomes), outcomes
