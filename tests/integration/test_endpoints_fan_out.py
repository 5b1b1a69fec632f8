"""Order events fanned out to each tenant's own webhook endpoints, on real PostgreSQL, Redis and lane workers.

Invariants: the order command writes one ledger row per (event, enabled endpoint of its tenant that takes the event's
type), keyed by event id + endpoint id, in the order's own transaction (a refused or crashed command writes none; a
retried one nothing new); a disabled or non-matching endpoint, and another tenant's, get none and receive nothing; a
tenant with no endpoint keeps the system-wide receiver. The worker signs with the endpoint's live secrets (a receiver
holding either secret verifies during a rotation) and keeps the event id as webhook-id; a URL re-pointed at a private
address is refused at send time, nothing is sent, and the attempt says why. Sustained failure opens the breaker
(sends deferred, not attempted), then disables the endpoint: what it owes is settled with the reason and an operator
alert is recorded and counted on /metrics. A stale claim moves no breaker; an open breaker lets one probe through.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa

from domain import faults
from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Retry, Succeeded
from domain.delivery.signing import verify
from domain.endpoints import store
from domain.orders.commands import execute_order_command
from domain.orders.policy import Reject
from tests.conftest import PORT_OFFSET
from tests.integration.conftest import effects, rows, wait_for
from tests.support.endpoints import PUBLIC, endpoint, endpoint_row
from tests.support.orders import approve, orders_of

HOOK_PORT, PRIVATE_PORT = 8086 + PORT_OFFSET, 8087 + PORT_OFFSET
HOOK = f"http://127.0.0.1:{HOOK_PORT}"


class Capture:
    """A customer's webhook receiver in this process: records every request, answers `status` (per path)."""

    def __init__(self, port: int) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                owner.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": body, "at": time.monotonic()})
                code = owner.status.get(self.path, 200)
                out = json.dumps({"status": "ok" if code < 300 else "down"}).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():  # type: ignore[no-untyped-def]
    c = Capture(HOOK_PORT)
    yield c
    c.close()


@pytest.fixture
def private():  # type: ignore[no-untyped-def]
    c = Capture(PRIVATE_PORT)
    yield c
    c.close()


def worker_env(**extra: str) -> dict[str, str]:
    """The capture server passes the guard as the mock receiver does (development allowlist)."""
    return {"OUTBOX_ENDPOINT_ALLOWLIST": f"127.0.0.1:{HOOK_PORT}", **extra}










def test_one_row_per_enabled_matching_endpoint_in_the_orders_transaction(db, redis_db):
    """Invariant: the command writes exactly one webhook row per enabled endpoint of its tenant whose types match,
    keyed event id + endpoint id, and no system-wide webhook row; disabled, non-matching and other tenants'
    endpoints get none; a refused or crashed command writes none; a retried command writes nothing new."""
    every = endpoint(42, PUBLIC)
    approved_only = endpoint(42, PUBLIC + "/a", ["order.approved"])
    endpoint(42, PUBLIC + "/c", ["order.cancelled"])
    endpoint(42, PUBLIC + "/off", enabled=False)
    theirs = endpoint(7, PUBLIC + "/t7")
    before = len(rows())

    with get_engine().connect() as c:
        rev = c.execute(sa.text("SELECT revision FROM orders WHERE id = 913")).scalar_one()
    refused = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=rev + 5,
                                    actor_ref="test", request_id="req-stale")
    assert isinstance(refused, Reject) and len(rows()) == before, "a refused command writes no row"
    with pytest.raises(faults.InjectedFault):
        approve(plan=faults.FaultPlan({"before_commit"}))
    assert len(rows()) == before, "a command that dies before its commit leaves no row"

    r = approve()
    hooks = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)
    assert sorted(h.endpoint_id for h in hooks) == sorted([every["id"], approved_only["id"]])
    for h in hooks:
        assert str(r.event_id) in h.dedupe_key and f"endpoint:{h.endpoint_id}" in h.dedupe_key
        assert h.tenant_id == 42 and h.status == "QUEUED" and h.lane == "high"
    assert rows("recipient = 'webhook:tenant-42'") == [], "a tenant with endpoints has no system-wide webhook row"
    assert rows("endpoint_id = :i", i=theirs["id"]) == []
    assert len(rows("event_id = :e AND channel = 'email'", e=r.event_id)) == 1, "the customer's email is unchanged"
    assert {o.notification_id for o in r.owed} >= {h.id for h in hooks}, "each new row is owed a wake-up after commit"


def test_a_tenant_without_endpoints_keeps_the_system_wide_receiver(db, redis_db):
    """Invariant: another tenant's endpoints change nothing for a tenant with none: one system-wide webhook row."""
    endpoint(7, PUBLIC)
    r = approve()
    (h,) = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)
    assert h.recipient == "webhook:tenant-42" and h.endpoint_id is None


