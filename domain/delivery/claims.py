"""Claim and record: the worker's store (procrastinate's manager). One transaction per call; the worker
(jobs/worker.py) holds no SQL, it sequences these and does the HTTP.

claim (a lease) -> floor rules at send time (`floor_check`) -> suppress | defer | record the attempt's outcome.
Status machine: QUEUED -> SENT -> DELIVERED | FAILED; QUEUED -> FAILED | SUPPRESSED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import sql
from domain.db import UnitOfWork
from domain.envelope import Envelope
from domain.models import BalanceEntry, NotificationAttempt, table_of
from domain.retry import Fail, Retry, RetryDecision, Succeeded
from domain.rules import FloorDecision, Send, Suppress, day_start_utc, floor_decision

# Which order status each event is about: checked again at send time (eligibility).
EVENT_REQUIRES_STATUS = {"order.approved": ("approved", "fulfilled"), "order.cancelled": ("cancelled",),
                         "order.fulfilled": ("fulfilled",)}


@dataclass(frozen=True)
class Claim:
    """A claimed ledger row (a frozen record crossing from the database into the worker)."""

    id: int
    tenant_id: int
    recipient: str
    channel: str
    lane: str
    template: str
    payload: dict[str, Any]
    dedupe_key: str
    cost_cents: int
    attempts: int
    max_attempts: int
    event_id: uuid.UUID | None
    order_id: int | None
    order_status: str | None = None
    envelope: Envelope | None = None
    intent_id: int | None = None
    intent_status: str | None = None
    intent_step: str | None = None
    lead_step: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Claim:
        m = dict(row._mapping)
        env = None
        if m.get("event_id") is not None and m.get("event_type") is not None:
            env = Envelope(
                event_id=m["event_id"], tenant_id=m["tenant_id"], aggregate_type=m["aggregate_type"],
                aggregate_id=m["aggregate_id"], aggregate_revision=m["aggregate_revision"],
                event_type=m["event_type"], schema_version=m["schema_version"], occurred_at=m["occurred_at"],
                request_id=m["request_id"], causation_id=m["causation_id"], actor_ref=m["actor_ref"],
                payload=m["event_payload"])
        fields = {k: m[k] for k in ("id", "tenant_id", "recipient", "channel", "lane", "template", "payload",
                                    "dedupe_key", "cost_cents", "attempts", "max_attempts", "event_id", "order_id",
                                    "order_status", "intent_id", "intent_status", "intent_step", "lead_step")}
        return cls(**fields, envelope=env)


@dataclass(frozen=True)
class SendPlan:
    """The floor rules' verdict, with the contact point looked up in the same read (never in job arguments)."""

    decision: FloorDecision
    contact: str | None = None


def claim(notification_id: int, lease_seconds: float, engine: Engine | None = None) -> Claim | None:
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.CLAIM_NOTIFICATION, {"id": notification_id, "lease": lease_seconds}).first()
        uow.commit()
    return Claim.from_row(row) if row else None


def still_eligible(c: Claim) -> bool:
    """Send-time eligibility: the order is still in a state this event is about."""
    if c.envelope is None or c.order_id is None:
        return True
    want = EVENT_REQUIRES_STATUS.get(c.envelope.event_type)
    return want is None or c.order_status in want


def superseded(c: Claim) -> bool:
    """A journey nudge whose intent was cancelled, or whose lead has moved past its step, must not go out."""
    return c.intent_id is not None and (c.intent_status == "cancelled" or c.lead_step != c.intent_step)


