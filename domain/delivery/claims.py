"""Claim and record: the worker's store (procrastinate's manager). Two transactions per attempt; the worker
(jobs/worker.py) holds no SQL, it calls `claim`, does the HTTP, then calls `record`.

`claim` is ONE transaction: the lease, the floor rules at send time (eligibility, opt-out, quiet hours, cap), and —
for a message that may go — its cap slot and its price taken with guarded updates (domain/ledger/metering.py). It
settles what must not go (SUPPRESSED with its reason, or deferred to the end of quiet hours) in that same transaction.
`record` settles the attempt: SENT keeps the money, FAILED gives it back; only contract errors go to review.
Status machine: QUEUED -> SENT -> DELIVERED | FAILED; QUEUED -> FAILED | SUPPRESSED.

Fencing: every claim takes the row's next `claim_token`; every write that follows — suppress, defer, retry, fail —
is guarded by it, and money moves only when that guarded update matched (domain/ledger/write.py). A worker
whose lease ran out and whose row another worker claimed changes nothing but its own attempt line ("stale"). The one
exception is an accepted send: that is the truth and is recorded whatever the row says (write.accept_truth).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery.receipts import apply_pending
from domain.delivery.retry import Fail, Retry, RetryDecision, Succeeded
from domain.ledger import metering
from domain.ledger.floor import Defer, Send, Suppress, floor_decision
from domain.ledger.templates import render_for_send
from domain.ledger.write import accept_truth, settle_unsent
from domain.models import NotificationAttempt, table_of
from domain.orders.envelope import Envelope

# ---- worker claim: a lease, guarded by status and time, and the next fence token ---------------------------------
# One round trip: the guarded lease and its token, plus what the worker needs to decide and send (envelope, order
# status, the intent and the campaign it belongs to).
CLAIM_NOTIFICATION = sa.text(
    """
    WITH c AS (
      UPDATE notifications SET attempts = attempts + 1, leased_until = now() + make_interval(secs => :lease),
                               claimed_at = now(), claim_token = claim_token + 1
      WHERE id = :id AND status = 'QUEUED' AND next_attempt_at <= now() + interval '1 second'
        AND (leased_until IS NULL OR leased_until < now())
        AND NOT EXISTS (SELECT 1 FROM lane_controls l WHERE l.lane = notifications.lane AND l.paused)
      RETURNING id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, cost_cents, attempts,
                max_attempts, event_id, order_id, intent_id, campaign_id, reserved_cents, cap_day, claim_token,
                provider_key
    )
    SELECT c.*, o.status AS order_status, e.aggregate_type, e.aggregate_id, e.aggregate_revision, e.event_type,
           e.schema_version, e.occurred_at, e.request_id, e.causation_id, e.actor_ref, e.payload AS event_payload,
           i.status AS intent_status, i.step AS intent_step, ld.current_step AS lead_step,
           cp.status AS campaign_status
    FROM c
    LEFT JOIN outbox_events e ON e.event_id = c.event_id
    LEFT JOIN orders o ON o.tenant_id = c.tenant_id AND o.id = c.order_id
    LEFT JOIN lead_notification_intents i ON i.id = c.intent_id
    LEFT JOIN leads ld ON ld.id = i.lead_id
    LEFT JOIN campaigns cp ON cp.id = c.campaign_id
    """
)


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
    claim_token: int = 0
    provider_key: str | None = None
    campaign_status: str | None = None
    intent_id: int | None = None
    intent_status: str | None = None
    intent_step: str | None = None
    lead_step: str | None = None
    reserved_cents: int = 0
    cap_day: date | None = None

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
                                    "order_status", "intent_id", "intent_status", "intent_step", "lead_step",
                                    "reserved_cents", "cap_day", "claim_token", "provider_key",
                                    "campaign_status")}
        return cls(**fields, envelope=env)


@dataclass(frozen=True)
class Ready:
    """The row is ours (leased) with its cap slot and price held: send it now. The contact point and the rendered
    text travel in memory only, never in job arguments."""

    claim: Claim
    contact: str | None = None
    body: str | None = None


@dataclass(frozen=True)
class Suppressed:
    claim: Claim
    reason: str


@dataclass(frozen=True)
class Deferred:
    claim: Claim
    until: datetime


ClaimResult = Ready | Suppressed | Deferred


def idempotency_key(c: Claim) -> str:
    """The key the provider dedupes on: the dedupe key, or the replay's own key after a bounce."""
    return c.provider_key or c.dedupe_key


