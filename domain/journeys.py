"""Journey nudges: at most one live nudge per lead, always for the furthest step reached.

The decision is pure (`decide`): a step's rank is its position in `rules.JOURNEY_STEPS`. The database enforces the
invariant with the partial unique index `lead_notification_intents_one_active_per_lead`; `record_lead_event`
is the optimistic happy path and, when a concurrent event wins, re-runs the decision against fresh state — which
converges, because a re-read can only see the lead further along.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import metering
from domain.db import UnitOfWork
from domain.ledger import NewMessage, ledger_message
from domain.models import LeadNotificationIntent, table_of
from domain.rules import JOURNEY_STEPS, LIFECYCLE_EVENTS, is_further

# How long after reaching a step its "come back" nudge fires; None = an immediate message, not a reminder.
NUDGE_DELAY: Final[dict[str, timedelta | None]] = {
    "initiated": timedelta(minutes=30),
    "phone_verified": timedelta(minutes=20),
    "credit_check_done": timedelta(minutes=15),
    "savings_explored": timedelta(minutes=15),
    "offers_viewed": timedelta(minutes=10),
    "offer_submitted": None,
}
assert set(NUDGE_DELAY) == set(JOURNEY_STEPS), "every funnel step needs a nudge rule"


@dataclass(frozen=True)
class Drop:
    reason: str  # not_further: late, duplicate or backward


@dataclass(frozen=True)
class Supersede:
    """Cancel the live nudge (if any), then schedule this step's nudge (or send it now when delay is None)."""

    step: str
    delay: timedelta | None


@dataclass(frozen=True)
class Lifecycle:
    """Good news that never competes with a reminder: sent now, never cancels a journey nudge."""

    event: str


@dataclass(frozen=True)
class UnknownEvent:
    event: str


JourneyDecision = Drop | Supersede | Lifecycle | UnknownEvent


def decide(event: str, current_step: str | None) -> JourneyDecision:
    if event in LIFECYCLE_EVENTS:
        return Lifecycle(event)
    if event not in JOURNEY_STEPS:
        return UnknownEvent(event)
    if not is_further(event, current_step):
        return Drop("not_further")
    return Supersede(event, NUDGE_DELAY[event])


@dataclass(frozen=True)
class LeadEventResult:
    outcome: str  # scheduled | sent_now | dropped | lifecycle | unknown_event | not_found
    lead_id: int
    intent_id: int | None = None
    cancelled_intent_id: int | None = None
    scheduled_for: datetime | None = None
    notification_ids: tuple[int, ...] = ()
    current_step: str | None = None


class _LostRace(Exception):
    pass


def _messages(uow: UnitOfWork, *, tenant_id: int, lead: sa.Row[Any], template: str, subject: str, lane: str,
              at: datetime, intent_id: int | None) -> tuple[int, ...]:
    """Fan-out: the applicant on WhatsApp and their advisor by email, one ledger row each."""
    ids = []
    targets = [("whatsapp", lead.recipient_ref)]
    if lead.advisor_ref:
        targets.append(("email", lead.advisor_ref))
    for channel, recipient in targets:
        # An existing key means skip: a repeated lifecycle event finds its messages and owes nothing new.
        row = ledger_message(uow, NewMessage(
            tenant_id=tenant_id, recipient=recipient, channel=channel, lane=lane, template=template,
            subject=subject, payload={"lead_id": lead.id}, next_attempt_at=at, intent_id=intent_id))
        ids.append(row.notification_id)
    return tuple(ids)


