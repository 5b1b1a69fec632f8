"""The smaller points of issue 27, item 9, on real PostgreSQL: what the pages read.

Invariants: the operator's tenant comes back by its name with every session read (the header shows "Northwind
Retail", never "tenant 42"); a suppressed message's page says why once, offers no body and no receipt, and names its
template without a version it never had; a sent one-time code's page shows the body it went out with and never the
code (nor any 6-digit number); an order's history is every change — who, what, when, the cancel's note — newest
first, and paging it returns each change once and none of another tenant's; the balance by the hour sums each hour's
charges exactly (the sums of every page add up to the entries), keeps a top-up a row of its own, pages Older/Newer
through every hour once, and an hour's entries page by id.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from dashboard.pages.balance import _read as balance_page
from domain.access import auth
from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Succeeded
from domain.ledger import otp
from domain.ledger.send import send
from domain.orders.commands import Committed, create_order, execute_order_command
from domain.support import pages
from domain.support.message import CODE_MASK, message_page
from tests.support.long_way import ready, record
from tests.support.people import person


def test_the_operator_s_tenant_is_read_with_its_name(db):
    with get_engine().connect() as c:
        alice = c.execute(sa.text("SELECT id FROM operators WHERE login = 'alice'")).scalar_one()
        pat = c.execute(sa.text("SELECT id FROM operators WHERE tenant_id IS NULL LIMIT 1")).scalar()
    p = auth.operator_now(int(alice))
    assert p is not None and (p.tenant_id, p.tenant_name) == (42, "Northwind Retail")
    if pat is not None:  # platform on-call belongs to no tenant
        q = auth.operator_now(int(pat))
        assert q is not None and q.tenant_name == ""


def test_a_suppressed_message_says_why_once_and_has_no_body_or_receipt(db):
    rid, _ = person(cap=None)
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE recipients SET opted_out_channels = '{sms}' WHERE id = :i"), {"i": rid})
    sent = send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane="normal",
                      data={"headline": "x"}, subject_period=f"p-{uuid.uuid4().hex[:6]}")
    assert sent is not None
    got = long_way.claim(sent.notification_id, 30.0, datetime.now(UTC), "w")
    assert isinstance(got, plan.Suppressed), got
    m = message_page(42, sent.notification_id, datetime.now(UTC))
    assert m is not None and m["status"] == "SUPPRESSED"
    assert m["answer"].startswith("not sent: ") and m["reason"] == "", (m["answer"], m["reason"])
    assert m["body"] is None and m["receipt"] is None and m["template_version"] is None
    assert [a["error_text"] for a in m["attempt_log"]] == ["opted out"], "the attempt's code in words"


def test_a_sent_code_shows_its_body_with_the_code_masked(db):
    rid, _ = person(cap=None)
    got = otp.request(42, rid, "sms", datetime.now(UTC))
    assert got is not None
    c = ready(got.notification_id)
    assert c is not None
    record(c, Succeeded(False), f"sms-{uuid.uuid4().hex[:8]}")
    m = message_page(42, got.notification_id, datetime.now(UTC))
    assert m is not None and m["status"] in ("SENT", "DELIVERED") and m["template_version"] is not None
    body = m["body"]
    assert body and CODE_MASK in body, body
    assert not re.search(r"\d{4,}", body), f"a code (or any long number) reached the page: {body!r}"
    assert message_page(7, got.notification_id, datetime.now(UTC)) is None, "another tenant's message is missing"


def _cmd(oid: int, command: str, rev: int, who: str, note: str = "") -> None:
    r = execute_order_command(tenant_id=42, order_id=oid, command=command, expected_revision=rev,
                              actor_ref=f"operator:{who}", request_id=f"req-{uuid.uuid4().hex[:10]}", note=note)
    assert isinstance(r, Committed), r


def test_an_order_s_history_is_every_change_with_who_and_the_cancel_s_note(db):
    oid = create_order(tenant_id=42, customer_ref="cust-001", amount_cents=1200, currency="EUR")
    assert pages.order_history(42, oid).rows == [], "an order as it entered the system has no change yet"
    _cmd(oid, "approve", 1, "alice")
    _cmd(oid, "fulfill", 2, "bob")
    page = pages.order_history(42, oid)
    got = [(r["id"], r["event_type"], r["actor_ref"], r["note"]) for r in page.rows]
    assert got == [(3, "order.fulfilled", "operator:bob", None),
                   (2, "order.approved", "operator:alice", None)], got
    assert not page.has_older and not page.has_newer
    other = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=900, currency="EUR")
    _cmd(other, "cancel", 1, "bob", note="customer asked")
    assert [(r["event_type"], r["note"]) for r in pages.order_history(42, other).rows] == [
        ("order.cancelled", "customer asked")], "a cancel carries its audit row's note"
    # Paged one at a time, older then back newer: each change once, in order.
    first = pages.order_history(42, oid, limit=1)
    second = pages.order_history(42, oid, limit=1, before=int(first.rows[0]["id"]))
    back = pages.order_history(42, oid, limit=1, after=int(second.rows[0]["id"]))
    assert [r["id"] for r in (*first.rows, *second.rows)] == [3, 2]
    assert (first.has_older, second.has_older, second.has_newer, back.rows[0]["id"]) == (True, False, True, 3)
    assert pages.order_history(7, oid).rows == [], "another tenant's order has no history here"


def _entries(at: datetime, kind: str, cents: int, n: int, reason: str, actor: str | None = None) -> None:
    """`n` entries at `at`, the balance moved with them (entries always sum to it: invariant 7)."""
    with get_engine().begin() as c:
        for _ in range(n):
            c.execute(sa.text(
                "INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason, actor_ref, created_at) "
                "VALUES (7, :k, :a, :r, :who, :at)"), {"k": kind, "a": cents, "r": reason, "who": actor, "at": at})
        c.execute(sa.text("UPDATE balances SET balance_cents = balance_cents + :d WHERE tenant_id = 7"),
                  {"d": cents * n})


def _all_hours(tenant: int) -> list[list[dict[str, Any]]]:
    pages_seen, before = [], 0
    for _ in range(100):
        rows, older, _ = balance_page(tenant, 0, before, 0)
        pages_seen.append(rows)
        if not older:
            return pages_seen
        before = int(rows[-1]["id"])
    raise AssertionError("the hours never ended")


def test_the_balance_by_the_hour_sums_charges_and_pages_every_hour_once(db, monkeypatch):
    monkeypatch.setattr("dashboard.pages.balance.HOURS_PAGE", 2)
    base = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    _entries(base + timedelta(minutes=5), "top_up", 5000, 1, "INV-77", "operator:alice")
    _entries(base + timedelta(minutes=10), "reserve", -1, 312, "sms offer")
    _entries(base + timedelta(hours=1, minutes=59), "reserve", -1, 3, "email offer")
    _entries(base + timedelta(hours=2), "refund", 1, 2, "refund: no_contact_point")
    _entries(base + timedelta(hours=5), "reserve", -1, 1, "sms otp_code")
    with get_engine().connect() as c:
        hours_with_entries = c.execute(sa.text(
            "SELECT count(DISTINCT floor(extract(epoch FROM created_at) / 3600)) FROM balance_entries "
            "WHERE tenant_id = 7")).scalar_one()
        total = c.execute(sa.text("SELECT sum(amount_cents) FROM balance_entries WHERE tenant_id = 7")).scalar_one()
    walked = _all_hours(7)
    rows = [r for p in walked for r in p]
    hours = [int(r["id"]) for r in rows]
    assert hours == sorted(hours, reverse=True) and len(set(hours)) == hours_with_entries, hours
    assert all(len({r["id"] for r in p}) <= 2 for p in walked), "a page holds at most HOURS_PAGE hours"
    cents = sum(round(float(r["amount"].replace("+", "").split()[0].replace(",", "")) * 100) for r in rows)
    assert cents == total, "the sums of every page are the entries' sums exactly"
    nine = [r for r in rows if r["at"].startswith("2026-11-30 09:00")]
    assert {(r["kind"], r["amount"]) for r in nine} == {("312 charges", "-3.12 EUR"), ("top-up", "+50.00 EUR")}
    assert [r["reason"] for r in rows if r["kind"] == "2 refunds"] == [""], "a sum names no single reason"
    # An hour's own entries, a page at a time by id: 312 charges in 7 pages of 50, each once.
    nine_h = int(nine[0]["id"])
    seen: list[str] = []
    before = 0
    for _ in range(20):
        entries, older, _newer = balance_page(7, nine_h, before, 0)
        seen += [e["id"] for e in entries]
        if not older:
            break
        before = int(entries[-1]["id"])
    assert len(seen) == len(set(seen)) == 313, len(seen)
    assert balance_page(42, nine_h, 0, 0)[0] == [], "another tenant's hour holds none of these"
