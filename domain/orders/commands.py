"""Order commands: ONE transaction for the revision, the envelope and its ledger rows, in two statements.

The policy's decision is the guarded update's WHERE (`policy.guard_for`): the update, the envelope and the endpoint
fan-out are one statement, the ledger rows and their NOTIFY a second (a cancel adds its audit row, with the
operator's note, as a third). The order is read only when the update matched nothing, to tell missing (or another
tenant's), stale and denied apart. Why so few statements: each one is a round trip inside the transaction that
holds the order's row lock (docs/scaling.md has the measured commit rates).

After commit (and only then) the caller runs `domain.delivery.wakeups.after_commit` to publish the refresh and enqueue
wake-ups; both are best-effort because PostgreSQL already holds the responsibility.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from domain import faults
from domain.access import actions
from domain.db import UnitOfWork
from domain.endpoints import store as endpoints
from domain.ledger.owed import OwedRow
from domain.ledger.write import NewMessage, ledger_messages
from domain.orders import sql
from domain.orders.audience import order_event_audience
from domain.orders.envelope import Envelope
from domain.orders.policy import Accept, Reject, decide_transition, guard_for
from domain.orders.views import ORDER_CANCEL, order_target  # the audit log's words, here and for the reads

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


def _ledger_handoff(uow: UnitOfWork, env: Envelope, customer_ref: str, order_id: int,
                   targets: list[int] | None) -> tuple[OwedRow, ...]:
    """The event's ledger rows, in one statement. `targets`: the tenant's endpoints that take this event (None: the
    tenant has none)."""
    subject = f"order-{order_id}-r{env.aggregate_revision}"
    messages: list[NewMessage] = []
    for msg in order_event_audience(env.event_type, customer_ref, env.tenant_id):
        # A tenant with endpoints of its own gets its webhook there, one row per endpoint that takes this event (and
        # none for a disabled one, or one that asked for other types); a tenant with none, at the system-wide
        # receiver.
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
    return tuple(row.owed() for row in ledger_messages(uow, messages) if row.created)


def _why_nothing_matched(uow: UnitOfWork, tenant_id: int, order_id: int, command: str,
                         expected_revision: int) -> Reject | NotFound:
    """The guarded update matched nothing: read the order (only now) and let the policy say why."""
    uow.rollback()
    row = uow.execute(sql.READ_ORDER, {"tenant_id": tenant_id, "order_id": order_id}).first()
    if row is None:
        return NotFound(order_id)  # missing, or another tenant's: the same answer
    decision = decide_transition(row.status, row.revision, command, expected_revision)
    if isinstance(decision, Accept):
        # The update saw another state than this read does: a concurrent command committed in between.
        return Reject("optimistic_conflict", row.revision, row.status, command)
    return decision


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
    note: str = "",
) -> CommandResult:
    """Two statements for the common case: the guarded update carrying the envelope and the endpoints
    (`sql.APPLY_COMMAND`), then the ledger rows (`ledger_messages`). The order is read only when nothing matched.

    A cancel cannot be undone and tells the customer: it is also kept in the audit log (who, when, `note`), one row
    in the same transaction — a third statement, on the rare path only."""
    # Generated once, before any retry: a retried request never mints a second logical event.
    event_id = event_id or uuid.uuid4()
    occurred_at = now or datetime.now(UTC)
    guard = guard_for(command)
    with UnitOfWork(engine) as uow:
        faults.hit("after_begin", plan)
        if guard is None:
            return _why_nothing_matched(uow, tenant_id, order_id, command, expected_revision)
        # Built before the update, for the revision it commits only at: a stale command's envelope is never written.
        env = Envelope(
            event_id=event_id, tenant_id=tenant_id, aggregate_type="order", aggregate_id=str(order_id),
            aggregate_revision=expected_revision + 1, event_type=guard.event_type,
            schema_version=SCHEMA_VERSION, occurred_at=occurred_at, request_id=request_id,
            causation_id=causation_id, actor_ref=actor_ref,
            # Minimal: identity and the new state. No amounts, no customer fields.
            payload={"order_id": order_id, "status": guard.to_status, "revision": expected_revision + 1},
        )
        matched = uow.fetch(sql.APPLY_COMMAND, {
            "to_status": guard.to_status, "t": tenant_id, "o": order_id, "expected": expected_revision,
            "from_statuses": list(guard.from_statuses), "e": env.event_id, "aggregate_type": env.aggregate_type,
            "aggregate_id": env.aggregate_id, "et": env.event_type, "schema_version": env.schema_version,
            "occurred_at": env.occurred_at, "request_id": env.request_id, "causation_id": env.causation_id,
            "actor_ref": env.actor_ref, "payload": json.dumps(env.payload), "digest": env.digest,
        })
        if not matched:
            # Missing, another tenant's, stale, or not allowed from its status (or a concurrent command committed
            # first: READ COMMITTED re-checked our WHERE on its row and matched nothing). Nothing was written.
            return _why_nothing_matched(uow, tenant_id, order_id, command, expected_revision)
        faults.hit("after_decision", plan)
        faults.hit("after_order_update", plan)
        applied = matched[0]
        owed = _ledger_handoff(uow, env, applied.customer_ref, order_id, endpoints.targets_from(applied.targets))
        if command == "cancel":
            actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action=ORDER_CANCEL,
                           target=order_target(order_id), note=note)
        faults.hit("after_handoff_insert", plan)
        faults.hit("before_commit", plan)
        uow.commit()
    return Committed(tenant_id, order_id, guard.to_status, expected_revision + 1, event_id, owed)


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
