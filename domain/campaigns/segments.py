"""Campaign audiences are code: each segment is a named, tested function returning the SQL condition over
`recipients r` (and the tenant) that selects who gets it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sqlalchemy.engine import Engine

from domain.campaigns import sql
from domain.db import UnitOfWork

CONTACT_COLUMN: Final[dict[str, str]] = {"email": "r.email", "sms": "r.phone", "whatsapp": "r.phone"}


def all_reachable(channel: str) -> str:
    """Everyone with a contact point for the channel who has not opted out of it."""
    return f"{CONTACT_COLUMN[channel]} IS NOT NULL AND NOT (:channel = ANY(r.opted_out_channels))"


def abandoned_after_credit_check(channel: str) -> str:
    """Reachable people whose loan journey stopped at the credit check: a lead of theirs is at `credit_check_done`
    and has no live nudge left (it was sent or ended)."""
    return (all_reachable(channel) + " AND EXISTS (SELECT 1 FROM leads l WHERE l.tenant_id = r.tenant_id "
            "AND l.recipient_ref = r.ref AND l.current_step = 'credit_check_done' AND NOT EXISTS ("
            "SELECT 1 FROM lead_notification_intents i WHERE i.lead_id = l.id "
            "AND i.status IN ('pending', 'scheduled')))")


SEGMENTS: Final[dict[str, Callable[[str], str]]] = {
    "all_reachable": all_reachable,
    "abandoned_after_credit_check": abandoned_after_credit_check,
}


# What each segment selects, in one line for the people choosing one (the campaigns page, beside the choice).
DESCRIPTIONS: Final[dict[str, str]] = {
    "all_reachable": "Everyone with an address for the channel who has not opted out of it.",
    "abandoned_after_credit_check": "Reachable people whose loan application stopped at the credit check, "
                                    "with no reminder still waiting.",
}
assert DESCRIPTIONS.keys() == SEGMENTS.keys(), "every segment says what it selects"


def segment_refs(tenant_id: int, segment: str, channel: str, engine: Engine | None = None) -> list[str]:
    """Who a segment selects right now (for tests and previews)."""
    with UnitOfWork(engine) as uow:
        return [str(r) for r in uow.execute(sql.audience_refs(SEGMENTS[segment](channel)),
                                            {"t": tenant_id, "channel": channel}).scalars()]
