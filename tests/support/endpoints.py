"""A tenant's webhook endpoints: one created (enabled or not), its row, and a public URL that is only
matched."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.endpoints import store

PUBLIC = "http://93.184.216.34/outbox-hooks"  # a public literal (never sent to: only matching is checked with it)


def endpoint(tenant_id: int, url: str, types: list[str] | None = None, enabled: bool = True) -> dict[str, Any]:
    e = store.create(tenant_id, url, "test", types, "test")
    if not enabled:
        store.set_enabled(tenant_id, e["id"], False, "support:dana")
    return e


def endpoint_row(endpoint_id: int) -> Any:
    with get_engine().connect() as c:
        return c.execute(sa.text("SELECT * FROM webhook_endpoints WHERE id = :i"), {"i": endpoint_id}).one()
