"""Order read models (tenant-scoped: the tenant comes from the authenticated principal)."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.ledger.views import NOTIFICATION_COLUMNS
from domain.orders.envelope import Envelope


def get_order(tenant_id: int, order_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            "SELECT id, tenant_id, status, revision, customer_ref, amount_cents, currency, created_at, updated_at "
            "FROM orders WHERE tenant_id = :t AND id = :o"), {"t": tenant_id, "o": order_id}).first()
    return dict(r._mapping) if r else None


def order_version(tenant_id: int, order_id: int, engine: Engine | None = None) -> str | None:
    """What the order page shows, in one short value that moves whenever any of it changes: the order's revision
    and a digest of its ledger rows (a handful, by the `order_id` index). None: no such order for this tenant.
    Open views compare it with what they rendered (dashboard/live.py); read it BEFORE the data it stands for."""
    with UnitOfWork(engine) as uow:
        return uow.execute(sa.text(
            "SELECT o.revision || ':' || coalesce((SELECT md5(string_agg(n::text, ',' ORDER BY n.id)) "
            "FROM notifications n WHERE n.tenant_id = o.tenant_id AND n.order_id = o.id), '') "
            "FROM orders o WHERE o.tenant_id = :t AND o.id = :o"), {"t": tenant_id, "o": order_id}).scalar()


def orders_version(tenant_id: int, engine: Engine | None = None) -> str:
    """The tenant's orders list in one value: how many orders, and the sum of their revisions (a revision only
    grows, so any command moves it; a new order moves the count). One pass over the tenant's entries of the
    (tenant_id, id) index; timestamps would not do (two commits can land out of `now()` order)."""
    with UnitOfWork(engine) as uow:
        return str(uow.execute(sa.text(
            "SELECT count(*) || ':' || coalesce(sum(revision), 0) FROM orders WHERE tenant_id = :t"),
            {"t": tenant_id}).scalar_one())


def list_orders(
    tenant_id: int, status: str | None = None, limit: int = 50, engine: Engine | None = None
) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sa.text(
            "SELECT id, status, revision, customer_ref, amount_cents, currency, updated_at FROM orders "
            "WHERE tenant_id = :t AND (CAST(:s AS text) IS NULL OR status = :s) ORDER BY id LIMIT :l"),
            {"t": tenant_id, "s": status, "l": limit}))


def get_event(tenant_id: int, event_id: uuid.UUID, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        ev = uow.execute(sa.text(
            "SELECT event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
            "schema_version, occurred_at, request_id, causation_id, actor_ref, payload, digest "
            "FROM outbox_events WHERE tenant_id = :t AND event_id = :e"), {"t": tenant_id, "e": event_id}).first()
        if ev is None:
            return None
        ledger = as_dicts(uow.execute(sa.text(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE n.tenant_id = :t AND n.event_id = :e "
            "ORDER BY n.id"), {"t": tenant_id, "e": event_id}))
    out = dict(ev._mapping)
    out["notifications"] = ledger
    return out


def envelope_for(event_id: uuid.UUID, engine: Engine | None = None) -> Envelope:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            "SELECT event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
            "schema_version, occurred_at, request_id, causation_id, actor_ref, payload FROM outbox_events "
            "WHERE event_id = :e"), {"e": event_id}).one()
    return Envelope(**dict(r._mapping))


def order_notifications(tenant_id: int, order_id: int, engine: Engine | None = None) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sa.text(
            f"SELECT {NOTIFICATION_COLUMNS}, e.aggregate_revision FROM notifications n "
            "JOIN outbox_events e ON e.event_id = n.event_id "
            "WHERE n.tenant_id = :t AND n.order_id = :o ORDER BY n.id DESC LIMIT 20"),
            {"t": tenant_id, "o": order_id}))
