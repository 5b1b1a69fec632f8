"""Pure order decisions: which transition is allowed, and what a command decides.

No I/O here. `decide_transition` takes the current state as values and returns a decision value; the unit of
work turns an `Accept` into one transaction and anything else into a clear error that writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from domain.vocabulary import OrderStatus as OrderStatus  # the statuses are the schema's word too (its CHECK)

Command = Literal["approve", "cancel", "fulfill"]

# The whole policy table: (from status, command) -> to status. Anything absent is `policy_denied`.
COMMANDS: Final[tuple[Command, ...]] = get_args(Command)

TRANSITIONS: Final[dict[tuple[OrderStatus, Command], OrderStatus]] = {
    ("authorized", "approve"): "approved",
    ("authorized", "cancel"): "cancelled",
    ("approved", "fulfill"): "fulfilled",
}

EVENT_TYPES: Final[dict[OrderStatus, str]] = {
    "approved": "order.approved",
    "cancelled": "order.cancelled",
    "fulfilled": "order.fulfilled",
}


@dataclass(frozen=True)
class Accept:
    to_status: str
    new_revision: int
    event_type: str


@dataclass(frozen=True)
class Reject:
    error: Literal["optimistic_conflict", "policy_denied", "unknown_command"]
    current_revision: int
    current_status: str
    requested: str


Decision = Accept | Reject


def decide_transition(
    current_status: str, current_revision: int, command: str, expected_revision: int
) -> Decision:
    """Decide a command against the state the caller saw.

    Revision is checked first: a stale caller learns the current revision even when the command would also be
    denied, because re-reading is what they must do next either way.
    """
    if command not in COMMANDS:
        return Reject("unknown_command", current_revision, current_status, command)
    if expected_revision != current_revision:
        return Reject("optimistic_conflict", current_revision, current_status, command)
    to_status = TRANSITIONS.get((current_status, command))  # type: ignore[arg-type]  # any str: absent = denied
    if to_status is None:
        return Reject("policy_denied", current_revision, current_status, command)
    return Accept(to_status, current_revision + 1, EVENT_TYPES[to_status])


@dataclass(frozen=True)
class Guard:
    """A command as one guarded update: it commits only on an order at `expected_revision` whose status is one of
    `from_statuses`, and moves it to `to_status` (the event it emits is `event_type`). The update's WHERE is the
    decision: `decide_transition` on a matched row would give `Accept(to_status, expected_revision + 1,
    event_type)`, and on anything else the update changes nothing (the caller then reads the row to say why)."""

    from_statuses: tuple[str, ...]
    to_status: str
    event_type: str


def guard_for(command: str) -> Guard | None:
    """The guarded update of `command`; None for an unknown command. One target status per command (the table
    holds that, a unit test checks it): the event is built before the update, so it cannot depend on which
    status the update finds."""
    froms = tuple(sorted(f for (f, c) in TRANSITIONS if c == command))
    if not froms:
        return None
    (to_status,) = {t for (_, c), t in TRANSITIONS.items() if c == command}
    return Guard(froms, to_status, EVENT_TYPES[to_status])


def allowed_commands(current_status: str) -> list[str]:
    return [c for c in COMMANDS if (current_status, c) in TRANSITIONS]
