"""Who may do what (domain/access/roles.py): the table every privileged dashboard handler asks, every time.

Invariants: only platform on-call (no tenant) may pause lanes or flip fault switches — they act on every tenant;
support may change nothing; a tenant's on-call may top up and manage API keys, a plain operator may not; every
refusal says why in words.
"""

from __future__ import annotations

import pytest

from domain.access.roles import (
    NO_TENANT,
    ONCALL,
    OPERATOR,
    PLATFORM,
    ROLES,
    SUPPORT,
    Act,
    has_tenant,
    may,
    refusal,
)

EXPECTED = {
    SUPPORT: set(),
    OPERATOR: {Act.ORDERS, Act.MESSAGES, Act.REPLAY, Act.RESOLVE, Act.PREFERENCES},
    ONCALL: {Act.ORDERS, Act.MESSAGES, Act.REPLAY, Act.RESOLVE, Act.PREFERENCES, Act.TOP_UP, Act.API_KEYS,
             Act.ENDPOINTS},
    PLATFORM: {Act.REPLAY, Act.RESOLVE, Act.PAUSE, Act.FAULTS},
}


@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_exactly_its_actions(role: str) -> None:
    assert {a for a in Act if may(role, a)} == EXPECTED[role]


def test_lanes_and_fault_switches_belong_only_to_the_role_without_a_tenant() -> None:
    for act in (Act.PAUSE, Act.FAULTS):
        assert [r for r in ROLES if may(r, act)] == [PLATFORM]
    assert not has_tenant(PLATFORM) and all(has_tenant(r) for r in (SUPPORT, OPERATOR, ONCALL))
    assert NO_TENANT == 0, "real tenant ids start at 1, so 0 can never name one"


def test_unknown_roles_and_api_keys_may_nothing_and_every_refusal_is_words() -> None:
    for role in ("", "api", "admin", "PLATFORM"):
        assert not any(may(role, a) for a in Act)
    for a in Act:
        assert refusal(a).startswith(("Only", "Fault")) and refusal(a).endswith(".")
