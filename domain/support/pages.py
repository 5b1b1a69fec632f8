"""Keyset pages for the lists support reads (newest first): a page is the rows older than `before`, or the rows
just newer than `after`; never an OFFSET, so page N costs what page 1 costs and a row inserted meanwhile shifts
nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from domain.access import actions as operator_actions
from domain.campaigns import views as campaign_views
from domain.db import UnitOfWork, as_dicts
from domain.endpoints import store as endpoint_store
from domain.journeys import views as journey_views
from domain.ledger import recipients as ledger_recipients
from domain.orders import views as order_views
from domain.support import sql


@dataclass(frozen=True)
class Keyset:
    rows: list[dict[str, Any]]
    has_older: bool
    has_newer: bool


def keyset(rows: list[dict[str, Any]], limit: int, before: int | None, after: int | None) -> Keyset:
    """Rows read with LIMIT limit+1 (newest first, or oldest first for an `after` page) → one page, newest first,
    and whether there is a page on each side. Pure."""
    more = len(rows) > limit
    page = rows[:limit]
    if after is not None:
        return Keyset(page[::-1], has_older=True, has_newer=more)
    return Keyset(page, has_older=more, has_newer=before is not None)


def campaign_messages(tenant_id: int, campaign_id: int, limit: int = 50, before: int | None = None,
                      after: int | None = None, engine: Engine | None = None) -> Keyset:
    with UnitOfWork(engine) as uow:
        rows = as_dicts(uow.execute(sql.CAMPAIGN_MESSAGES, {"t": tenant_id, "c": campaign_id, "b": before,
                                                             "a": after, "l": limit + 1}))
    return keyset(rows, limit, before, after)


# Every other list reads its own room's keyset statement with one row more than a page; here it becomes a page.

def orders(tenant_id: int, status: str | None = None, limit: int = 50, before: int | None = None,
           after: int | None = None) -> Keyset:
    return keyset(order_views.list_orders(tenant_id, status, limit + 1, before, after), limit, before, after)


def order_history(tenant_id: int, order_id: int, limit: int = 20, before: int | None = None,
                  after: int | None = None) -> Keyset:
    """An order's changes, a page at a time (keyset on the revision)."""
    return keyset(order_views.order_history(tenant_id, order_id, limit + 1, before, after), limit, before, after)


def recipients(tenant_id: int, query: str = "", limit: int = 50, before: int | None = None,
               after: int | None = None) -> Keyset:
    return keyset(ledger_recipients.list_recipients(tenant_id, query, limit + 1, before, after), limit, before, after)


def leads(tenant_id: int, query: str = "", step: str | None = None, limit: int = 50, before: int | None = None,
          after: int | None = None) -> Keyset:
    rows = journey_views.list_leads(tenant_id, limit + 1, before, after, query, step)
    return keyset(rows, limit, before, after)


def campaigns(tenant_id: int, channel: str | None = None, limit: int = 50, before: int | None = None,
              after: int | None = None) -> Keyset:
    rows = [{**c, "id": c["campaign_id"]}
            for c in campaign_views.list_campaigns(tenant_id, limit + 1, before, after, channel)]
    return keyset(rows, limit, before, after)


def actions(tenant_id: int | None, limit: int = 50, before: int | None = None, after: int | None = None) -> Keyset:
    return keyset(operator_actions.recent(tenant_id, limit + 1, before, after), limit, before, after)


def endpoints(tenant_id: int, limit: int = 50, before: int | None = None, after: int | None = None) -> Keyset:
    return keyset(endpoint_store.list_endpoints(tenant_id, limit + 1, before, after), limit, before, after)


def next_cursor(page: Keyset) -> str | None:
    """The API's `next_cursor`: the last row's id while an older page exists (read it back as `cursor`). Pure."""
    return str(page.rows[-1]["id"]) if page.has_older and page.rows else None
