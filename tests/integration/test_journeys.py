"""Journeys on real PostgreSQL, Redis and workers.

Invariants: at most one live nudge per lead (the partial unique index holds even under concurrent events); a
further step supersedes the scheduled nudge and suppresses its owed messages with reason `superseded`; late or
backward events change nothing; lifecycle messages never cancel a nudge; unknown steps are refused.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa

from dashboard.api.app import build_api
from domain.access.auth import create_api_key
from domain.db import get_engine
from domain.invariants import invariant_counts
from domain.journeys.store import record_lead_event

LEAD = 1  # seeded: tenant 42, recipient cust-003, advisor advisor-anna


def state(lead_id: int = LEAD) -> tuple:
    with get_engine().connect() as c:
        lead = c.execute(sa.text("SELECT current_step FROM leads WHERE id = :l"), {"l": lead_id}).scalar_one()
        intents = c.execute(sa.text("SELECT step, status FROM lead_notification_intents WHERE lead_id = :l "
                                    "ORDER BY id"), {"l": lead_id}).all()
        notes = c.execute(sa.text("SELECT channel, status, suppressed_reason, intent_id FROM notifications "
                                  "ORDER BY id")).all()
    return lead, [tuple(i) for i in intents], [tuple(n) for n in notes]


def test_first_step_schedules_one_nudge_to_applicant_and_advisor(db):
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    r = record_lead_event(42, LEAD, "initiated", now=now)
    assert r.outcome == "scheduled" and r.scheduled_for == now + timedelta(minutes=30)
    lead, intents, notes = state()
    assert lead == "initiated" and intents == [("initiated", "scheduled")]
    assert [(n[0], n[1]) for n in notes] == [("whatsapp", "QUEUED"), ("email", "QUEUED")]


def test_further_step_supersedes_and_suppresses_the_old_nudge(db):
    record_lead_event(42, LEAD, "initiated")
    r = record_lead_event(42, LEAD, "credit_check_done")
    assert r.outcome == "scheduled" and r.cancelled_intent_id is not None
    lead, intents, notes = state()
    assert lead == "credit_check_done"
    assert intents == [("initiated", "cancelled"), ("credit_check_done", "scheduled")]
    old = [n for n in notes if n[3] == r.cancelled_intent_id]
    assert len(old) == 2 and all(n[1] == "SUPPRESSED" and n[2] == "superseded" for n in old)
    assert invariant_counts()["3 two live intents for one lead"] == 0


def test_late_or_backward_event_is_dropped_and_writes_nothing(db):
    record_lead_event(42, LEAD, "credit_check_done")
    before = state()
    for late in ("initiated", "phone_verified", "credit_check_done"):
        assert record_lead_event(42, LEAD, late).outcome == "dropped"
    assert state() == before


def test_immediate_step_tears_down_and_sends_now(db):
    record_lead_event(42, LEAD, "offers_viewed")
    r = record_lead_event(42, LEAD, "offer_submitted")
    assert r.outcome == "sent_now"
    with get_engine().connect() as c:
        due = c.execute(sa.text("SELECT count(*) FROM notifications WHERE intent_id = :i AND status = 'QUEUED' "
                                "AND next_attempt_at <= now()"), {"i": r.intent_id}).scalar_one()
    assert due == 2


def test_lifecycle_message_never_cancels_the_journey_nudge(db):
    record_lead_event(42, LEAD, "savings_explored")
    r = record_lead_event(42, LEAD, "loan_sanctioned")
    assert r.outcome == "lifecycle" and len(r.notification_ids) == 2
    _, intents, _ = state()
    assert intents == [("savings_explored", "scheduled")]


def test_concurrent_forward_events_leave_exactly_one_live_nudge_for_the_furthest_step(db):
    """The check-then-act race the partial unique index exists for: both events read "nothing live"."""
    for _ in range(10):
        with get_engine().begin() as c:
            c.execute(sa.text("DELETE FROM notifications"))
            c.execute(sa.text("DELETE FROM lead_notification_intents"))
            c.execute(sa.text("UPDATE leads SET current_step = NULL WHERE id = :l"), {"l": LEAD})
        barrier = threading.Barrier(3)
        outcomes: list[str] = []

        def go(step: str, barrier: threading.Barrier = barrier, outcomes: list[str] = outcomes) -> None:
            barrier.wait()
            outcomes.append(record_lead_event(42, LEAD, step).outcome)

        threads = [threading.Thread(target=go, args=(s,)) for s in ("initiated", "credit_check_done", "phone_verified")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lead, intents, _ = state()
        live = [i for i in intents if i[1] in ("pending", "scheduled")]
        assert live == [("credit_check_done", "scheduled")] and lead == "credit_check_done", (outcomes, intents)


def test_partial_index_refuses_a_second_live_intent_written_behind_the_code(db):
    record_lead_event(42, LEAD, "initiated")
    with pytest.raises(sa.exc.IntegrityError, match="lead_notification_intents_one_active_per_lead"), \
            get_engine().begin() as c:
        c.execute(sa.text("INSERT INTO lead_notification_intents (tenant_id, lead_id, step, status) "
                          "VALUES (42, :l, 'phone_verified', 'pending')"), {"l": LEAD})


@pytest.fixture
async def api(db, redis_db):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_api()), base_url="http://app") as c:
        yield c


async def test_api_unknown_step_is_422_and_changes_nothing(api):
    key = {"Authorization": f"Bearer {create_api_key(42)}"}
    before = state()
    r = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "teleported"}, headers=key)
    assert r.status_code == 422 and r.json()["error"] == "unknown_step" and "initiated" in r.json()["steps"]
    assert state() == before
    ok = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "initiated"}, headers=key)
    assert ok.status_code == 200 and ok.json()["outcome"] == "scheduled"
    detail = await api.get(f"/api/v1/leads/{LEAD}", headers=key)
    assert [i["status"] for i in detail.json()["intents"]] == ["scheduled"]


async def test_api_other_tenants_lead_is_404(api):
    key7 = {"Authorization": f"Bearer {create_api_key(7)}"}
    before = state()
    r = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "initiated"}, headers=key7)
    assert r.status_code == 404
    assert (await api.get(f"/api/v1/leads/{LEAD}", headers=key7)).status_code == 404
    assert state() == before


async def test_same_event_id_is_a_duplicate_with_the_first_answer_and_writes_nothing(api):
    """Idempotent events: a producer's retry (same event_id) gets the first decision back; nothing is written."""
    key = {"Authorization": f"Bearer {create_api_key(42)}"}
    first = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "credit_check_done",
                                                                  "event_id": "crm-77"}, headers=key)
    before = state()
    again = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "credit_check_done",
                                                                  "event_id": "crm-77"}, headers=key)
    assert first.json()["outcome"] == "scheduled"
    body = again.json()
    assert body["outcome"] == "duplicate" and body["decision"] == "scheduled"
    assert body["intent_id"] == first.json()["intent_id"] and body["notification_ids"] == first.json()[
        "notification_ids"]
    assert state() == before