def floor_check(c: Claim, now: datetime, engine: Engine | None = None) -> SendPlan:
    if superseded(c):
        return SendPlan(Suppress("superseded"))
    eligible = still_eligible(c)
    if c.channel == "webhook":  # a system, not a person: no quiet hours, cap, contact point or cost
        return SendPlan(floor_decision(now=now, lane=c.lane, channel=c.channel, still_eligible=eligible,
                                       opted_out_channels=(), sent_today=0, daily_cap=None, tz="UTC",
                                       quiet_start=None, quiet_end=None))
    with UnitOfWork(engine) as uow:
        x = uow.execute
        rcp = x(sa.text("SELECT timezone, quiet_start, quiet_end, daily_cap, opted_out_channels, email, phone "
                        "FROM recipients WHERE tenant_id = :t AND ref = :r"),
                {"t": c.tenant_id, "r": c.recipient}).first()
        contact = (rcp.email if c.channel == "email" else rcp.phone) if rcp else None
        if rcp is None or not contact:
            return SendPlan(Suppress("no_contact_point"))
        sent_today = int(x(sa.text(
            "SELECT count(*) FROM notifications WHERE tenant_id = :t AND recipient = :r AND channel <> 'webhook' "
            "AND status IN ('SENT','DELIVERED') AND sent_at >= :d"),
            {"t": c.tenant_id, "r": c.recipient, "d": day_start_utc(now, rcp.timezone)}).scalar_one())
        balance = x(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = :t"), {"t": c.tenant_id}).scalar()
    decision = floor_decision(
        now=now, lane=c.lane, channel=c.channel, still_eligible=eligible,
        opted_out_channels=tuple(rcp.opted_out_channels), sent_today=sent_today, daily_cap=rcp.daily_cap,
        tz=rcp.timezone, quiet_start=rcp.quiet_start, quiet_end=rcp.quiet_end,
    )
    if isinstance(decision, Send) and c.cost_cents > 0 and (balance or 0) < c.cost_cents:
        return SendPlan(Suppress("insufficient_balance"))
    return SendPlan(decision, contact)


def _attempt(uow: UnitOfWork, c: Claim, worker: str, started: datetime, outcome: str,
             status_code: int | None, error_class: str | None, latency_ms: float | None) -> None:
    uow.execute(sa.insert(table_of(NotificationAttempt)).values(
        notification_id=c.id, attempt_no=c.attempts, worker=worker, started_at=started,
        finished_at=sa.func.now(), outcome=outcome, status_code=status_code, error_class=error_class,
        latency_ms=latency_ms,
    ))


def suppress(c: Claim, reason: str, worker: str, now: datetime, engine: Engine | None = None) -> None:
    with UnitOfWork(engine) as uow:
        uow.execute(sa.text(
            "UPDATE notifications SET status = 'SUPPRESSED', suppressed_reason = :r, settled_at = now(), "
            "leased_until = NULL WHERE id = :id AND status = 'QUEUED'"), {"r": reason, "id": c.id})
        _attempt(uow, c, worker, now, "suppressed", None, reason, None)
        uow.commit()


def defer(c: Claim, until: datetime, engine: Engine | None = None) -> None:
    """Quiet hours: not an attempt, so the attempt count is given back."""
    with UnitOfWork(engine) as uow:
        uow.execute(sa.text(
            "UPDATE notifications SET attempts = attempts - 1, next_attempt_at = :u, leased_until = NULL "
            "WHERE id = :id AND status = 'QUEUED'"), {"u": until, "id": c.id})
        uow.commit()


def record(
    c: Claim, decision: RetryDecision, *, worker: str, started: datetime, status_code: int | None,
    latency_ms: float, provider_reference: str | None, engine: Engine | None = None,
) -> str:
    """Record one attempt's outcome; on success debit the balance in the SAME transaction."""
    with UnitOfWork(engine) as uow:
        x = uow.execute
        if isinstance(decision, Succeeded):
            # A webhook's 2xx IS its delivery; providers confirm later with a receipt.
            final = "DELIVERED" if c.channel == "webhook" else "SENT"
            updated = x(sa.text(
                "UPDATE notifications SET status = CAST(:s AS text), provider_reference = :p, sent_at = now(), "
                "settled_at = CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN now() END, leased_until = NULL, "
                "last_error_class = NULL WHERE id = :id AND status = 'QUEUED' RETURNING id"),
                {"s": final, "p": provider_reference, "id": c.id}).first()
            if updated and c.cost_cents > 0:
                x(sa.text("UPDATE balances SET balance_cents = balance_cents - :c WHERE tenant_id = :t"),
                  {"c": c.cost_cents, "t": c.tenant_id})
                x(sa.insert(table_of(BalanceEntry)).values(
                    tenant_id=c.tenant_id, notification_id=c.id, amount_cents=-c.cost_cents,
                    reason=f"{c.channel} {c.template}"))
            if updated and c.intent_id is not None:
                x(sa.text("UPDATE lead_notification_intents SET status = 'sent', updated_at = now() "
                          "WHERE id = :i AND status IN ('pending', 'scheduled')"), {"i": c.intent_id})
            outcome = "already_processed" if decision.already_processed else "sent"
            _attempt(uow, c, worker, started, outcome, status_code, None, latency_ms)
        elif isinstance(decision, Retry):
            x(sa.text(
                "UPDATE notifications SET next_attempt_at = now() + make_interval(secs => :d), leased_until = NULL, "
                "last_error_class = :e WHERE id = :id AND status = 'QUEUED'"),
                {"d": decision.delay_seconds, "e": decision.error_class, "id": c.id})
            _attempt(uow, c, worker, started, "retry", status_code, decision.error_class, latency_ms)
            outcome = "retry"
        else:
            assert isinstance(decision, Fail)
            x(sa.text(
                "UPDATE notifications SET status = 'FAILED', settled_at = now(), leased_until = NULL, "
                "last_error_class = :e, review = :r WHERE id = :id AND status = 'QUEUED'"),
                {"e": decision.error_class, "r": "needs_review", "id": c.id})
            _attempt(uow, c, worker, started, "failed", status_code, decision.error_class, latency_ms)
            outcome = "failed"
        uow.commit()
    return outcome


