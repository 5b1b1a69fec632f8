"""Property/state-machine test (seed 004 "excellence"): random sequences of commands, stale revisions, injected
transaction faults and retries of the same event id, against real PostgreSQL, compared with a model.

Invariants after every step: the database revision and status equal the model's; every committed revision above
the base has exactly one envelope; no envelope exists for a revision that was rolled back.
Hypothesis prints the failing sequence and a @reproduce_failure blob; the run is seeded by --hypothesis-seed.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from domain import faults
from domain.db import get_engine
from domain.invariants import invariant_counts
from domain.orders.commands import Committed, execute_order_command
from domain.orders.policy import TRANSITIONS, Reject

ORDER = 913
COMMIT_INVARIANTS = ("1 committed revision without outbox event", "2 outbox event for a revision never committed")


class OrderCommands(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        from jobs.ops.seed import seed
        from tests.conftest import truncate_all

        truncate_all()
        seed()
        self.status, self.revision, self.events = "authorized", 17, 0
        self.pending_retry: uuid.UUID | None = None

    def _run(self, command: str, expected: int, fault: str | None, event_id: uuid.UUID | None = None) -> None:
        plan = faults.FaultPlan.of([fault] if fault else [])
        try:
            r = execute_order_command(tenant_id=42, order_id=ORDER, command=command, expected_revision=expected,
                                      actor_ref="model", request_id="model", event_id=event_id, plan=plan)
        except faults.InjectedFault:
            return  # rolled back: the model does not move
        allowed = TRANSITIONS.get((self.status, command))
        if expected != self.revision:
            assert isinstance(r, Reject) and r.error == "optimistic_conflict"
        elif allowed is None:
            assert isinstance(r, Reject) and r.error == "policy_denied"
        else:
            assert isinstance(r, Committed) and r.revision == self.revision + 1
            if event_id is not None:
                assert r.event_id == event_id, "a retried command keeps its event id"
            self.status, self.revision, self.events = allowed, self.revision + 1, self.events + 1

    @rule(command=st.sampled_from(["approve", "cancel", "fulfill"]), stale=st.booleans(),
          fault=st.sampled_from([None, *faults.TRANSACTION_POINTS]))
    def command(self, command: str, stale: bool, fault: str | None) -> None:
        self._run(command, self.revision - 1 if stale else self.revision, fault)

    @rule(fault=st.sampled_from(faults.TRANSACTION_POINTS))
    def crash_then_retry_same_event(self, fault: str) -> None:
        """The request crashes inside the transaction; the caller retries with the event id it already minted."""
        eid = uuid.uuid4()
        command = "approve" if self.status == "authorized" else "fulfill"
        self._run(command, self.revision, fault, eid)
        self._run(command, self.revision, None, eid)

    @invariant()
    def database_matches_model(self) -> None:
        with get_engine().connect() as c:
            o = c.execute(sa.text("SELECT status, revision FROM orders WHERE id = :o"), {"o": ORDER}).one()
            n = c.execute(sa.text("SELECT count(*) FROM outbox_events WHERE aggregate_id = :o"),
                          {"o": str(ORDER)}).scalar_one()
        assert (o.status, o.revision, n) == (self.status, self.revision, self.events)
        counts = invariant_counts(only=COMMIT_INVARIANTS)  # the two a command can break, after every step
        assert counts == dict.fromkeys(COMMIT_INVARIANTS, 0), counts


@pytest.mark.usefixtures("migrated_db")
def test_command_sequences_with_faults_match_the_model():
    OrderCommands.TestCase.settings = settings(
        max_examples=25, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    OrderCommands.TestCase().runTest()
