"""Endpoint tools (issue 27 item 8) on real PostgreSQL, Redis, lane workers and the mock receiver.

Invariants: "send test event" writes ONE ledger row (an `outbox.test` event, keyed by event id and endpoint as the
order fan-out keys its rows) for that endpoint only, through the ledger's one way in, with one audit row; a second
ask while one is owed, a disabled endpoint and another tenant's id (exactly a missing one) write nothing. The lane
workers deliver it signed with the endpoint's secret: the mock receiver verifies it once the secret was handed over
through its own API (development), and refuses it with 401 before — which the endpoint page's read model says in
plain words ("refused our signature … check … secret"), as it shows the accepted attempt after.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from dashboard.pages.endpoints_words import read_rows
from domain.db import get_engine
from domain.delivery.wakeups import arq_pool, enqueue_after_commit
from domain.endpoints import mock, store
from domain.orders import trial
from tests.integration.conftest import RECEIVER, effects, rows, wait_for

MOCK_URL = f"{RECEIVER}/webhooks/orders"


def audit(target: str) -> list[Any]:
    with get_engine().connect() as c:
        return list(c.execute(sa.text("SELECT actor_ref, action FROM operator_actions WHERE target = :g"),
                              {"g": target}).all())


async def _send(tenant_id: int, endpoint_id: int) -> trial.Sent:
    got = trial.send_test_event(tenant_id, endpoint_id, "support:dana")
    assert isinstance(got, trial.Sent), got
    pool = await arq_pool()
    try:
        assert await enqueue_after_commit(pool, got.owed) == 1, "the test's wake-up went out as any producer's"
    finally:
        await pool.aclose()
    return got


def test_one_row_for_that_endpoint_only_and_nothing_while_one_is_owed(db, redis_db):
    """Invariant: a test event is one QUEUED webhook row of that endpoint (lane high, outbox.test, its own
    envelope), one audit row; a second ask while it is owed, a disabled endpoint and another tenant's id write
    nothing."""
    mine = store.create(42, MOCK_URL, "mine", None, "test")
    other = store.create(42, MOCK_URL, "other", None, "test")
    theirs = store.create(7, MOCK_URL, "theirs", None, "test")
    got = trial.send_test_event(42, mine["id"], "support:dana")
    assert isinstance(got, trial.Sent)
    [row] = rows("template = 'outbox.test'")
    assert (row.endpoint_id, row.tenant_id, row.lane, row.channel, row.status, row.event_id) == (
        mine["id"], 42, "high", "webhook", "QUEUED", got.event_id)
    assert row.dedupe_key.endswith(f"endpoint:{mine['id']}:outbox.test:event-{got.event_id}")
    with get_engine().connect() as c:
        env = c.execute(sa.text("SELECT aggregate_type, aggregate_id, event_type FROM outbox_events "
                                "WHERE event_id = :e"), {"e": got.event_id}).one()
    assert tuple(env) == ("endpoint", str(mine["id"]), "outbox.test")
    assert audit(store.target(mine["id"]))[-1] == ("support:dana", trial.ACTION)

    again = trial.send_test_event(42, mine["id"], "support:dana")
    assert isinstance(again, trial.Refused) and again.code == "test_owed" and again.notification_id == row.id
    store.set_enabled(42, other["id"], False, "support:dana")
    off = trial.send_test_event(42, other["id"], "support:dana")
    assert isinstance(off, trial.Refused) and off.code == "endpoint_disabled"
    cross = trial.send_test_event(42, theirs["id"], "support:dana")
    assert isinstance(cross, trial.Refused) and cross.code == "not_found"
    assert trial.send_test_event(42, 10**9, "x") == cross, "another tenant's endpoint reads exactly as a missing one"
    assert len(rows("template = 'outbox.test'")) == 1, "the refusals wrote nothing"
    assert [a for a in audit(store.target(theirs["id"])) if a.action == trial.ACTION] == []


async def test_a_test_event_to_the_mock_is_refused_401_until_its_secret_is_handed_over(sys_, db):
    """Invariant: through the real workers the test event reaches the mock receiver signed with the endpoint's
    secret; without the secret the mock answers 401 and the page's read model says the signature was refused and to
    check the secret; once the demo handed the secret to the mock (its own API), the next test verifies — one
    effect at the mock, the page shows HTTP 200 and "delivered"."""
    sys_.start_worker("high")
    e = store.create(42, MOCK_URL, "the mock", None, "test")
    # The mock does not know this endpoint's secret yet (an endpoint made before the hand-over existed).
    first = await _send(42, e["id"])
    wait_for(lambda: rows("id = :i AND status <> 'QUEUED'", i=first.notification_id), 30, "the first test answered")
    assert effects(first.event_id)["effects"] == 0, "an unverified event applies nothing"
    shown, _, _ = read_rows(42, 0, 0)
    [row] = [r for r in shown if r["id"] == str(e["id"])]
    assert "outbox.test" in row["attempts"] and "HTTP 401" in row["attempts"]
    assert "refused our signature" in row["attempts"] and "secret" in row["attempts"], row["attempts"]
    assert "refused our signature" in row["last"], "the health line says it in the same words"
    assert row["test"].endswith("failed"), row["test"]

    assert mock.hand_over(42, e["id"], MOCK_URL, store_secret(42, e["id"])), "the mock took the secret"
    second = await _send(42, e["id"])
    wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=second.notification_id), 30, "the second delivered")
    assert effects(second.event_id)["effects"] == 1, "the mock verified the signature and applied it once"
    shown, _, _ = read_rows(42, 0, 0)
    [row] = [r for r in shown if r["id"] == str(e["id"])]
    assert row["attempts"].splitlines()[0].startswith("outbox.test at ")
    assert "HTTP 200 — accepted" in row["attempts"].splitlines()[0], row["attempts"]
    assert row["test"].endswith("delivered"), row["test"]


def store_secret(tenant_id: int, endpoint_id: int) -> str:
    [secret] = store.signing_secrets(tenant_id, endpoint_id)
    return secret


def test_the_mock_is_handed_nothing_outside_development_or_for_another_url(db, monkeypatch):
    """Invariant: only a URL on the mock receiver's origin, in development, is handed over; production never
    sends a secret anywhere."""
    from domain.settings import get_settings

    own = f"{get_settings().receiver_url}/webhooks/orders"  # whichever mock this process is configured with
    assert not mock.points_at_mock("https://hooks.example.com/outbox")
    assert mock.points_at_mock(own)

    production = get_settings().model_copy(update={"dev_mode": False})  # what OUTBOX_ENV=production forces
    monkeypatch.setattr(mock, "get_settings", lambda: production)
    assert not mock.points_at_mock(own)
    assert not mock.hand_over(42, 1, own, "whsec_AAAA")


@pytest.mark.usefixtures("db", "redis_db")
async def test_the_api_sends_a_test_event_and_refuses_a_second_while_owed(client: httpx.AsyncClient,
                                                                           key42: dict[str, str],
                                                                           key7: dict[str, str]) -> None:
    """Invariant: POST /api/v1/endpoints/{id}/test answers 202 with the row; a second while it is owed is 409
    `test_owed`; another tenant's key gets 404 and writes nothing; the event types the API took are kept."""
    from domain.settings import get_settings

    url = f"{get_settings().receiver_url}/webhooks/orders"  # allowed in development (the mock's origin)
    made = await client.post("/api/v1/endpoints", json={"url": url, "event_types": ["order.approved"]},
                             headers=key42)
    assert made.status_code == 201, made.text
    eid = made.json()["id"]
    assert made.json()["event_types"] == ["order.approved"]
    r = await client.post(f"/api/v1/endpoints/{eid}/test", headers=key42)
    assert r.status_code == 202 and r.json()["event_type"] == "outbox.test"
    again = await client.post(f"/api/v1/endpoints/{eid}/test", headers=key42)
    assert again.status_code == 409 and again.json()["error"] == "test_owed"
    assert (await client.post(f"/api/v1/endpoints/{eid}/test", headers=key7)).status_code == 404
    assert len(rows("template = 'outbox.test'")) == 1


