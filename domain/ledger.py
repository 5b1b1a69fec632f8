"""The one way a message enters the ledger: every producer (order events, journeys, lifecycle events, the send API,
campaigns later) calls `ledger_message` inside its own unit of work.

The row is written before anything is sent. Its dedupe key is deterministic (recipient + template + channel + the
period or subject the message is about), and an existing key means skip: the caller gets the row that is already
there, whatever its status, and nothing new is owed. Under concurrency `INSERT … ON CONFLICT DO NOTHING` makes the
losers wait for the winner and then read its row, so 30 identical requests make one row and no error.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import sql
from domain.audience import dedupe_key
from domain.db import UnitOfWork
from domain.queue import JOB_ID_SQL, LANES, is_lane
from domain.settings import get_settings


@dataclass(frozen=True)
class NewMessage:
    tenant_id: int
    recipient: str
    channel: str
    lane: str
    template: str
    subject: str  # the period or fact the message is about: "2026-11-29", "order-913-r18", "lead-5-intent-9"
    payload: dict[str, Any] = field(default_factory=dict)
    next_attempt_at: datetime | None = None  # None: due now
    event_id: uuid.UUID | None = None
    order_id: int | None = None
    intent_id: int | None = None

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(self.tenant_id, self.channel, self.recipient, self.template, self.subject)


@dataclass(frozen=True)
class Ledgered:
    notification_id: int
    lane: str
    job_id: str
    status: str
    created: bool  # False: the key existed, nothing new is owed


_INSERT = sa.text(
    """
    INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status,
                               cost_cents, next_attempt_at, event_id, order_id, intent_id, job_id, attempts,
                               max_attempts, reserved_cents)
    VALUES (:t, :r, CAST(:c AS varchar), :l, :tpl, CAST(:p AS jsonb), :k, 'QUEUED',
            coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = :t AND channel = CAST(:c AS varchar)), 0),
            coalesce(CAST(:at AS timestamptz), now()), :e, :o, :i, NULL, 0, :max, 0)
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id, lane, status
    """
)
_SET_JOB_ID = sa.text(f"UPDATE notifications SET job_id = {JOB_ID_SQL} WHERE id = :id RETURNING job_id")
_EXISTING = sa.text("SELECT id, lane, status, job_id FROM notifications WHERE dedupe_key = :k")


def ledger_message(uow: UnitOfWork, m: NewMessage) -> Ledgered:
    """Write the ledger row (or find the one already there). Never commits: the caller's transaction decides."""
    row = uow.execute(_INSERT, {
        "t": m.tenant_id, "r": m.recipient, "c": m.channel, "l": m.lane, "tpl": m.template,
        "p": json.dumps(m.payload, default=str), "k": m.dedupe_key, "at": m.next_attempt_at, "e": m.event_id,
        "o": m.order_id, "i": m.intent_id, "max": get_settings().max_attempts,
    }).first()
    if row is None:
        prior = uow.execute(_EXISTING, {"k": m.dedupe_key}).one()
        return Ledgered(prior.id, prior.lane, prior.job_id, prior.status, created=False)
    job = uow.execute(_SET_JOB_ID, {"id": row.id}).scalar_one()
    # NOTIFY is transactional: the relay hears it only if the caller's commit happens.
    uow.execute(sql.NOTIFY_OWED, {"lane": row.lane})
    return Ledgered(row.id, row.lane, job, row.status, created=True)


class SendRefused(ValueError):
    """The request cannot become a message: `code` for the API, the message in plain words."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def recipient_ref(uow: UnitOfWork, tenant_id: int, recipient_id: int) -> str | None:
    """The ledger names people by ref; None when the id is not this tenant's (or does not exist)."""
    ref = uow.execute(sa.text("SELECT ref FROM recipients WHERE tenant_id = :t AND id = :i"),
                      {"t": tenant_id, "i": recipient_id}).scalar()
    return str(ref) if ref is not None else None


def check_template(uow: UnitOfWork, template: str, channel: str) -> None:
    """The template exists and has a version for this channel (its newest version decides)."""
    channels = uow.execute(sa.text(
        "SELECT channels FROM templates WHERE name = :n ORDER BY version DESC LIMIT 1"), {"n": template}).scalar()
    if channels is None:
        raise SendRefused("unknown_template", f"no template named {template!r}")
    if channel not in channels:
        raise SendRefused("channel_not_in_template",
                          f"template {template!r} has no {channel} version; it has {', '.join(channels)}")


def send(*, tenant_id: int, recipient_id: int, channel: str, template: str, lane: str, data: dict[str, Any],
         subject_period: str, engine: Engine | None = None) -> Ledgered | None:
    """The send API's one transaction: validate, then ledger (existing key means skip). None: no such recipient
    for this tenant (another tenant's id looks exactly the same)."""
    if not is_lane(lane):
        raise SendRefused("unknown_lane", f"unknown lane {lane!r}; lanes are {', '.join(LANES)}")
    with UnitOfWork(engine) as uow:
        ref = recipient_ref(uow, tenant_id, recipient_id)
        if ref is None:
            return None
        check_template(uow, template, channel)
        row = ledger_message(uow, NewMessage(tenant_id=tenant_id, recipient=ref, channel=channel, lane=lane,
                                             template=template, subject=subject_period, payload=data))
        uow.commit()
    return row