def _apply(tenant_id: int, lead_id: int, event: str, now: datetime, engine: Engine | None) -> LeadEventResult:
    with UnitOfWork(engine) as uow:
        lead = uow.execute(sa.text(
            "SELECT id, recipient_ref, advisor_ref, current_step FROM leads WHERE tenant_id = :t AND id = :l"),
            {"t": tenant_id, "l": lead_id}).first()
        if lead is None:
            return LeadEventResult("not_found", lead_id)
        decision = decide(event, lead.current_step)
        if isinstance(decision, UnknownEvent):
            return LeadEventResult("unknown_event", lead_id, current_step=lead.current_step)
        if isinstance(decision, Drop):
            return LeadEventResult("dropped", lead_id, current_step=lead.current_step)
        if isinstance(decision, Lifecycle):
            ids = _messages(uow, tenant_id=tenant_id, lead=lead, template=event, subject=f"lead-{lead_id}-{event}",
                            lane="high", at=now, intent_id=None)
            uow.commit()
            return LeadEventResult("lifecycle", lead_id, notification_ids=ids, current_step=lead.current_step)
        # Forward step. Move the lead only if nobody moved it since we read it (optimistic guard) ...
        moved = uow.execute(sa.text(
            "UPDATE leads SET current_step = :new WHERE id = :l AND current_step IS NOT DISTINCT FROM CAST(:old AS varchar) "
            "RETURNING id"), {"new": decision.step, "l": lead_id, "old": lead.current_step}).first()
        if moved is None:
            raise _LostRace()
        # ... tear down the live nudge and its owed messages ...
        cancelled = uow.execute(sa.text(
            "UPDATE lead_notification_intents SET status = 'cancelled', updated_at = now(), "
            "final_reason = :why WHERE lead_id = :l AND status IN ('pending', 'scheduled') RETURNING id"),
            {"l": lead_id, "why": f"superseded by {decision.step} at {now:%Y-%m-%d %H:%M} UTC"}).scalar()
        if cancelled is not None:
            # Only rows no worker holds: a message already handed to a worker is recorded truthfully (sent or
            # not) by that worker, and a later claim suppresses it as superseded.
            released = uow.execute(sa.text(
                "UPDATE notifications SET status = 'SUPPRESSED', suppressed_reason = 'superseded', "
                "settled_at = now() WHERE intent_id = :i AND status = 'QUEUED' "
                "AND (leased_until IS NULL OR leased_until < now()) RETURNING id"), {"i": cancelled}).scalars().all()
            for nid in released:
                metering.release(uow, nid)
        # ... and put the new one in place (the partial unique index is the backstop if we still raced).
        at = now + decision.delay if decision.delay is not None else now
        intent_id = uow.execute(sa.insert(table_of(LeadNotificationIntent)).values(
            tenant_id=tenant_id, lead_id=lead_id, step=decision.step,
            status="scheduled" if decision.delay is not None else "pending", scheduled_for=at,
        ).returning(table_of(LeadNotificationIntent).c.id)).scalar_one()
        ids = _messages(uow, tenant_id=tenant_id, lead=lead, template=f"nudge_{decision.step}",
                        subject=f"lead-{lead_id}-intent-{intent_id}", lane="normal", at=at, intent_id=intent_id)
        uow.commit()
    return LeadEventResult("scheduled" if decision.delay is not None else "sent_now", lead_id, int(intent_id),
                           cancelled, at, ids, decision.step)


def record_lead_event(tenant_id: int, lead_id: int, event: str, now: datetime | None = None,
                      engine: Engine | None = None, attempts: int = 5) -> LeadEventResult:
    """Retry on a lost race: the re-run reads the other event's outcome and decides again (drop or supersede)."""
    now = now or datetime.now(UTC)
    for i in range(attempts):
        try:
            return _apply(tenant_id, lead_id, event, now, engine)
        except _LostRace:
            continue
        except sa.exc.IntegrityError as exc:
            if "lead_notification_intents_one_active_per_lead" not in str(exc) or i == attempts - 1:
                raise
    raise RuntimeError(f"lead {lead_id}: gave up after {attempts} concurrent updates")


def create_lead(tenant_id: int, recipient_ref: str, advisor_ref: str | None = None,
                engine: Engine | None = None) -> int:
    with UnitOfWork(engine) as uow:
        lid = uow.execute(sa.text(
            "INSERT INTO leads (tenant_id, recipient_ref, advisor_ref) VALUES (:t, :r, :a) RETURNING id"),
            {"t": tenant_id, "r": recipient_ref, "a": advisor_ref}).scalar_one()
        uow.commit()
    return int(lid)