def still_eligible(c: Claim) -> bool:
    """Send-time eligibility: the order is still in a state this event is about."""
    if c.envelope is None or c.order_id is None:
        return True
    want = EVENT_REQUIRES_STATUS.get(c.envelope.event_type)
    return want is None or c.order_status in want


def superseded(c: Claim) -> bool:
    """A journey nudge whose intent was cancelled, or whose lead has moved past its step, must not go out."""
    return c.intent_id is not None and (c.intent_status == "cancelled" or c.lead_step != c.intent_step)


def channel_of(notification_id: int, engine: Engine | None = None) -> str | None:
    """The channel of a row still owed (the bulk lane takes that channel's token before claiming)."""
    with UnitOfWork(engine) as uow:
        return uow.execute(sa.text("SELECT channel FROM notifications WHERE id = :i AND status = 'QUEUED'"),
                           {"i": notification_id}).scalar()


def claim(notification_id: int, lease_seconds: float, now: datetime, worker: str = "worker",
          engine: Engine | None = None) -> ClaimResult | None:
    """None: not owed now (done, leased by another worker, paused or not yet due)."""
    with UnitOfWork(engine) as uow:
        row = uow.execute(CLAIM_NOTIFICATION, {"id": notification_id, "lease": lease_seconds}).first()
        if row is None:
            return None
        c = Claim.from_row(row)
        result = _decide_and_take(uow, c, now, worker)
        uow.commit()
    return result


def _decide_and_take(uow: UnitOfWork, c: Claim, now: datetime, worker: str) -> ClaimResult:
    if superseded(c):
        return _suppress(uow, c, worker, "superseded", now)
    if c.campaign_status == "cancelled":  # a row left to a worker at cancel comes back here after a retry
        return _suppress(uow, c, worker, "campaign_cancelled", now)
    if c.channel == "webhook":  # a system, not a person: no quiet hours, cap or contact point
        decision = floor_decision(now=now, lane=c.lane, channel=c.channel, still_eligible=still_eligible(c),
                                  opted_out_channels=(), sent_today=0, daily_cap=None, tz="UTC",
                                  quiet_start=None, quiet_end=None)
        if isinstance(decision, Suppress):
            return _suppress(uow, c, worker, decision.reason, now)
        if not _take_money(uow, c):
            return _suppress(uow, c, worker, "insufficient_balance", now)
        return Ready(c)
    rcp = uow.execute(sa.text(
        "SELECT timezone, quiet_start, quiet_end, daily_cap, opted_out_channels, email, phone "
        "FROM recipients WHERE tenant_id = :t AND ref = :r"), {"t": c.tenant_id, "r": c.recipient}).first()
    contact = (rcp.email if c.channel == "email" else rcp.phone) if rcp else None
    if rcp is None or not contact:
        return _suppress(uow, c, worker, "no_contact_point", now)
    day = local_day(now, rcp.timezone)
    taken = uow.execute(sa.text(
        "SELECT taken FROM recipient_daily_counts WHERE tenant_id = :t AND recipient = :r AND day = :d"),
        {"t": c.tenant_id, "r": c.recipient, "d": day}).scalar() or 0
    holds_slot = c.cap_day == day  # a slot of an earlier day does not count for today's send
    if c.cap_day is not None and not holds_slot:
        metering.release_stale_slot(uow, c.id)
    decision = floor_decision(
        now=now, lane=c.lane, channel=c.channel, still_eligible=still_eligible(c),
        opted_out_channels=tuple(rcp.opted_out_channels), sent_today=0 if holds_slot else int(taken),
        daily_cap=rcp.daily_cap, tz=rcp.timezone, quiet_start=rcp.quiet_start, quiet_end=rcp.quiet_end,
    )
    if isinstance(decision, Suppress):
        detail = _opt_out_detail(uow, c) if decision.reason == "opted_out" else None
        return _suppress(uow, c, worker, decision.reason, now, detail)
    if isinstance(decision, Defer):
        until_local = decision.until.astimezone(ZoneInfo(rcp.timezone))
        return _defer(uow, c, decision.until, f"quiet hours until {until_local:%H:%M} {rcp.timezone}")
    assert isinstance(decision, Send)
    # The cap slot and the money, each once per row, each a guarded update: the pure rule above is the fast
    # answer, these are what hold under concurrency.
    if rcp.daily_cap is not None and c.lane != "critical" and not holds_slot and not metering.take_cap_slot(
            uow, tenant_id=c.tenant_id, recipient=c.recipient, day=day, cap=rcp.daily_cap, notification_id=c.id):
        return _suppress(uow, c, worker, "daily_cap", now)
    body = render_for_send(uow, notification_id=c.id, template=c.template, channel=c.channel, payload=c.payload)
    if not _take_money(uow, c):  # last: see metering._RESERVE
        return _suppress(uow, c, worker, "insufficient_balance", now)
    return Ready(c, contact, body)


