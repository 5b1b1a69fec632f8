"""Order commands as the app runs them: an approve of an authorized order (`approve`), one that first sets
the order back to authorized (`authorize_and_approve`), and a tenant's authorized orders."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from domain import faults
from domain.db import get_engine
from domain.orders.commands import Committed, execute_order_command


def approve(order_id: int = 913, tenant_id: int = 42, plan: faults.FaultPlan | None = None,
            event_id: uuid.UUID | None = None) -> Committed:
    """Approve an order that is authorized (as the seed leaves it); `plan` arms faults, `event_id` sets the
    event id."""
    with get_engine().connect() as c:
        rev = c.execute(sa.text("SELECT revision FROM orders WHERE id = :o"), {"o": order_id}).scalar_one()
    r = execute_order_command(tenant_id=tenant_id, order_id=order_id, command="approve", expected_revision=rev,
                              actor_ref="test", request_id=f"req-{uuid.uuid4().hex[:6]}", plan=plan,
                              event_id=event_id)
    assert isinstance(r, Committed), r
    return r


def authorize_and_approve(order_id: int = 913) -> Committed:
    """Approve order `order_id` of tenant 42, first setting it back to authorized if it is not."""
    with get_engine().connect() as c:
        rev = c.execute(sa.text("SELECT revision FROM orders WHERE id = :o"), {"o": order_id}).scalar_one()
        c.execute(sa.text("UPDATE orders SET status = 'authorized' WHERE id = :o AND status <> 'authorized'"),
                  {"o": order_id})
        c.commit()
    r = execute_order_command(tenant_id=42, order_id=order_id, command="approve", expected_revision=rev,
                              actor_ref="test", request_id=f"req-{uuid.uuid4().hex[:6]}")
    assert isinstance(r, Committed)
    return r


def orders_of(tenant_id: int) -> list[int]:
    with get_engine().connect() as c:
        return [int(x) for x in c.execute(sa.text(
            "SELECT id FROM orders WHERE tenant_id = :t AND status = 'authorized' ORDER BY id"), {"t": tenant_id})
            .scalars()]
