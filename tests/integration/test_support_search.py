"""Find anything by anything, and one page per message — through the real ASGI app on real PostgreSQL.

Invariants: every kind of query (ref, name, phone in any spelling, email in any case, message id, `#id`, job id,
provider reference, event id, order number) finds its row and answers in plain words; another tenant's row looks
exactly like no row (same status, same body); hostile queries (NUL, control characters, 10 kB) get a clear 4xx and
change nothing; the message page shows every attempt with status, latency, excerpt and next retry, the charge and
the refund; keyset pages cover every row exactly once; the CSV export holds no phone or email.
"""

from __future__ import annotations

import asyncio
import csv
import io
import uuid
from datetime import UTC, datetime

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Fail, Retry, Succeeded


def one(sql: str, **params):  # type: ignore[no-untyped-def]
    with get_engine().connect() as c:
        return c.execute(sa.text(sql), params).scalar()


def snapshot() -> tuple[object, ...]:
    """What a read must never change: row counts and the sum of every balance."""
    return (*(one(f"SELECT count(*) FROM {t}") for t in ("notifications", "notification_attempts", "recipients",
                                                         "balance_entries", "operator_actions")),
            one("SELECT sum(balance_cents) FROM balances"))


async def _send(client, key, rid: int, channel: str = "sms", period: str | None = None) -> int:  # type: ignore[no-untyped-def]
    r = await client.post("/api/v1/notifications", headers=key, json={
        "recipient_id": rid, "channel": channel, "template": "offer", "data": {"headline": "10% off"},
        "subject_period": period or uuid.uuid4().hex})
    assert r.status_code == 201, r.text
    return int(r.json()["notification_id"])


def _rid(tenant: int, ref: str) -> int:
    return int(one("SELECT id FROM recipients WHERE tenant_id = :t AND ref = :r", t=tenant, r=ref))