async def test_the_api_hands_the_mock_the_secret_before_a_test_so_it_verifies(sys_, client: httpx.AsyncClient,
                                                                              key42: dict[str, str]) -> None:
    """Invariant: in development a test event through the API to an endpoint on the mock's origin — one made
    before any hand-over (or a mock restarted empty) — first hands the mock the endpoint's current secret, so the
    test verifies there: delivered, one effect."""
    sys_.start_worker("high")
    e = store.create(42, MOCK_URL, "made before the hand-over", None, "test")
    httpx.delete(f"{RECEIVER}/endpoint-secrets/{mock.name_for(42, e['id'])}")  # the mock knows nothing of it
    r = await client.post(f"/api/v1/endpoints/{e['id']}/test", headers=key42)
    assert r.status_code == 202, r.text
    nid = r.json()["notification_id"]
    wait_for(lambda: rows("id = :i AND status <> 'QUEUED'", i=nid), 30, "the test answered")
    assert rows("id = :i", i=nid)[0].status == "DELIVERED"
    assert effects(r.json()["event_id"])["effects"] == 1


def test_a_test_shown_answered_shows_its_attempt_even_if_it_was_recorded_mid_read(db, monkeypatch):
    """Invariant: the page never shows a test event answered without the attempt that answered it — its watcher stops
    reading once the test is answered, so such a row stayed without its attempt. The test's record (status and
    attempt line, one transaction) committing in the middle of the page's read, whichever read it lands between, leaves
    the row either on its way or delivered with "HTTP 200 — accepted"."""
    from datetime import UTC, datetime

    from domain.delivery import long_way, plan
    from domain.delivery.retry import Succeeded

    e = store.create(42, MOCK_URL, "race", None, "test")
    got = trial.send_test_event(42, e["id"], "support:dana")
    assert isinstance(got, trial.Sent)
    claimed = long_way.claim(got.notification_id, 30.0, datetime.now(UTC), "w")
    assert isinstance(claimed, plan.Ready)
    recorded: list[str] = []

    def record_once() -> None:
        if not recorded:
            recorded.append(long_way.record(claimed.claim, Succeeded(False), worker="w", started=datetime.now(UTC),
                                            status_code=200, latency_ms=1.0, provider_reference=None))

    for name in ("latest_tests", "latest_attempts"):  # the record commits right after the first of the two reads
        real = getattr(store, name)

        def then_record(*args: Any, _real: Any = real, **kw: Any) -> Any:
            out = _real(*args, **kw)
            record_once()
            return out

        monkeypatch.setattr(store, name, then_record)
    rows_now, _, _ = read_rows(42, 0, 0)
    assert recorded == ["sent"]
    (mine,) = [r for r in rows_now if r["id"] == str(e["id"])]
    assert "on its way" in mine["test"] or ("delivered" in mine["test"] and "HTTP 200" in mine["attempts"]), mine
