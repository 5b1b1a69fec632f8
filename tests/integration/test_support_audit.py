"""/audit finds by what the pages print (issue 27, item 6) — its reads on real PostgreSQL.

Invariant: /audit reads a query exactly as search does (one parser, `domain.support.query.read_query`, one finder,
`domain.support.search.find_named`): a recipient by ref, name, phone in any spelling or email; a message by id,
`#id`, job id `n-id` or provider reference; an event id; an order number, bare or `#913` — each gives that row's
timeline; an order with no message yet still shows itself; a query that cannot be one is refused in words and runs
nothing; another tenant's rows look exactly like missing ones.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Succeeded
from domain.ledger.recipients import find_by_ref
from domain.ledger.send import send
from domain.orders.commands import Committed, execute_order_command
from domain.support.query import QueryRefused
from domain.support.search import audit_named


def _one(sql: str, **params):  # type: ignore[no-untyped-def]
    with get_engine().connect() as c:
        return c.execute(sa.text(sql), params).scalar()


def _sent_message(ref: str, provider_reference: str) -> int:
    ((tenant, rid),) = find_by_ref(42, ref)
    row = send(tenant_id=tenant, recipient_id=rid, channel="email", template="offer", lane="normal",
               data={"headline": "hi"}, subject_period=f"audit-{provider_reference}")
    assert row is not None
    nid = row.notification_id
    claim = long_way.claim(nid, 30, datetime.now(UTC), "t")
    assert isinstance(claim, plan.Ready)
    long_way.record(claim.claim, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=201,
                    latency_ms=9.0, provider_reference=provider_reference, excerpt="{}")
    return nid


def _approve_913(request_id: str) -> str:
    r = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                              actor_ref="operator:alice", request_id=request_id)
    assert isinstance(r, Committed)
    return str(r.event_id)


def _messages_in(answer: dict) -> set[int]:  # type: ignore[type-arg]
    return {int(r["message_id"]) for r in answer["timeline"] if r.get("message_id")}


def _spelled_apart(phone: str) -> str:
    """The same number as a person types it: '+1555 123-4567' for '+15551234567'."""
    return f"{phone[:5]} {phone[5:8]}-{phone[8:]}"


def test_audit_takes_everything_search_takes(db) -> None:  # type: ignore[no-untyped-def]
    nid = _sent_message("cust-001", "email-audit-1")
    rid = _one("SELECT id FROM recipients WHERE tenant_id = 42 AND ref = 'cust-001'")
    phone = _one("SELECT phone FROM recipients WHERE id = :i", i=rid)
    for q in ("cust-001", "Customer cust-001", phone, _spelled_apart(phone), phone.lstrip("+"),
              "CUST-001@example.test", str(nid), f"#{nid}", f"n-{nid}", "email-audit-1"):
        answer = audit_named(42, q)
        assert nid in _messages_in(answer), q
        assert rid in [r for r, _ in answer["recipients"]], q  # the who-callout: the person it leads to
        assert any(r["kind"] == "attempt" for r in answer["timeline"]), q
    assert audit_named(42, _spelled_apart(phone))["kinds"] == ["phone"]


def test_audit_finds_an_order_by_its_number_bare_or_as_the_orders_list_prints_it(db) -> None:  # type: ignore[no-untyped-def]
    """Order 913 exists with no change yet: it shows itself; once approved, its event and messages join it."""
    for q in ("913", "#913"):
        (line,) = [r for r in audit_named(42, q)["timeline"] if r["kind"] == "order"]
        assert line["text"].startswith("order 913: authorized at revision 17, customer cust-001"), line
    ev = _approve_913("req-audit")
    for q in ("913", "#913", ev):
        timeline = audit_named(42, q)["timeline"]
        assert [r["ref"] for r in timeline if r["kind"] == "event"] == [ev], q
        assert any(r["kind"] == "ledger" for r in timeline), q  # the approval's messages
    assert audit_named(42, "#913")["recipients"]  # the order's customer, for the who-callout


@pytest.mark.parametrize("raw", ["", "   ", "a\x00b", "x" * 201])
def test_a_query_that_cannot_be_one_is_refused_in_words_and_runs_nothing(db, raw: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(QueryRefused) as refused:
        audit_named(42, raw)
    assert refused.value.message


def test_another_tenants_rows_look_exactly_like_missing_ones(db) -> None:  # type: ignore[no-untyped-def]
    nid = _sent_message("cust-001", "email-audit-2")
    phone = _one("SELECT phone FROM recipients WHERE tenant_id = 42 AND ref = 'cust-001'")
    _approve_913("req-audit-iso")
    nothing = audit_named(7, f"#{2**31 - 1}")
    assert nothing == {"kinds": ["message id", "order number"], "timeline": [], "recipients": []}
    for q in (f"#{nid}", f"n-{nid}", str(nid), "email-audit-2", "913", "#913", "cust-001", phone,
              "cust-001@example.test"):
        theirs = audit_named(7, q)
        assert theirs["timeline"] == [] and theirs["recipients"] == [], q
