"""Journey nudges: at most one live nudge per lead, always for the furthest step reached.

The decision is pure (`decide`): a step's rank is its position in `steps.JOURNEY_STEPS`. The database enforces the
invariant with the partial unique index `lead_notification_intents_one_active_per_lead`; `record_lead_event`
is the optimistic happy path and, when a concurrent event wins, re-runs the decision against fresh state — which
converges, because a re-read can only see the lead further along.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, is_deadlock
from domain.journeys import sql
from domain.journeys.decide import Drop, Lifecycle, UnknownEvent, decide
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.ledger.write import NewMessage, ledger_message, settle_unsent_where
from domain.settings import get_settings


@dataclass(frozen=True)
class LeadEventResult:
    outcome: str  # scheduled | sent_now | dropped | lifecycle | duplicate | unknown_event | not_found
    lead_id: int
    intent_id: int | None = None
    cancelled_intent_id: int | None = None
    scheduled_for: datetime | None = None
    notification_ids: tuple[int, ...] = ()
    current_step: str | None = None
    event_id: str | None = None
    reason: str | None = None  # why it was dropped: late | not_further
    decision: str | None = None  # for a duplicate: the first answer's outcome

    def answer(self) -> dict[str, Any]:
        """The stored answer a duplicate of this event gets back."""
        return {"outcome": self.outcome, "intent_id": self.intent_id, "cancelled_intent_id": self.cancelled_intent_id,
                "scheduled_for": self.scheduled_for.isoformat() if self.scheduled_for else None,
                "notification_ids": list(self.notification_ids), "current_step": self.current_step,
                "reason": self.reason}

    @classmethod
    def duplicate_of(cls, lead_id: int, event_id: str, a: dict[str, Any]) -> LeadEventResult:
        return cls("duplicate", lead_id, a.get("intent_id"), a.get("cancelled_intent_id"),
                   datetime.fromisoformat(a["scheduled_for"]) if a.get("scheduled_for") else None,
                   tuple(a.get("notification_ids") or ()), a.get("current_step"), event_id, a.get("reason"),
                   a.get("outcome"))


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


def _apply(tenant_id: int, lead_id: int, event: str, event_id: str, occurred_at: datetime | None, now: datetime,
           engine: Engine | None) -> LeadEventResult:
    with UnitOfWork(engine) as uow:
        lead = uow.execute(sql.READ_LEAD, {"t": tenant_id, "l": lead_id}).first()
        if lead is None:
            return LeadEventResult("not_found", lead_id)
        if event not in JOURNEY_STEPS and event not in LIFECYCLE_EVENTS:
            return LeadEventResult("unknown_event", lead_id, current_step=lead.current_step)
        # The event is recorded first: a concurrent duplicate waits on this row and then reads our answer.
        fresh = uow.execute(sql.RECORD_EVENT, {"t": tenant_id, "l": lead_id, "e": event_id, "ev": event,
                                               "o": occurred_at or now}).first()
        if fresh is None:
            prior = uow.execute(sql.PRIOR_ANSWER, {"t": tenant_id, "e": event_id}).one()
            if prior.lead_id != lead_id or prior.answer is None:
                return LeadEventResult("not_found", lead_id)  # an event id of another lead: no existence leak
            return LeadEventResult.duplicate_of(lead_id, event_id, prior.answer)
        result = _decide_and_write(uow, tenant_id, lead, event, occurred_at, now)
        result = replace(result, event_id=event_id)
        uow.execute(sql.KEEP_ANSWER, {"o": result.outcome, "a": json.dumps(result.answer()), "i": fresh.id})
        uow.commit()
    return result


def _decide_and_write(uow: UnitOfWork, tenant_id: int, lead: sa.Row[Any], event: str, occurred_at: datetime | None,
                      now: datetime) -> LeadEventResult:
    """Lateness is judged only on the producer's own clock (`occurred_at` given); events that say nothing of when
    are ordered by the journey alone, never by which of two concurrent requests the server saw first."""
    lead_id = lead.id
    decision = decide(event, lead.current_step, occurred_at, lead.last_step_at, get_settings().time_scale)
    if isinstance(decision, UnknownEvent):  # checked before; kept for the type
        return LeadEventResult("unknown_event", lead_id, current_step=lead.current_step)
    if isinstance(decision, Drop):
        return LeadEventResult("dropped", lead_id, current_step=lead.current_step, reason=decision.reason)
    if isinstance(decision, Lifecycle):
        ids = _messages(uow, tenant_id=tenant_id, lead=lead, template=event, subject=f"lead-{lead_id}-{event}",
                        lane="high", at=now, intent_id=None)
        return LeadEventResult("lifecycle", lead_id, notification_ids=ids, current_step=lead.current_step)
    # Forward step. Move the lead only if nobody moved it since we read it (optimistic guard) ...
    moved = uow.execute(sql.MOVE_LEAD, {"new": decision.step, "at": occurred_at, "l": lead_id,
                                        "old": lead.current_step}).first()  # NULL: kept
    if moved is None:
        raise _LostRace()
    # ... tear down the live nudge and its owed messages. The messages first, then the intent: the same order
    # as a worker settling one of them (row, then intent), so the two never wait on each other in a cycle.
    # Only rows no live lease holds: a message handed to a worker is recorded truthfully (sent or not) by that
    # worker, and a later claim suppresses it as superseded. A send still in flight after its lease ran out is
    # settled here; if it was accepted after all, the worker records the late truth (write.accept_truth).
    # The intents are ended just below ("superseded by …"), so the ledger does not close them itself.
    settle_unsent_where(uow, intent_ids=sql.live_intents(lead_id), reason="superseded", close_intents=False)
    cancelled = uow.execute(sql.CANCEL_LIVE_INTENTS, {
        "l": lead_id, "why": f"superseded by {decision.step} at {now:%Y-%m-%d %H:%M:%S} UTC"}).scalar()
    # ... and put the new one in place (the partial unique index is the backstop if we still raced).
    at = now + decision.delay if decision.delay is not None else now
    intent_id = uow.execute(sql.INSERT_INTENT.values(
        tenant_id=tenant_id, lead_id=lead_id, step=decision.step,
        status="scheduled" if decision.delay is not None else "pending", scheduled_for=at,
    )).scalar_one()
    ids = _messages(uow, tenant_id=tenant_id, lead=lead, template=f"nudge_{decision.step}",
                    subject=f"lead-{lead_id}-intent-{intent_id}", lane="normal", at=at, intent_id=intent_id)
    return LeadEventResult("scheduled" if decision.delay is not None else "sent_now", lead_id, int(intent_id),
                           cancelled, at, ids, decision.step)


def record_lead_event(tenant_id: int, lead_id: int, event: str, now: datetime | None = None,
                      engine: Engine | None = None, attempts: int = 8, *, event_id: str | None = None,
                      occurred_at: datetime | None = None) -> LeadEventResult:
    """Idempotent by `event_id` (generated when the caller gives none). Retries a lost race: the re-run reads the
    other event's outcome and decides again (drop or supersede)."""
    now = now or datetime.now(UTC)
    event_id = event_id or f"gen-{uuid.uuid4().hex}"
    for i in range(attempts):
        try:
            return _apply(tenant_id, lead_id, event, event_id, occurred_at, now, engine)
        except _LostRace:
            continue
        except sa.exc.IntegrityError as exc:
            if "lead_notification_intents_one_active_per_lead" not in str(exc) or i == attempts - 1:
                raise
        except sa.exc.OperationalError as exc:  # the victim of a deadlock (a supersede beside a worker's batch)
            if not is_deadlock(exc) or i == attempts - 1:
                raise
    raise RuntimeError(f"lead {lead_id}: gave up after {attempts} concurrent updates")


def create_lead(tenant_id: int, recipient_ref: str, advisor_ref: str | None = None,
                engine: Engine | None = None) -> int:
    with UnitOfWork(engine) as uow:
        lid = uow.execute(sql.INSERT_LEAD, {"t": tenant_id, "r": recipient_ref, "a": advisor_ref}).scalar_one()
        uow.commit()
    return int(lid)