def local_day(now: datetime, tz: str) -> date:
    return now.astimezone(ZoneInfo(tz)).date()


def _take_money(uow: UnitOfWork, c: Claim) -> bool:
    if c.reserved_cents > 0 or c.cost_cents <= 0:
        return True  # held since an earlier attempt, or free
    return metering.reserve(uow, tenant_id=c.tenant_id, notification_id=c.id, cost_cents=c.cost_cents,
                            reason=f"{c.channel} {c.template}")


def _opt_out_detail(uow: UnitOfWork, c: Claim) -> str | None:
    """"opted out of SMS on 2026-11-28 by support": the change that did it, from the recipient's change log."""
    ch = uow.execute(sa.text(
        "SELECT ch.changed_at, ch.actor_ref FROM recipient_changes ch JOIN recipients r ON r.id = ch.recipient_id "
        "WHERE r.tenant_id = :t AND r.ref = :ref AND ch.field = 'opted_out_channels' "
        "AND ch.new_value LIKE :like ORDER BY ch.id DESC LIMIT 1"),
        {"t": c.tenant_id, "ref": c.recipient, "like": f"%{c.channel}%"}).first()
    if ch is None:
        return None
    return f"opted out of {c.channel.upper() if c.channel == 'sms' else c.channel} on {ch.changed_at:%Y-%m-%d} " \
           f"by {ch.actor_ref}"


def _attempt(uow: UnitOfWork, c: Claim, worker: str, started: datetime, outcome: str,
             status_code: int | None, error_class: str | None, latency_ms: float | None,
             excerpt: str | None = None, next_attempt_at: datetime | None = None) -> None:
    # One line per claim; a stale claim's line may meet a later claim's number (a deferral gives the count back).
    uow.execute(pg_insert(table_of(NotificationAttempt)).values(
        notification_id=c.id, attempt_no=c.attempts, worker=worker, started_at=started,
        finished_at=sa.func.now(), outcome=outcome, status_code=status_code, error_class=error_class,
        latency_ms=latency_ms, response_excerpt=excerpt, next_attempt_at=next_attempt_at,
    ).on_conflict_do_nothing(constraint="notification_attempts_once"))