def test_signed_with_the_endpoints_secrets_during_a_rotation(sys_, hook):
    """Invariant: the endpoint receives the event once, webhook-id = event id, signed so that a receiver holding
    the old or the new secret verifies (rotation overlap); another tenant's endpoint receives nothing; the row is
    DELIVERED, and the endpoint's health shows the success."""
    e = endpoint(42, f"{HOOK}/mine")
    endpoint(7, f"{HOOK}/theirs")
    rotated = store.rotate(42, e["id"], "test")
    assert rotated is not None
    sys_.start_worker("high", env=worker_env())
    r = approve()
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status = 'DELIVERED'", e=r.event_id),
             what="the endpoint's row delivered")
    (got,) = hook.to("/mine")
    assert got["headers"]["webhook-id"] == str(r.event_id) == got["headers"]["idempotency-key"]
    assert len(got["headers"]["webhook-signature"].split()) == 2, "both secrets sign during the overlap"
    for held in (e["secret"], rotated["secret"]):
        assert verify(held, got["body"], got["headers"])["event_id"] == str(r.event_id)
    assert hook.to("/theirs") == [], "another tenant's endpoint never receives"
    assert effects(r.event_id)["deliveries"] == 0, "the system-wide receiver is not this tenant's endpoint"
    health = store.get(42, e["id"])["health"]  # type: ignore[index]
    assert health["success_rate_24h"] == 1.0 and health["last_success_at"] is not None
    assert health["last_error"] is None


def test_a_url_repointed_to_a_private_address_is_refused_at_send_time(sys_, hook, private):
    """Invariant: the URL is checked again when sending: an endpoint now pointing at a loopback address (as DNS
    rebinding would) gets nothing, and the attempt is recorded as url_not_allowed with the reason."""
    e = endpoint(42, f"{HOOK}/ok")
    with get_engine().begin() as c:  # what a re-pointed name looks like after the fresh lookup
        c.execute(sa.text("UPDATE webhook_endpoints SET url = :u WHERE id = :i"),
                  {"u": f"http://127.0.0.1:{PRIVATE_PORT}/internal", "i": e["id"]})
    sys_.start_worker("high", env=worker_env())
    r = approve()
    (row,) = rows("event_id = :e AND channel = 'webhook'", e=r.event_id)

    def refused() -> list[Any]:
        with get_engine().connect() as c:
            return list(c.execute(sa.text(
                "SELECT error_class, response_excerpt FROM notification_attempts WHERE notification_id = :n "
                "AND error_class = 'url_not_allowed'"), {"n": row.id}))
    (attempt, *_) = wait_for(refused, what="the refused attempt recorded")
    assert "loopback" in attempt.response_excerpt
    assert private.requests == [] and hook.requests == [], "nothing was sent anywhere"
    assert store.get(42, e["id"])["health"]["last_error"] == "url_not_allowed"  # type: ignore[index]


async def test_sustained_failure_opens_the_breaker_then_disables_with_an_alert(sys_, hook, client, key42):
    """Invariant: after 2 failures in a row the breaker opens and the next send waits its cooldown (deferred, not
    attempted); after 4 over at least the configured time the endpoint is disabled automatically, every row it owed
    ends unsent with the reason in plain words (none left QUEUED), an operator alert is in the audit log and
    /metrics counts it; the API shows the health and the reason."""
    hook.status["/down"] = 503
    e = endpoint(42, f"{HOOK}/down")
    cooldown = 0.5
    sys_.start_worker("high", env=worker_env(
        OUTBOX_ENDPOINT_BREAKER_FAILURES="2", OUTBOX_ENDPOINT_BREAKER_COOLDOWN=str(cooldown),
        OUTBOX_ENDPOINT_DISABLE_FAILURES="4", OUTBOX_ENDPOINT_DISABLE_MINUTES="0.01"))
    first, *more = orders_of(42)[:4]
    assert len(more) == 3
    approve(first)
    wait_for(lambda: endpoint_row(e["id"]).breaker_open_until is not None, 30, what="the breaker open")
    for oid in more:  # owed while the breaker is open: deferred, then settled when the endpoint is disabled
        approve(oid)
    wait_for(lambda: endpoint_row(e["id"]).disabled_at is not None, 60, what="the endpoint disabled automatically")
    wait_for(lambda: not rows("endpoint_id = :i AND status = 'QUEUED'", i=e["id"]), 30,
             what="every row it owed settled")
    ep = endpoint_row(e["id"])
    assert "disabled automatically after" in ep.disabled_reason and "server_error" in ep.disabled_reason
    times = sorted(r["at"] for r in hook.to("/down"))
    assert len(times) >= 4
    assert times[2] - times[1] >= cooldown * 0.95, "the breaker held the third send for its cooldown"
    with get_engine().connect() as c:
        attempts = c.execute(sa.text(
            "SELECT count(*) FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id "
            "WHERE n.endpoint_id = :i AND a.outcome IN ('retry', 'failed')"), {"i": e["id"]}).scalar_one()
        alerts = list(c.execute(sa.text(
            "SELECT actor_ref, target, note FROM operator_actions WHERE action = 'auto-disable webhook endpoint'")))
    assert attempts == len(times), "every failure counted was a real request; a deferral is none"
    (alert,) = alerts
    assert alert.actor_ref == "system:circuit-breaker" and f"endpoint {e['id']}" in alert.target
    for n in rows("endpoint_id = :i", i=e["id"]):
        assert n.status in ("SUPPRESSED", "FAILED"), n
        if n.status == "SUPPRESSED":
            assert n.suppressed_reason == "endpoint_disabled" and "disabled automatically" in n.reason_detail
    scrape = (await client.get("/metrics")).text
    assert 'outbox_endpoints_auto_disabled_total{tenant="42"} 1.0' in scrape
    got = (await client.get(f"/api/v1/endpoints/{e['id']}", headers=key42)).json()
    assert got["enabled"] is False and "automatically" in got["disabled_reason"]
    assert got["health"]["success_rate_24h"] == 0.0 and got["health"]["last_error"] == "server_error"
    assert got["health"]["attempts_24h"] == attempts


