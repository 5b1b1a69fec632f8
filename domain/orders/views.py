"""Order read models (tenant-scoped: the tenant comes from the authenticated principal)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.orders import sql
from domain.orders.envelope import Envelope

ORDER_CANCEL = "order cancel"  # the audit log's word for it (operator_actions.action)


def order_target(order_id: int) -> str:
    """How the audit log names an order (`actions.on_target` reads it back for the order's page)."""
    return f"order {order_id}"


def get_order(tenant_id: int, order_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.GET_ORDER, {"t": tenant_id, "o": order_id}).first()
    return dict(r._mapping) if r else None


def last_change(tenant_id: int, order_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    """Who moved the order to its current revision, what they did and when: the event of that revision (one row
    by the one-event-per-revision key). None: the order is still at the revision it entered the system with."""
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.LAST_CHANGE, {"t": tenant_id, "o": order_id}).first()
    return dict(r._mapping) if r else None


def order_version(tenant_id: int, order_id: int, engine: Engine | None = None) -> str | None:
    """What the order page shows, in one short value that moves whenever any of it changes: the order's revision
    and a digest of its ledger rows (a handful, by the `order_id` index). None: no such order for this tenant.
    Open views compare it with what they rendered (dashboard/live.py); read it BEFORE the data it stands for."""
    with UnitOfWork(engine) as uow:
        return uow.execute(sql.ORDER_VERSION, {"t": tenant_id, "o": order_id}).scalar()


def order_page(tenant_id: int, order_id: int, engine: Engine | None = None, history_rows: int = 21
               ) -> tuple[str | None, dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """Everything the order page shows, in one transaction (one pool checkout, one BEGIN): its version first
    (`order_version`), then the order (with the newest `history_rows` of its changes, `order_history`), who last
    changed it (`last_change`) and its ledger rows. A live view
    reloads this on every push, so one checkout instead of four is most of the reload's cost."""
    with UnitOfWork(engine) as uow:
        params = {"t": tenant_id, "o": order_id}
        version = uow.execute(sql.ORDER_VERSION, params).scalar()
        r = uow.execute(sql.GET_ORDER, params).first()
        if r is None:
            return version, None, None, []
        change = uow.execute(sql.LAST_CHANGE, params).first()
        notes = as_dicts(uow.execute(sql.ORDER_NOTIFICATIONS, params))
        history = as_dicts(uow.execute(sql.ORDER_HISTORY, _history_params(tenant_id, order_id, history_rows)))
    return version, {**dict(r._mapping), "history": history}, dict(change._mapping) if change else None, notes


def order_history(tenant_id: int, order_id: int, limit: int, before: int | None = None, after: int | None = None,
                  engine: Engine | None = None) -> list[dict[str, Any]]:
    """Every change of the order — who (`actor_ref`), what (`event_type`), when, and the note a cancel was given —
    newest first by revision, `limit` rows older than `before` or just newer than `after` (those oldest first: a
    keyset page, as domain/support/pages.py reads one). Another tenant's order has no history here."""
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.ORDER_HISTORY, _history_params(tenant_id, order_id, limit, before, after)))


def _history_params(tenant_id: int, order_id: int, limit: int, before: int | None = None,
                    after: int | None = None) -> dict[str, Any]:
    return {"t": tenant_id, "o": str(order_id), "g": order_target(order_id), "cancel": ORDER_CANCEL,
            "b": before, "a": after, "l": limit}


def orders_version(tenant_id: int, engine: Engine | None = None) -> str:
    """The tenant's orders list in one value: how many orders, and the sum of their revisions (a revision only
    grows, so any command moves it; a new order moves the count). One pass over the tenant's entries of the
    (tenant_id, id) index; timestamps would not do (two commits can land out of `now()` order)."""
    with UnitOfWork(engine) as uow:
        return str(uow.execute(sql.ORDERS_VERSION, {"t": tenant_id}).scalar_one())


def list_orders(
    tenant_id: int, status: str | None = None, limit: int = 50, before: int | None = None, after: int | None = None,
    engine: Engine | None = None
) -> list[dict[str, Any]]:
    """Newest first: the orders older than `before`, or (oldest first) just newer than `after` — a keyset page."""
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.LIST_ORDERS, {"t": tenant_id, "s": status, "l": limit, "b": before,
                                                      "a": after}))


def get_event(tenant_id: int, event_id: uuid.UUID, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        ev = uow.execute(sql.GET_EVENT, {"t": tenant_id, "e": event_id}).first()
        if ev is None:
            return None
        ledger = as_dicts(uow.execute(sql.EVENT_NOTIFICATIONS, {"t": tenant_id, "e": event_id}))
    out = dict(ev._mapping)
    out["notifications"] = ledger
    return out


def envelope_for(event_id: uuid.UUID, engine: Engine | None = None) -> Envelope:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.ENVELOPE, {"e": event_id}).one()
    return Envelope(**dict(r._mapping))


def order_notifications(tenant_id: int, order_id: int, engine: Engine | None = None) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.ORDER_NOTIFICATIONS, {"t": tenant_id, "o": order_id}))