def _suppress(uow: UnitOfWork, c: Claim, worker: str, reason: str, now: datetime,
              detail: str | None = None) -> Suppressed:
    """Settled unsent with its reason (and its detail in plain words); whatever it held is given back."""
    settle_unsent(uow, c.id, c.claim_token, status="SUPPRESSED", reason=reason, detail=detail,
                  intent_why=f"suppressed: {reason.replace('_', ' ')}")
    _attempt(uow, c, worker, now, "suppressed", None, reason, None)
    apply_pending(uow, c.id)  # a receipt kept while it was owed is applied to how it ended
    return Suppressed(c, reason)


def _defer(uow: UnitOfWork, c: Claim, until: datetime, detail: str) -> Deferred:
    """Quiet hours: not an attempt, so the attempt count is given back; what it holds stays held."""
    uow.execute(sa.text(
        "UPDATE notifications SET attempts = attempts - 1, next_attempt_at = :u, leased_until = NULL, "
        "reason_detail = :d WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok"),
        {"u": until, "d": detail, "id": c.id, "tok": c.claim_token})
    return Deferred(c, until)


def give_back(c: Claim, engine: Engine | None = None) -> bool:
    """The worker will not send under this claim (too little of its lease is left to try): the attempt is given
    back and the row is owed again at once; what it holds stays held. Guarded by the token like every write."""
    with UnitOfWork(engine) as uow:
        done = uow.execute(sa.text(
            "UPDATE notifications SET attempts = attempts - 1, leased_until = NULL, next_attempt_at = now() "
            "WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok RETURNING id"),
            {"id": c.id, "tok": c.claim_token}).first()
        uow.commit()
    return done is not None


def record(
    c: Claim, decision: RetryDecision, *, worker: str, started: datetime, status_code: int | None,
    latency_ms: float, provider_reference: str | None, excerpt: str | None = None, engine: Engine | None = None,
) -> str:
    """Record one attempt's outcome under the claim's token. SENT keeps the price reserved at claim (that
    reservation is the charge); FAILED refunds it in the same transaction. A retry or a failure whose token is
    stale (the lease ran out and another claim took the row) changes nothing and moves no money: "stale".
    An accepted send is recorded whatever the row says by now (the truth is never dropped)."""
    with UnitOfWork(engine) as uow:
        x = uow.execute
        if isinstance(decision, Succeeded):
            # A webhook's 2xx IS its delivery; providers confirm later with a receipt.
            accepted = accept_truth(uow, c.id, final="DELIVERED" if c.channel == "webhook" else "SENT",
                                    provider_reference=provider_reference, sent_key=idempotency_key(c))
            outcome = accepted.outcome
            if outcome == "sent" and decision.already_processed:
                outcome = "already_processed"
            _attempt(uow, c, worker, started, outcome, status_code, None, latency_ms, excerpt)
        elif isinstance(decision, Retry):
            matched = x(sa.text(
                "UPDATE notifications SET next_attempt_at = now() + make_interval(secs => :d), leased_until = NULL, "
                "last_error_class = :e WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok "
                "RETURNING id, next_attempt_at"),
                {"d": decision.delay_seconds, "e": decision.error_class, "id": c.id, "tok": c.claim_token}).first()
            outcome = "retry" if matched else "stale"
            _attempt(uow, c, worker, started, outcome, status_code, decision.error_class, latency_ms, excerpt,
                     matched.next_attempt_at if matched else None)
        else:
            assert isinstance(decision, Fail)
            # Only a contract problem needs a human; exhausted retries are simply FAILED.
            settled = settle_unsent(
                uow, c.id, c.claim_token, status="FAILED", error_class=decision.error_class,
                review="needs_review" if decision.review else None, refund_reason=f"refund: {decision.error_class}",
                intent_why=f"failed: {decision.error_class}")
            outcome = "failed" if settled else "stale"
            _attempt(uow, c, worker, started, outcome, status_code, decision.error_class, latency_ms, excerpt)
        apply_pending(uow, c.id)  # receipts that came before this record
        uow.commit()
    return outcome
