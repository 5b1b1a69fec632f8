"""The ledger's reads as support shows them: each owed (QUEUED) row carries what holds it, from delivery's read model
(domain/delivery/state.py: lane paused, breaker open, balance short, quiet hours, retrying, being sent now,
overdue), read in one statement per page; rows that are not owed keep the ledger's own answer. The ledger page, the
recipient page and its API, a message's API and `outbox why` read through here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from domain.delivery.state import with_states
from domain.ledger import views as ledger_views


def ledger(tenant_id: int, f: ledger_views.LedgerFilter, now: datetime,
           engine: Engine | None = None) -> dict[str, Any]:
    data = ledger_views.ledger(tenant_id, f, engine)
    with_states(data["rows"], now, tenant_id, engine)
    return data


def recipient_messages(tenant_id: int, recipient_id: int, now: datetime, limit: int = 100,
                       before_id: int | None = None, engine: Engine | None = None) -> dict[str, Any] | None:
    why = ledger_views.recipient_messages(tenant_id, recipient_id, now, limit, before_id, engine)
    if why is not None:
        with_states(why["messages"], now, tenant_id, engine)
    return why


def notification_detail(tenant_id: int, notification_id: int, now: datetime,
                        engine: Engine | None = None) -> dict[str, Any] | None:
    n = ledger_views.notification_detail(tenant_id, notification_id, now, engine)
    if n is not None:
        with_states([n], now, tenant_id, engine)
    return n
