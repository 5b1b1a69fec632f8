"""Journeys under a storm, and against a model.

Invariants: through the HTTP API, with 16 concurrent clients firing 20 leads × 200 shuffled events (steps,
repeats, steps backward, late events, lifecycle events, exact duplicates) while workers deliver nudges that come
due (time scale 600): never two live intents for a lead at any sample; each lead's newest intent is for its furthest
step; no nudge is sent for a step the lead had passed when its claim decided; every duplicate gets the first answer.
A hypothesis state machine drives the same code in-process with time advancing, worker runs and worker crashes
between claim and send, and compares the database's live step with a model's after every step.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from domain.access.auth import create_api_key
from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Succeeded
from domain.invariants import invariant_counts
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.journeys.store import create_lead, record_lead_event
from jobs.drills.storm import run_storm
from jobs.ops.procs import System
from jobs.ops.seed import seed
from tests.conftest import PORT_OFFSET, reset_receiver, truncate_all

STORM_API_PORT = 8092 + PORT_OFFSET  # apart from a parallel slot's storm


@pytest.mark.timeout(900)
def test_storm_of_concurrent_duplicate_and_late_events_keeps_one_live_nudge_per_lead(sys_, tmp_path):
    api = System({**os.environ, "OUTBOX_TIME_SCALE": "600"}, sys_.logdir).api(STORM_API_PORT)
    sys_.start_worker("normal")
    sys_.start_worker("high")
    try:
        seed = int(os.environ.get("OUTBOX_TEST_SEED") or 0) or None
        r = run_storm(f"http://127.0.0.1:{STORM_API_PORT}", create_api_key(42, "storm"), seed=seed)
    finally:
        api.stop()
    print(f"storm seed={r.seed} events={r.events} in {r.seconds:.1f}s ({r.events_per_s:.0f}/s) "
          f"samples={r.samples} nudges_sent={r.nudges_sent} outcomes={dict(r.outcomes)}")
    assert not r.errors, r.errors[:5]
    assert r.samples > 10 and r.max_live_seen <= 1, f"seed {r.seed}: {r.max_live_seen} live intents for a lead"
    assert r.wrong_final_intent == [], f"seed {r.seed}"
    assert r.stale_nudges_sent == [], f"seed {r.seed}"
    assert r.duplicates_sent > 0 and r.duplicates_answered_first == r.duplicates_sent, f"seed {r.seed}"
    assert r.outcomes["dropped (late)"] > 0 and r.outcomes["lifecycle"] > 0
    assert not any(r.invariants.values()), r.invariants


def _live(lead: int) -> str | None:
    with get_engine().connect() as c:
        rows = c.execute(sa.text("SELECT step FROM lead_notification_intents WHERE lead_id = :l "
                                 "AND status IN ('pending', 'scheduled')"), {"l": lead}).scalars().all()
    assert len(rows) <= 1
    return rows[0] if rows else None


class JourneyMachine(RuleBasedStateMachine):
    """Model: per lead, the furthest step reached and whether its nudge is still live."""

    @initialize()
    def setup(self) -> None:
        truncate_all()  # every example starts from the seeded database
        reset_receiver()
        seed()
        with get_engine().begin() as c:  # people who can always be reached: nothing but the journey decides
            c.execute(sa.text("UPDATE recipients SET daily_cap = NULL, quiet_start = NULL, quiet_end = NULL "
                              "WHERE tenant_id = 42"))
        self.leads = [create_lead(42, "cust-003", "advisor-anna"), create_lead(42, "cust-004")]
        self.furthest: dict[int, str | None] = {lead: None for lead in self.leads}
        self.live: dict[int, str | None] = {lead: None for lead in self.leads}
        self.sent_ids: list[tuple[int, str, str]] = []

    @rule(i=st.integers(0, 1), step=st.sampled_from(JOURNEY_STEPS))
    def journey_event(self, i: int, step: str) -> None:
        lead = self.leads[i]
        eid = f"m-{uuid.uuid4().hex}"
        r = record_lead_event(42, lead, step, event_id=eid)
        self.sent_ids.append((lead, step, eid))
        cur = self.furthest[lead]
        if cur is None or JOURNEY_STEPS.index(step) > JOURNEY_STEPS.index(cur):
            assert r.outcome in ("scheduled", "sent_now")
            self.furthest[lead], self.live[lead] = step, step
        else:
            assert r.outcome == "dropped"

    @rule(i=st.integers(0, 1), event=st.sampled_from(LIFECYCLE_EVENTS))
    def lifecycle_event(self, i: int, event: str) -> None:
        assert record_lead_event(42, self.leads[i], event).outcome == "lifecycle"

    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        if not self.sent_ids:
            return
        lead, step, eid = data.draw(st.sampled_from(self.sent_ids))
        assert record_lead_event(42, lead, step, event_id=eid).outcome == "duplicate"

    @rule()
    def time_passes(self) -> None:
        with get_engine().begin() as c:
            c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE status = 'QUEUED'"))

    def _due(self) -> list[int]:
        with get_engine().connect() as c:
            return list(c.execute(sa.text(
                "SELECT id FROM notifications WHERE status = 'QUEUED' AND next_attempt_at <= now() "
                "AND (leased_until IS NULL OR leased_until < now()) ORDER BY id")).scalars())

    @rule()
    def worker_runs(self) -> None:
        for nid in self._due():
            c = long_way.claim(nid, 30, datetime.now(UTC), "model")
            if isinstance(c, plan.Ready):
                long_way.record(c.claim, Succeeded(False), worker="model", started=datetime.now(UTC),
                                status_code=201, latency_ms=1.0, provider_reference=f"m-{nid}")
        for lead in self.leads:  # a nudge that went out is no longer live
            if self.live[lead] is not None and _live(lead) is None:
                self.live[lead] = None

    @rule()
    def worker_crashes_between_claim_and_send(self) -> None:
        due = self._due()
        if due:
            got = long_way.claim(due[0], 30, datetime.now(UTC), "crashing")
            if isinstance(got, plan.Exhausted):  # every attempt lost to crashes: it failed, its nudge is over
                for lead in self.leads:
                    if self.live[lead] is not None and _live(lead) is None:
                        self.live[lead] = None
                return
            with get_engine().begin() as c:  # it died: its lease runs out
                c.execute(sa.text("UPDATE notifications SET leased_until = now() - interval '1 second' "
                                  "WHERE id = :i"), {"i": due[0]})

    @invariant()
    def at_most_one_live_intent_and_it_is_the_models(self) -> None:
        for lead in self.leads:
            assert _live(lead) == self.live[lead]

    def teardown(self) -> None:
        assert not any(invariant_counts().values())


@pytest.mark.timeout(600)
def test_journey_state_machine_matches_the_model(db):
    runner = JourneyMachine.TestCase
    runner.settings = settings(max_examples=15, stateful_step_count=25, deadline=None,
                               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

    runner().runTest()
