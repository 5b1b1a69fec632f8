"""A test event to one webhook endpoint ("send test event"): a signed `outbox.test` event that goes the way every
order event goes — its envelope in `outbox_events`, ONE ledger row through `domain.ledger.write` (keyed by event id
and endpoint, as the order command's fan-out keys its rows), delivered by the lane workers with the same claim,
fencing, floor rules, breaker, signing and retries — to that endpoint only. After commit the caller runs
`domain.delivery.wakeups.enqueue_after_commit` with `Sent.owed`, as every producer does.

One owed test per endpoint at a time: a second ask while the first is still owed is refused (`TestOwed`), so a
button pressed ten times sends one test. The ask is kept in the audit log (who, when), in the same transaction.
Another tenant's endpoint is answered exactly as a missing one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.endpoints import store as endpoints
from domain.ledger.owed import OwedRow
from domain.ledger.write import NewMessage, ledger_messages
from domain.orders import sql
from domain.orders.envelope import Envelope

EVENT_TYPE: Final = endpoints.TEST_EVENT_TYPE
SCHEMA_VERSION: Final = 1
LANE: Final = "high"  # the lane of the order events' webhooks: the test meets what live traffic meets
ACTION: Final = "send test event to webhook endpoint"  # the audit log's word for it


@dataclass(frozen=True)
class Sent:
    endpoint_id: int
    event_id: uuid.UUID
    notification_id: int
    owed: tuple[OwedRow, ...]


@dataclass(frozen=True)
class Refused:
    """Nothing was written: `code` for the API (`not_found`, `endpoint_disabled`, `test_owed`), `words` for people."""

    code: str
    words: str
    notification_id: int | None = None  # test_owed: the row still owed


def send_test_event(tenant_id: int, endpoint_id: int, actor_ref: str, request_id: str = "",
                    engine: Engine | None = None, now: datetime | None = None) -> Sent | Refused:
    """One transaction: the endpoint locked (two asks take turns), then the refusals (missing or another tenant's,
    disabled, a test still owed), then the envelope, its one ledger row and the audit row."""
    occurred_at = now or datetime.now(UTC)
    with UnitOfWork(engine) as uow:
        enabled = endpoints.lock_for_test(uow, tenant_id, endpoint_id)
        if enabled is None:
            return Refused("not_found", "No such endpoint; nothing was sent.")
        if not enabled:
            return Refused("endpoint_disabled", f"Endpoint {endpoint_id} is disabled: enable it first; nothing was "
                                                "sent.")
        owed = uow.execute(sql.TEST_OWED, {"t": tenant_id, "i": endpoint_id, "tpl": EVENT_TYPE}).scalar()
        if owed is not None:
            return Refused("test_owed", f"A test event to endpoint {endpoint_id} is still on its way (message "
                                        f"{owed}); its outcome shows here. Nothing new was sent.", int(owed))
        revision = int(uow.execute(sql.NEXT_TEST_REVISION, {"t": tenant_id, "a": str(endpoint_id)}).scalar_one())
        env = Envelope(
            event_id=uuid.uuid4(), tenant_id=tenant_id, aggregate_type="endpoint", aggregate_id=str(endpoint_id),
            aggregate_revision=revision, event_type=EVENT_TYPE, schema_version=SCHEMA_VERSION,
            occurred_at=occurred_at, request_id=request_id or f"test-{uuid.uuid4().hex[:12]}", causation_id=None,
            actor_ref=actor_ref,
            payload={"endpoint_id": endpoint_id, "test": True,
                     "message": "A test event from Outbox: if its signature verifies, this endpoint is ready."})
        uow.execute(sql.INSERT_EVENT, {
            "e": env.event_id, "t": tenant_id, "aggregate_type": env.aggregate_type,
            "aggregate_id": env.aggregate_id, "rev": revision, "et": env.event_type,
            "schema_version": env.schema_version, "occurred_at": env.occurred_at, "request_id": env.request_id,
            "causation_id": None, "actor_ref": actor_ref, "payload": json.dumps(env.payload),
            "digest": env.digest})
        # The row as the order command's fan-out writes an endpoint's row: recipient, subject and key by event id
        # and endpoint (domain/orders/commands.py `_ledger_handoff`).
        [row] = ledger_messages(uow, [NewMessage(
            tenant_id=tenant_id, recipient=f"endpoint:{endpoint_id}", channel="webhook", lane=LANE,
            template=EVENT_TYPE, subject=f"event-{env.event_id}", payload=env.payload, event_id=env.event_id,
            endpoint_id=endpoint_id)])
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action=ACTION,
                       target=endpoints.target(endpoint_id))
        uow.commit()
    return Sent(endpoint_id, env.event_id, row.notification_id, (row.owed(),) if row.created else ())