def test_a_stale_claim_moves_no_breaker_and_an_open_breaker_lets_one_probe_through(db, redis_db):
    """Invariant: a record under a claim whose lease ran out (another claim took the row) changes neither the row
    nor the endpoint's run of failures; when an open breaker's time is up exactly one claim takes the probe, the
    others are deferred (not attempted), and the probe's success closes the breaker."""
    e = endpoint(42, PUBLIC)
    first, second = (approve(oid) for oid in orders_of(42)[:2])
    (a,) = rows("event_id = :e AND endpoint_id = :i", e=first.event_id, i=e["id"])
    (b,) = rows("event_id = :e AND endpoint_id = :i", e=second.event_id, i=e["id"])

    old = long_way.claim(a.id, 0.2, datetime.now(UTC))
    assert isinstance(old, plan.Ready)
    new = wait_for(lambda: long_way.claim(a.id, 30, datetime.now(UTC)), 10, what="the lease to run out")
    stale = long_way.record(old.claim, Retry("server_error", 0.01), worker="old", started=datetime.now(UTC),
                            status_code=503, latency_ms=1.0, provider_reference=None)
    assert stale == "stale" and endpoint_row(e["id"]).failure_streak == 0, "a stale claim moves no breaker"
    assert long_way.record(new.claim, Retry("server_error", 0.01), worker="new", started=datetime.now(UTC),
                           status_code=503, latency_ms=1.0, provider_reference=None) == "retry"
    assert endpoint_row(e["id"]).failure_streak == 1

    with get_engine().begin() as c:  # the breaker's time is up
        c.execute(sa.text("UPDATE webhook_endpoints SET breaker_open_until = now() - interval '1 second', "
                          "failure_streak = 5 WHERE id = :i"), {"i": e["id"]})
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE id = :a"), {"a": a.id})
    now = datetime.now(UTC)
    probe = long_way.claim(a.id, 30, now)
    held = long_way.claim(b.id, 30, now)
    assert isinstance(probe, plan.Ready), probe
    assert isinstance(held, plan.Deferred) and held.until > now + timedelta(seconds=30), held
    (b_after,) = rows("id = :i", i=b.id)
    assert b_after.attempts == 0 and "circuit breaker" in b_after.reason_detail, "deferred, not attempted"
    assert long_way.record(probe.claim, Succeeded(False), worker="probe", started=now, status_code=200,
                           latency_ms=1.0, provider_reference=None) == "sent"
    ep = endpoint_row(e["id"])
    assert ep.failure_streak == 0 and ep.breaker_open_until is None, "the probe's success closes the breaker"


def test_a_disabled_or_deleted_endpoint_settles_its_rows_with_the_reason(db, redis_db):
    """Invariant: a row whose endpoint was disabled (or deleted) after the event is suppressed at its claim with
    the reason in plain words, and whatever it would have cost is not charged; enabling the endpoint again closes
    its breaker and forgets its run of failures."""
    e, gone = endpoint(42, PUBLIC), endpoint(42, PUBLIC + "/b")
    r = approve()
    store.set_enabled(42, e["id"], False, "support:dana")
    store.delete(42, gone["id"], "support:dana")
    now = datetime.now(UTC)
    for row in rows("event_id = :e AND channel = 'webhook'", e=r.event_id):
        assert isinstance(long_way.claim(row.id, 30, now), plan.Suppressed)
    by_endpoint = {n.endpoint_id: n for n in rows("event_id = :e AND channel = 'webhook'", e=r.event_id)}
    assert by_endpoint[e["id"]].suppressed_reason == "endpoint_disabled"
    assert by_endpoint[e["id"]].reason_detail == f"endpoint {e['id']} was disabled by support:dana"
    assert by_endpoint[gone["id"]].suppressed_reason == "endpoint_deleted"
    assert all(n.reserved_cents == 0 for n in by_endpoint.values())

    with get_engine().begin() as c:  # it had been failing too
        c.execute(sa.text("UPDATE webhook_endpoints SET failure_streak = 3, failing_since = now(), "
                          "breaker_open_until = now() + interval '1 minute' WHERE id = :i"), {"i": e["id"]})
    store.set_enabled(42, e["id"], True, "support:dana")
    back = endpoint_row(e["id"])
    assert (back.disabled_at, back.disabled_reason, back.failure_streak, back.failing_since,
            back.breaker_open_until) == (None, None, 0, None, None), "enabling closes the breaker, forgets the run"
