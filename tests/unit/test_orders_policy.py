"""Invariant: only the transitions in the policy table commit; a stale revision never commits."""

from hypothesis import given
from hypothesis import strategies as st

from domain.orders.policy import COMMANDS, TRANSITIONS, Accept, Reject, decide_transition, guard_for

STATUSES = ("authorized", "approved", "cancelled", "fulfilled")


def test_authorized_may_be_approved_or_cancelled():
    assert decide_transition("authorized", 17, "approve", 17) == Accept("approved", 18, "order.approved")
    assert decide_transition("authorized", 17, "cancel", 17) == Accept("cancelled", 18, "order.cancelled")


def test_approved_order_cannot_be_cancelled():
    d = decide_transition("approved", 18, "cancel", 18)
    assert isinstance(d, Reject) and d.error == "policy_denied" and d.current_revision == 18


def test_unknown_command_is_rejected():
    d = decide_transition("authorized", 1, "refund", 1)
    assert isinstance(d, Reject) and d.error == "unknown_command"


@given(st.sampled_from(STATUSES), st.integers(0, 10**6), st.sampled_from(COMMANDS), st.integers(0, 10**6))
def test_decision_matches_table_exactly(status, rev, command, expected):
    d = decide_transition(status, rev, command, expected)
    if expected != rev:
        assert isinstance(d, Reject) and d.error == "optimistic_conflict" and d.current_revision == rev
    elif (status, command) in TRANSITIONS:
        assert isinstance(d, Accept) and d.new_revision == rev + 1 and d.to_status == TRANSITIONS[(status, command)]
    else:
        assert isinstance(d, Reject) and d.error == "policy_denied"


@given(st.sampled_from(STATUSES), st.integers(0, 10**6), st.sampled_from((*COMMANDS, "refund")), st.integers(0, 10**6))
def test_guarded_update_decides_exactly_as_the_policy(status, rev, command, expected):
    """Invariant: the command's guarded update (it matches an order at the caller's revision whose status is one of
    the guard's) commits exactly what `decide_transition` accepts, to the same status and event."""
    g = guard_for(command)
    d = decide_transition(status, rev, command, expected)
    matched = g is not None and rev == expected and status in g.from_statuses
    assert matched == isinstance(d, Accept)
    if matched:
        assert g is not None and d == Accept(g.to_status, expected + 1, g.event_type)


def test_every_command_has_one_target_status():
    """Invariant: a command names where the order goes (its envelope is built before the guarded update)."""
    for c in COMMANDS:
        assert len({t for (_, cmd), t in TRANSITIONS.items() if cmd == c}) == 1, f"{c}: not one target status"