async def _search(client, key, q: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    r = await client.get("/api/v1/search", params={"q": q}, headers=key)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _hits(answer: dict, kind: str) -> list:  # type: ignore[type-arg]
    return [h for h in answer["items"] if h["kind"] == kind]


async def test_every_kind_of_query_finds_its_row(client, key42):
    """Each query kind the UI shows finds the recipient or the message it names (the issue's list)."""
    asha, cust = _rid(42, "cust-kolkata"), _rid(42, "cust-001")  # cust-001 keeps no quiet hours: claims send
    nid = await _send(client, key42, cust, "email")
    (r,) = await asyncio.to_thread(lambda: [long_way.claim(nid, 30, datetime.now(UTC), "t")])
    assert isinstance(r, plan.Ready)
    long_way.record(r.claim, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=201,
                    latency_ms=12.0, provider_reference="email-88753550ad4f", excerpt='{"id": "email-88753550ad4f"}')
    for q, matched in (("cust-kolkata", "ref"), ("Asha", "name"), ("asha rao", "name"), ("+919800000001", "phone"),
                       ("+91 98000 00001", "phone"), ("919800000001", "phone"), ("ASHA@example.test", "email")):
        people = _hits(await _search(client, key42, q), "recipient")
        assert [(h["id"], h["matched_by"]) for h in people] == [(asha, matched)], q
        assert "Heard from us today" in people[0]["answer"] and people[0]["href"] == f"/recipients/{asha}"
        assert "+91" not in str(people) and "@" not in str(people)  # the answer never repeats a contact point
        body = await client.post("/api/v1/search", json={"q": q}, headers=key42)  # the query out of the URL
        assert body.status_code == 200 and [h["id"] for h in _hits(body.json(), "recipient")] == [asha], q
    for q, matched in ((str(nid), "message id"), (f"#{nid}", "message id"), (f"n-{nid}", "message id"),
                       ("email-88753550ad4f", "provider reference")):
        msgs = _hits(await _search(client, key42, q), "message")
        assert [(h["id"], h["matched_by"]) for h in msgs] == [(nid, matched)], q
        assert msgs[0]["answer"] == "sent; the provider has not confirmed delivery yet"
        assert msgs[0]["href"] == f"/messages/{nid}"
    # An order number, and an order's event id.
    order = _hits(await _search(client, key42, "913"), "order")
    assert [(h["id"], h["status"]) for h in order] == [(913, "authorized")]
    ok = await client.post("/api/v1/orders/913/approve", headers=key42,
                           json={"expected_revision": 17, "request_id": "req-search"})
    assert ok.status_code == 200, ok.text
    ev = ok.json()["event_id"]
    found = await _search(client, key42, ev)
    assert [h["id"] for h in _hits(found, "event")] == [ev]
    assert _hits(found, "message") and all(h["matched_by"] == "event id" for h in _hits(found, "message"))
    assert found["kinds"] == ["event id"]


async def test_another_tenants_rows_look_exactly_like_no_rows(client, key42, key7):
    """Tenant isolation: tenant 7 searching tenant 42's phone, email, ref, message id, provider reference, order
    and event gets exactly what a query for nothing gets; and tenant 42's message page is a 404 like a missing id."""
    asha = _rid(42, "cust-kolkata")
    nid = await _send(client, key42, asha, "email")
    ok = await client.post("/api/v1/orders/913/approve", headers=key42,
                           json={"expected_revision": 17, "request_id": "req-iso"})
    ev = ok.json()["event_id"]
    for q in ("+919800000001", "asha@example.test", "cust-kolkata", "Asha", str(nid), f"#{nid}", f"n-{nid}", "913",
              ev):
        theirs, nothing = await _search(client, key7, q), await _search(client, key7, "zz-" + uuid.uuid4().hex)
        assert theirs["items"] == nothing["items"] == [], q
    foreign = await client.get(f"/api/v1/messages/{nid}", headers=key7)
    missing = await client.get(f"/api/v1/messages/{2**31 - 1}", headers=key7)
    assert foreign.status_code == missing.status_code == 404
    assert {**foreign.json(), "request_id": ""} == {**missing.json(), "request_id": ""}
    listed = (await client.get("/api/v1/messages", headers=key7)).json()["items"]
    assert nid not in [m["id"] for m in listed]


async def test_hostile_queries_get_a_clear_4xx_and_change_nothing(client, key42):
    """NUL bytes, control characters, 10 kB, empty and overflowing ids: a 4xx naming the problem, never a 5xx, and
    the database is exactly as it was."""
    before = snapshot()
    cases = [("a\x00b", 422), ("\x00", 422), ("x" * 10_000, 422), ("", 422), ("   ", 422), ("a\x07b", 422),
             ("9" * 40, 200), ("#99999999999", 200), ("n-99999999999", 200), ("'; DROP TABLE recipients; --", 200),
             ("%_%", 200), ("\ud800", 200)]  # a lone surrogate arrives as U+FFFD: a name nobody has
    for q, status in cases:
        r = await client.get("/api/v1/search", params={"q": q}, headers=key42) if q != "\ud800" else \
            await client.get("/api/v1/search?q=%ED%A0%80", headers=key42)
        assert r.status_code == status, (q[:20], r.status_code, r.text[:200])
        if status == 422:
            assert r.json()["error"] in ("invalid_request", "invalid_query", "empty_query", "query_too_long")
        else:
            assert r.json()["items"] == [], q
    for body in ({"q": "a\x00b"}, {"q": "x" * 10_000}, {"q": ""}, {"q": 5}, {}, {"q": "a", "extra": 1}):
        r = await client.post("/api/v1/search", json=body, headers=key42)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", (str(body)[:40], r.text[:200])
    big = await client.get("/api/v1/messages/99999999999", headers=key42)
    assert big.status_code == 422 and big.json()["field"] == "notification_id"
    assert (await client.get("/api/v1/search", params={"q": "x"})).status_code == 401
    assert snapshot() == before


async def test_message_page_has_attempts_money_receipt_and_reason(client, key42):
    """The message page: every attempt (HTTP status, latency, excerpt, next retry), the charge and the refund, the
    receipt, the envelope without contact points, and the answer in plain words."""
    cust = _rid(42, "cust-001")
    nid = await _send(client, key42, cust, "email")
    (r,) = await asyncio.to_thread(lambda: [long_way.claim(nid, 30, datetime.now(UTC), "t")])
    assert isinstance(r, plan.Ready)
    assert long_way.record(r.claim, Retry("server_error", 0.01), worker="w1", started=datetime.now(UTC),
                           status_code=503, latency_ms=42.5, provider_reference=None, excerpt="busy") == "retry"
    d = (await client.get(f"/api/v1/messages/{nid}", headers=key42)).json()
    (a1,) = d["attempt_log"]
    assert (a1["status_code"], a1["latency_ms"], a1["response_excerpt"], a1["outcome"]) == (503, 42.5, "busy", "retry")
    assert a1["next_attempt_at"] is not None and a1["error_text"] == "the receiver had a server error"
    price = d["money"]["cost_cents"]
    assert price > 0 and d["next_retry_at"] is not None and d["money"]["charged_cents"] == price
    due = datetime.fromisoformat(a1["next_attempt_at"])  # the retry is due: wait for that moment, not a guess
    while datetime.now(UTC) < due:
        await asyncio.sleep(0.005)
    r2 = long_way.claim(nid, 30, datetime.now(UTC), "t")
    assert isinstance(r2, plan.Ready)
    long_way.record(r2.claim, Fail("contract", review=True), worker="w2", started=datetime.now(UTC), status_code=422,
                    latency_ms=7.0, provider_reference=None, excerpt='{"error": "bad"}')
    d = (await client.get(f"/api/v1/messages/{nid}", headers=key42)).json()
    assert [a["outcome"] for a in d["attempt_log"]] == ["retry", "failed"]
    assert d["money"]["charged_cents"] == d["money"]["refunded_cents"] == price and d["money"]["held_cents"] == 0
    assert d["status"] == "FAILED" and d["reason"].startswith("Needs review")
    assert d["answer"] == "failed: the receiver rejected the request as invalid"
    assert d["recipient_id"] == cust and d["next_retry_at"] is None
    # An order's message carries its envelope; contact points never appear in the page.
    ok = await client.post("/api/v1/orders/913/approve", headers=key42,
                           json={"expected_revision": 17, "request_id": "req-env"})
    ev = ok.json()["event_id"]
    order_msg = one("SELECT id FROM notifications WHERE event_id = :e ORDER BY id LIMIT 1", e=ev)
    d = (await client.get(f"/api/v1/messages/{order_msg}", headers=key42)).json()
    assert d["envelope"]["event_id"] == ev and d["envelope"]["event_type"] and d["order_id"] == 913
    assert "@example.test" not in str(d) and "+1555" not in str(d)


async def test_keyset_pages_cover_every_row_once_and_export_has_no_contact_points(client, key42):
    """`?limit=&cursor=` walks the whole filtered ledger, newest first, each row exactly once, with `next_cursor`
    null at the end; the CSV export holds the same rows and no phone or email."""
    asha = _rid(42, "cust-kolkata")
    ids = [await _send(client, key42, asha, "email") for _ in range(7)]
    seen: list[int] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 3, "channel": "email", "recipient": "cust-kolkata", **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/api/v1/messages", params=params, headers=key42)).json()
        seen += [m["id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)
    r = await client.get("/api/v1/messages/export.csv", params={"channel": "email", "recipient": "cust-kolkata"},
                         headers=key42)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(r.text)))
    assert [int(row["id"]) for row in table] == sorted(ids, reverse=True)
    assert "@" not in r.text and "+91" not in r.text
    bad = await client.get("/api/v1/messages", params={"cursor": "0"}, headers=key42)
    assert bad.status_code == 422


async def test_search_finds_leads_by_ref_and_campaigns_by_id_or_name(client, key42, key7):
    """A lead's ref (or its advisor's) finds the lead, linked to its page; a campaign's id or part of its name finds
    the campaign; another tenant finds neither."""
    made = await client.post("/api/v1/campaigns", headers=key42, json={
        "name": "Findable winter", "segment": "all_reachable", "template": "offer", "channel": "email"})
    cid = made.json()["campaign_id"]
    lead = one("SELECT id FROM leads WHERE tenant_id = 42 AND recipient_ref = 'cust-003'")
    hits = (await client.get("/api/v1/search", params={"q": "cust-003"}, headers=key42)).json()["items"]
    leads = [h for h in hits if h["kind"] == "lead"]
    assert [(h["id"], h["matched_by"], h["href"]) for h in leads] == [(lead, "lead ref", f"/journeys/{lead}")]
    by_advisor = (await client.get("/api/v1/search", params={"q": "advisor-anna"}, headers=key42)).json()["items"]
    assert {h["id"] for h in by_advisor if h["kind"] == "lead"} >= {lead}
    for q, matched in ((str(cid), "campaign id"), ("findable WIN", "campaign name")):
        found = (await client.get("/api/v1/search", params={"q": q}, headers=key42)).json()["items"]
        assert [(h["id"], h["matched_by"], h["href"]) for h in found if h["kind"] == "campaign"] == \
            [(cid, matched, f"/campaigns/{cid}")], q
    for q in ("cust-003", str(cid), "Findable"):
        other = (await client.get("/api/v1/search", params={"q": q}, headers=key7)).json()["items"]
        assert not [h for h in other if h["kind"] in ("lead", "campaign")], q


def _order_numbered(tenant: int, order_id: int, customer: str = "cust-001") -> None:
    """An order of that number, as the seed writes one (a base revision: no event owed for it)."""
    with get_engine().begin() as c:
        c.execute(sa.text("INSERT INTO orders (id, tenant_id, status, revision, base_revision, customer_ref, "
                          "amount_cents, currency) VALUES (:i, :t, 'authorized', 1, 1, :c, 100, 'EUR')"),
                  {"i": order_id, "t": tenant, "c": customer})


async def test_a_hash_number_offers_the_order_and_the_message_of_that_number(client, key42, key7):
    """Invariant (issue 27, item 6): `#N` — how the orders list prints an order number and the ledger a message id —
    offers the order N and the message N when both exist, each linked to its page; a job id `n-N` names the message
    only; `#913` finds order 913 with no message 913; another tenant asking `#N` gets exactly what a query for
    nothing gets."""
    nid = await _send(client, key42, _rid(42, "cust-001"))
    while one("SELECT count(*) FROM orders WHERE id = :i", i=nid):  # a number no order has yet, in any tenant
        nid = await _send(client, key42, _rid(42, "cust-001"))
    _order_numbered(42, nid)
    both = await _search(client, key42, f"#{nid}")
    assert [(h["id"], h["href"]) for h in _hits(both, "order")] == [(nid, f"/orders/{nid}")]
    assert [(h["id"], h["href"], h["matched_by"]) for h in _hits(both, "message")] == \
        [(nid, f"/messages/{nid}", "message id")]
    assert both["kinds"] == ["message id", "order number"]
    job = await _search(client, key42, f"n-{nid}")
    assert _hits(job, "order") == [] and [h["id"] for h in _hits(job, "message")] == [nid]
    order_only = await _search(client, key42, "#913")
    assert [h["id"] for h in _hits(order_only, "order")] == [913]
    assert 913 in [h["id"] for h in _hits(order_only, "message")] or not one(
        "SELECT count(*) FROM notifications WHERE id = 913")
    theirs, nothing = await _search(client, key7, f"#{nid}"), await _search(client, key7, f"#{2**31 - 1}")
    assert theirs == nothing and theirs["items"] == []
