"""Who may do what: one table, asked by every privileged handler on the server, every time.

Four roles. Three belong to a tenant and act only on that tenant's rows (every query filters on the tenant);
the platform role belongs to NO tenant and owns what acts on every tenant at once (lanes, fault switches).

| role      | tenant | may                                                                   |
|-----------|--------|-----------------------------------------------------------------------|
| support   | one    | read: orders, ledger, audit, recipients, journeys (answer customers)  |
| operator  | one    | + orders, campaigns, journey events, replay/resolve, preferences      |
| oncall    | one    | + top up the balance, API keys and webhook endpoints                  |
| platform  | none   | pause/resume lanes, fault switches (development), replay/resolve any  |
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

SUPPORT, OPERATOR, ONCALL, PLATFORM = "support", "operator", "oncall", "platform"
ROLES: Final = (SUPPORT, OPERATOR, ONCALL, PLATFORM)
TENANT_ROLES: Final = (SUPPORT, OPERATOR, ONCALL)
NO_TENANT: Final = 0  # a platform operator's tenant id in a session (real tenant ids start at 1)


class Act(StrEnum):
    ORDERS = "order command"
    MESSAGES = "start or stop messages"  # campaigns, journey events
    REPLAY = "replay"
    RESOLVE = "resolve"
    PREFERENCES = "preferences"
    TOP_UP = "top-up"
    PAUSE = "pause"
    FAULTS = "faults"
    API_KEYS = "API keys"
    ENDPOINTS = "webhook endpoints"


_MAY: Final[dict[Act, frozenset[str]]] = {
    Act.ORDERS: frozenset({OPERATOR, ONCALL}),
    Act.MESSAGES: frozenset({OPERATOR, ONCALL}),
    Act.REPLAY: frozenset({OPERATOR, ONCALL, PLATFORM}),
    Act.RESOLVE: frozenset({OPERATOR, ONCALL, PLATFORM}),
    Act.PREFERENCES: frozenset({OPERATOR, ONCALL}),
    Act.TOP_UP: frozenset({ONCALL}),
    Act.PAUSE: frozenset({PLATFORM}),
    Act.FAULTS: frozenset({PLATFORM}),
    Act.API_KEYS: frozenset({ONCALL}),
    Act.ENDPOINTS: frozenset({ONCALL}),
}

_REFUSAL: Final[dict[Act, str]] = {
    Act.ORDERS: "Only operators of this tenant can approve, cancel or fulfil orders.",
    Act.MESSAGES: "Only operators of this tenant can start or cancel campaigns and record journey events.",
    Act.REPLAY: "Only operators of this tenant (or platform on-call) can replay a message.",
    Act.RESOLVE: "Only operators of this tenant (or platform on-call) can resolve a message.",
    Act.PREFERENCES: "Only operators of this tenant can change a recipient's preferences.",
    Act.TOP_UP: "Only this tenant's on-call operators can top up the balance.",
    Act.PAUSE: "Only platform on-call can pause or resume a lane: a lane carries every tenant's messages.",
    Act.FAULTS: "Fault switches exist only in development mode, for platform on-call.",
    Act.API_KEYS: "Only this tenant's on-call operators can create or revoke API keys.",
    Act.ENDPOINTS: "Only this tenant's on-call operators can change webhook endpoints.",
}


def may(role: str, act: Act) -> bool:
    return role in _MAY[act]


def refusal(act: Act) -> str:
    return _REFUSAL[act]


def has_tenant(role: str) -> bool:
    return role in TENANT_ROLES
