"""Invariant: only the transitions in the policy table commit; a stale revision never commits."""

from hypothesis import given
from hypothesis import strategies as st

from domain.orders.policy import COMMANDS, TRANSITIONS, Accept, Reject, decide_transition

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