async def test_an_event_older_than_the_last_applied_step_is_dropped_as_late(api):
    key = {"Authorization": f"Bearer {create_api_key(42)}"}
    await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "phone_verified",
                                                         "occurred_at": "2026-11-29T12:00:00+00:00"}, headers=key)
    before = state()
    late = await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": "offers_viewed",
                                                                "occurred_at": "2026-11-29T11:00:00+00:00"},
                          headers=key)
    assert (late.json()["outcome"], late.json()["reason"]) == ("dropped", "late")
    assert state() == before


async def test_lead_view_shows_the_live_intent_and_an_honest_history(api):
    key = {"Authorization": f"Bearer {create_api_key(42)}"}
    for event in ("initiated", "credit_check_done"):
        await api.post(f"/api/v1/leads/{LEAD}/events", json={"event": event}, headers=key)
    d = (await api.get(f"/api/v1/leads/{LEAD}", headers=key)).json()
    assert d["live_intent"]["step"] == "credit_check_done" and d["live_intent"]["status"] == "scheduled"
    (old, live) = d["history"]
    assert old["status"] == "cancelled" and old["why"].startswith("superseded by credit_check_done at ")
    assert live["why"].startswith("scheduled for ")
    assert [e["event"] for e in d["events"]] == ["credit_check_done", "initiated"]
