"""Keyset pages of every list (domain/support/pages.py) through the real ASGI API: `?limit=&cursor=` →
`{items, next_cursor}` on orders, recipients, leads and campaigns.

Invariants: walking `next_cursor` returns every row of the tenant exactly once, newest first, and null at the end;
another tenant's rows never appear; a bad cursor or limit is a 422 `invalid_request` naming the field and changes
nothing; a dashboard page's `before`/`after` neighbours agree with the API's pages.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.support import pages


def ids(sql: str, **params: Any) -> list[int]:
    with get_engine().connect() as c:
        return [int(i) for i in c.execute(sa.text(sql), params).scalars()]


async def walk(client, key, path: str, limit: int, **params: Any) -> list[Any]:  # type: ignore[no-untyped-def]
    seen: list[Any] = []
    cursor = None
    for _ in range(500):
        r = await client.get(path, params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})},
                             headers=key)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["items"]) <= limit
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("next_cursor never ended")


@pytest.mark.parametrize(("path", "key_of", "table"), [
    ("/api/v1/orders", "id", "orders"), ("/api/v1/recipients", "recipient_id", "recipients"),
    ("/api/v1/leads", "id", "leads")])
async def test_every_list_walks_each_row_once_newest_first(client, key42, key7, path, key_of, table):
    """Invariant: the cursor walk is the tenant's whole table, newest first, each row once; tenant 7 sees none of
    tenant 42's rows."""
    walked = [item[key_of] for item in await walk(client, key42, path, 3)]
    assert walked == ids(f"SELECT id FROM {table} WHERE tenant_id = 42 ORDER BY id DESC")
    other = [item[key_of] for item in await walk(client, key7, path, 50)]
    assert other == ids(f"SELECT id FROM {table} WHERE tenant_id = 7 ORDER BY id DESC")
    assert not set(other) & set(walked)


async def test_campaigns_and_filters_page_the_same_way(client, key42):
    """Invariant: campaigns page newest first, and a filter (order status, a lead's ref) pages within itself."""
    for n in range(3):
        r = await client.post("/api/v1/campaigns", headers=key42, json={
            "name": f"Paged {n}", "segment": "all_reachable", "template": "offer", "channel": "email"})
        assert r.status_code == 202, r.text
    walked = [c["campaign_id"] for c in await walk(client, key42, "/api/v1/campaigns", 2)]
    assert walked == ids("SELECT id FROM campaigns WHERE tenant_id = 42 ORDER BY id DESC") and len(walked) >= 3
    assert all("name" in c and "suppressed" in c for c in await walk(client, key42, "/api/v1/campaigns", 2))
    authorized = [o["id"] for o in await walk(client, key42, "/api/v1/orders", 2, status="authorized")]
    assert authorized == ids("SELECT id FROM orders WHERE tenant_id = 42 AND status = 'authorized' ORDER BY id DESC")
    leads = await walk(client, key42, "/api/v1/leads", 1, recipient="cust-003")
    assert [ld["recipient_ref"] for ld in leads] == ["cust-003"] * len(leads) and leads


@pytest.mark.parametrize("params", [{"cursor": "abc"}, {"cursor": "0"}, {"cursor": str(2**63)}, {"limit": "0"},
                                    {"limit": "501"}, {"limit": "x"}])
@pytest.mark.parametrize("path", ["/api/v1/orders", "/api/v1/recipients", "/api/v1/leads", "/api/v1/campaigns"])
async def test_a_bad_cursor_or_limit_is_a_clear_422(client, key42, path, params):
    """Invariant: a cursor or limit the API does not take is 422 `invalid_request` naming the field — never a 500,
    never a silent first page."""
    r = await client.get(path, params=params, headers=key42)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_request" and body["field"] == next(iter(params)) and body["request_id"]


def test_a_page_knows_its_neighbours_both_ways(db):
    """Invariant: from any page, `after` its first row gives back the page before it (the dashboard's Newer),
    and `before` its last row the page after it (Older) — the two directions meet with no row lost."""
    first = pages.orders(42, limit=4)
    assert first.has_older and not first.has_newer
    second = pages.orders(42, limit=4, before=first.rows[-1]["id"])
    assert second.has_newer and [o["id"] for o in second.rows] == ids(
        "SELECT id FROM orders WHERE tenant_id = 42 AND id < :b ORDER BY id DESC LIMIT 4", b=first.rows[-1]["id"])
    back = pages.orders(42, limit=4, after=second.rows[0]["id"])
    assert [o["id"] for o in back.rows] == [o["id"] for o in first.rows] and not back.has_newer
