"""Order commands: decide, then ONE transaction for the revision, the envelope and its ledger rows.

After commit (and only then) the caller runs `domain.wakeups.after_commit` to publish the refresh and enqueue wake-ups;
both are best-effort because PostgreSQL already holds the responsibility.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from domain import faults
from domain.db import UnitOfWork
from domain.endpoints import store as endpoints
from domain.ledger.owed import OwedRow
from domain.ledger.write import NewMessage, ledger_message
from domain.orders import sql
from domain.orders.audience import order_event_audience
from domain.orders.envelope import Envelope
from domain.orders.policy import Accept, Reject, decide_transition

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Committed:
    tenant_id: int
    order_id: int
    status: str
    revision: int
    event_id: uuid.UUID
    owed: tuple[OwedRow, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class NotFound:
    order_id: int


# A refusal is the policy's own decision value (`policy.Reject`): what was asked, and the state it met.
CommandResult = Committed | Reject | NotFound


def _insert_handoff(uow: UnitOfWork, env: Envelope, customer_ref: str, order_id: int) -> tuple[OwedRow, ...]:
    uow.execute(sql.INSERT_EVENT.values(
        event_id=env.event_id, tenant_id=env.tenant_id, aggregate_type=env.aggregate_type,
        aggregate_id=env.aggregate_id, aggregate_revision=env.aggregate_revision, event_type=env.event_type,
        schema_version=env.schema_version, occurred_at=env.occurred_at, request_id=env.request_id,
        causation_id=env.causation_id, actor_ref=env.actor_ref, payload=env.payload, digest=env.digest,
    ))
    owed: list[OwedRow] = []
    subject = f"order-{order_id}-r{env.aggregate_revision}"
    audience = order_event_audience(env.event_type, customer_ref, env.tenant_id)
    # A tenant with endpoints of its own gets its webhook there, one row per endpoint that takes this event (and
    # none for a disabled one, or one that asked for other types); a tenant with none, at the system-wide receiver.
    targets = endpoints.targets(uow, env.tenant_id, env.event_type) if any(
        m.channel == "webhook" for m in audience) else None
    messages: list[NewMessage] = []
    for msg in audience:
        if msg.channel == "webhook" and targets is not None:
            # The key is the event and the endpoint: a retried command never owes an endpoint the same event twice.
            messages += [NewMessage(
                tenant_id=env.tenant_id, recipient=f"endpoint:{ep}", channel=msg.channel, lane=msg.lane,
                template=msg.template, subject=f"event-{env.event_id}", payload=env.payload, event_id=env.event_id,
                order_id=order_id, endpoint_id=ep) for ep in targets]
            continue
        messages.append(NewMessage(
            tenant_id=env.tenant_id, recipient=msg.recipient, channel=msg.channel, lane=msg.lane,
            template=msg.template, subject=subject, payload=env.payload, event_id=env.event_id, order_id=order_id))
    for m in messages:
        row = ledger_message(uow, m)
        if row.created:
            owed.append(row.owed())
    return tuple(owed)


def execute_order_command(
    *,
    tenant_id: int,
    order_id: int,
    command: str,
    expected_revision: int,
    actor_ref: str,
    request_id: str,
    event_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
    plan: faults.FaultPlan | None = None,
    engine: Engine | None = None,
    now: datetime | None = None,
) -> CommandResult:
    # Generated once, before any retry: a retried request never mints a second logical event.
    event_id = event_id or uuid.uuid4()
    occurred_at = now or datetime.now(UTC)
    with UnitOfWork(engine) as uow:
        faults.hit("after_begin", plan)
        row = uow.execute(sql.READ_ORDER, {"tenant_id": tenant_id, "order_id": order_id}).first()
        if row is None:
            return NotFound(order_id)
        decision = decide_transition(row.status, row.revision, command, expected_revision)
        if not isinstance(decision, Accept):
            return decision
        faults.hit("after_decision", plan)
        updated = uow.execute(sql.UPDATE_ORDER_GUARDED, {
            "to_status": decision.to_status, "tenant_id": tenant_id, "order_id": order_id,
            "expected_revision": expected_revision,
        }).first()
        if updated is None:
            # A concurrent command committed first; READ COMMITTED re-checked our WHERE and matched nothing.
            uow.session.rollback()
            current = uow.execute(sql.READ_ORDER, {"tenant_id": tenant_id, "order_id": order_id}).one()
            return Reject("optimistic_conflict", current.revision, current.status, command)
        faults.hit("after_order_update", plan)
        env = Envelope(
            event_id=event_id, tenant_id=tenant_id, aggregate_type="order", aggregate_id=str(order_id),
            aggregate_revision=decision.new_revision, event_type=decision.event_type,
            schema_version=SCHEMA_VERSION, occurred_at=occurred_at, request_id=request_id,
            causation_id=causation_id, actor_ref=actor_ref,
            # Minimal: identity and the new state. No amounts, no customer fields.
            payload={"order_id": order_id, "status": decision.to_status, "revision": decision.new_revision},
        )
        owed = _insert_handoff(uow, env, row.customer_ref, order_id)
        faults.hit("after_handoff_insert", plan)
        faults.hit("before_commit", plan)
        uow.commit()
    return Committed(tenant_id, order_id, decision.to_status, decision.new_revision, event_id, owed)


def create_order(
    *, tenant_id: int, customer_ref: str, amount_cents: int, currency: str, engine: Engine | None = None
) -> int:
    with UnitOfWork(engine) as uow:
        oid = uow.execute(sql.INSERT_ORDER.values(
            tenant_id=tenant_id, status="authorized", revision=1, base_revision=1,
            customer_ref=customer_ref, amount_cents=amount_cents, currency=currency.upper(),
        )).scalar_one()
        uow.commit()
    return int(oid)
