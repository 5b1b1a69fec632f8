"""Rows of a month long settled, written the way the ledger and the delivery statements leave them, carrying
the contact points and the code an archive must never hold; and a digest of the tables an archive touches."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from tests.support.db import one

AUG = datetime(2026, 8, 14, 10, 30, tzinfo=UTC)  # a month long settled, before the test database's partitions
CODE = "482913"


def run(sql: str, **params: Any) -> Any:
    with get_engine().begin() as c:
        got = c.execute(sa.text(sql), params)
        return got.scalar() if got.returns_rows else None


def contact_points() -> tuple[str, str]:
    with get_engine().connect() as c:
        r = c.execute(sa.text("SELECT email, phone FROM recipients WHERE tenant_id = 42 AND ref = 'cust-001'")).one()
    assert r.email and r.phone
    return str(r.email), str(r.phone)


def message(at: datetime, status: str, key: str) -> int:
    """A ledger row of another month, written the way the ledger leaves one (free: no money to reconcile), its
    payload carrying what must never leave in an archive: the person's contact points and a code."""
    email, phone = contact_points()
    sent = status in ("SENT", "DELIVERED")
    return int(run(
        "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
        "cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at, settled_at, provider_reference, "
        "provider_key, reason_detail) "
        "VALUES (42, 'cust-001', 'sms', 'critical', 'otp', CAST(:p AS jsonb), CAST(:k AS text), CAST(:s AS text), 0, "
        "1, 8, :at, :at, CASE WHEN :sent THEN CAST(:at AS timestamptz) + interval '2 seconds' END, "
        "CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN CAST(:at AS timestamptz) + interval '9 seconds' END, "
        "CASE WHEN :sent THEN 'sms-' || CAST(:k AS text) END, CAST(:k AS text) || '~' || CAST(:phone AS text), "
        "'to ' || CAST(:email AS text)) RETURNING id",
        p=json.dumps({"to": phone, "email": email, "code": CODE, "text": f"Your code is {CODE}"}), k=key, s=status,
        at=at, sent=sent, phone=phone, email=email))


def attempt(notification_id: int, no: int, outcome: str = "sent", code: int | None = 200) -> None:
    """An attempt line filed the way the delivery statements file it: under its message's month."""
    _, phone = contact_points()
    run("INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome, "
        "status_code, latency_ms, response_excerpt, notification_created_at) "
        "SELECT id, :no, 'w-critical', created_at, created_at + interval '1 second', :o, :c, 12.5, :x, created_at "
        "FROM notifications WHERE id = :n",
        n=notification_id, no=no, o=outcome, c=code, x=f'{{"accepted": "{phone}", "code": "{CODE}"}}')


def table_digest() -> tuple[Any, ...]:
    return tuple(one(f"SELECT count(*) || ':' || coalesce(sum(hashtext(t::text)), 0) FROM {t} t") for t in (
        "notifications", "notification_attempts", "delivery_receipts", "delivery_receipt_keys", "operator_actions"))
