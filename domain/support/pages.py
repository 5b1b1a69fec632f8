"""Keyset pages for the lists support reads (newest first): a page is the rows older than `before`, or the rows
just newer than `after`; never an OFFSET, so page N costs what page 1 costs and a row inserted meanwhile shifts
nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
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
