"""What a claim returns, and the one decision both stores share: may this claimed row go now, the common way?

`Claim` and `SendContext` are read from ONE row of `sql.CLAIM` (the lease, the fence token and everything the floor
rules and the send need). `plan` answers with a `Take` — the cap slot, the template version and the price that
`sql.TAKE` takes in one statement — or None for anything else (suppress, defer, a cap slot of another day, a
superseded nudge, a cancelled campaign, a one-time code past its end of life): that goes the long way,
long_way.py's `_decide_and_take`, which settles it in the same transaction. Pure: no unit of work, no SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from domain.ledger import otp
from domain.ledger.floor import FloorDecision, Send, floor_decision
from domain.ledger.render import render
from domain.orders.envelope import Envelope

# Which order status each event is about: checked again at send time (eligibility).
EVENT_REQUIRES_STATUS = {"order.approved": ("approved", "fulfilled"), "order.cancelled": ("cancelled",),
                         "order.fulfilled": ("fulfilled",)}

_CLAIM_FIELDS = ("id", "tenant_id", "recipient", "channel", "lane", "template", "payload", "dedupe_key", "cost_cents",
                 "attempts", "max_attempts", "event_id", "order_id", "order_status", "intent_id", "intent_status",
                 "intent_step", "lead_step", "reserved_cents", "cap_day", "claim_token", "provider_key",
                 "campaign_status", "created_at")
# A tenant endpoint's state at claim time (absent from rows of other kinds).
_ENDPOINT_FIELDS = ("endpoint_id", "ep_found", "ep_disabled", "ep_disabled_reason", "ep_open_until")
# A one-time code's end of life (absent from rows of other kinds): the floor suppresses a code claimed after it.
_CODE_FIELDS = ("otp_expires_at",)


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
    # The ledger's partition key, read by the claim: every later statement on the row names its month with it.
    created_at: datetime | None = None
    intent_id: int | None = None
    intent_status: str | None = None
    intent_step: str | None = None
    lead_step: str | None = None
    reserved_cents: int = 0
    cap_day: date | None = None
    # A tenant's webhook endpoint (None: the system-wide receiver, or not a webhook): is it still there, enabled,
    # why it was disabled, and until when its breaker defers sends. Its URL and secrets are read at send time only.
    endpoint_id: int | None = None
    ep_found: bool = False
    ep_disabled: bool = False
    ep_disabled_reason: str | None = None
    ep_open_until: datetime | None = None
    otp_expires_at: datetime | None = None
    # The breaker's half-open probe this claim took (what it wrote as the breaker's time; None: it took none). Set
    # by the long way when it hands the claim out; giving the claim back gives the probe back (long_way.give_back).
    probe_until: datetime | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> Claim:
        env = None
        if row.get("event_id") is not None and row.get("event_type") is not None:
            env = Envelope(
                event_id=row["event_id"], tenant_id=row["tenant_id"], aggregate_type=row["aggregate_type"],
                aggregate_id=row["aggregate_id"], aggregate_revision=row["aggregate_revision"],
                event_type=row["event_type"], schema_version=row["schema_version"], occurred_at=row["occurred_at"],
                request_id=row["request_id"], causation_id=row["causation_id"], actor_ref=row["actor_ref"],
                payload=row["event_payload"])
        return cls(**{k: row[k] for k in _CLAIM_FIELDS},
                   **{k: row[k] for k in _ENDPOINT_FIELDS + _CODE_FIELDS if row.get(k) is not None}, envelope=env)


@dataclass(frozen=True)
class SendContext:
    """The recipient's floor rules and contact point, their cap counts around today, the template and a code's
    nonce, read by the claim's own statement (`found` False: no such recipient, or a webhook)."""

    found: bool
    timezone: str = "UTC"
    quiet_start: time | None = None
    quiet_end: time | None = None
    daily_cap: int | None = None
    opted_out: tuple[str, ...] = ()
    email: str | None = None
    phone: str | None = None
    taken_by_day: Mapping[str, int] | None = None
    template_version: int | None = None
    template_body: str | None = None
    otp_nonce: str | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> SendContext:
        if not row["rcp_found"]:
            return cls(False)
        return cls(True, row["rcp_timezone"], row["rcp_quiet_start"], row["rcp_quiet_end"], row["rcp_daily_cap"],
                   tuple(row["rcp_opted_out"] or ()), row["rcp_email"], row["rcp_phone"], row["taken_by_day"] or {},
                   row["template_version"], row["template_body"], row["otp_nonce"])

    def contact(self, channel: str) -> str | None:
        return self.email if channel == "email" else self.phone

    def taken_on(self, day: date) -> int:
        return int((self.taken_by_day or {}).get(day.isoformat(), 0))


def claim_params(notification_id: int, lease_seconds: float, now: datetime,
                 created_at: datetime | None = None) -> dict[str, Any]:
    """`sql.CLAIM`'s parameters (`sql.CLAIM_IN_MONTH`'s with the row's `created_at`): the cap counts of the UTC days
    around `now` hold every local day there is."""
    utc_day = now.astimezone(ZoneInfo("UTC")).date()
    return {"id": notification_id, "created_at": created_at, "lease": lease_seconds, "otp_template": otp.TEMPLATE,
            "day_from": utc_day - timedelta(days=1), "day_to": utc_day + timedelta(days=1)}


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


@dataclass(frozen=True)
class Exhausted(Suppressed):
    """Settled FAILED at claim, not sent: the claim would have run past `max_attempts` (the last attempt's lease
    ran out without an answer). `reason` is that attempt's error class."""


ClaimResult = Ready | Suppressed | Deferred


@dataclass(frozen=True)
class Take:
    """The common case: send now, once `sql.TAKE` has taken the cap slot of `day` (None: none needed), kept the
    template version and held `cents` (0: held since an earlier attempt, or free)."""

    day: date | None
    cap: int
    cents: int
    template_version: int | None
    contact: str | None = None
    body: str | None = None

    @property
    def takes_nothing(self) -> bool:
        return self.day is None and self.cents == 0 and self.template_version is None

    def params(self, claim: Claim) -> dict[str, Any]:
        return {"tenant_id": claim.tenant_id, "recipient": claim.recipient, "day": self.day, "cap": self.cap,
                "cents": self.cents, "id": claim.id, "created_at": month_key(claim),
                "reason": f"{claim.channel} {claim.template}", "template_version": self.template_version}


def month_key(claim: Claim) -> datetime:
    """The row's `created_at` (the ledger's partition key), which every statement after the claim names beside its
    id. Never None: a statement matching `created_at = NULL` would match nothing and raise nothing — a take or a
    record silently lost — so a claim that does not carry it fails here, loudly."""
    if claim.created_at is None:
        raise ValueError(f"claim of message {claim.id} carries no created_at: it was not read by a claim statement")
    return claim.created_at


def idempotency_key(claim: Claim) -> str:
    """The key the provider dedupes on: the dedupe key, or the replay's own key after a bounce."""
    return claim.provider_key or claim.dedupe_key


def still_eligible(claim: Claim) -> bool:
    """Send-time eligibility: the order is still in a state this event is about."""
    if claim.envelope is None or claim.order_id is None:
        return True
    want = EVENT_REQUIRES_STATUS.get(claim.envelope.event_type)
    return want is None or claim.order_status in want


def endpoint_closed(claim: Claim) -> bool:
    """Not a tenant endpoint's row, or its endpoint is there, enabled and its breaker closed: it may go as usual."""
    return claim.endpoint_id is None or (claim.ep_found and not claim.ep_disabled and claim.ep_open_until is None)


def superseded(claim: Claim) -> bool:
    """A journey nudge whose intent was cancelled, or whose lead has moved past its step, must not go out."""
    return claim.intent_id is not None and (claim.intent_status == "cancelled" or claim.lead_step != claim.intent_step)


def attempts_used_up(claim: Claim) -> bool:
    """The claim counted one attempt more than the row may make: the last attempt's lease ran out unanswered and
    this is a re-claim. It must not run (the long way settles the row FAILED)."""
    return claim.attempts > claim.max_attempts


def local_day(now: datetime, tz: str) -> date:
    return now.astimezone(ZoneInfo(tz)).date()


def price_to_hold(claim: Claim) -> int:
    return 0 if claim.reserved_cents > 0 or claim.cost_cents <= 0 else claim.cost_cents


def final_status(claim: Claim) -> str:
    """What an accepted send makes the row: a webhook's 2xx IS its delivery; a provider confirms later (a receipt)."""
    return "DELIVERED" if claim.channel == "webhook" else "SENT"


def holds_slot(claim: Claim, day: date) -> bool:
    """The row holds its cap slot for `day` (a slot of an earlier day does not count for today's send)."""
    return claim.cap_day == day


def holds_stale_slot(claim: Claim, day: date) -> bool:
    """The row holds a cap slot of another day than `day` (an earlier attempt's): it is given back before a send."""
    return claim.cap_day is not None and not holds_slot(claim, day)


def takes_slot(claim: Claim, context: SendContext, day: date) -> bool:
    """The send must take a cap slot first: the recipient has a daily cap, it is not a one-time code, and the row
    holds none for `day`."""
    return context.daily_cap is not None and claim.lane != "critical" and not holds_slot(claim, day)


def webhook_decision(claim: Claim, now: datetime) -> FloorDecision:
    """The floor rules for a webhook: a system, not a person (no quiet hours, cap or contact point)."""
    return floor_decision(now=now, lane=claim.lane, channel=claim.channel, still_eligible=still_eligible(claim),
                          opted_out_channels=(), sent_today=0, daily_cap=None, tz="UTC",
                          quiet_start=None, quiet_end=None)


def person_decision(claim: Claim, context: SendContext, now: datetime, day: date,
                    sent_today: int) -> FloorDecision:
    """The floor rules for a message to a person, on their local `day` with `sent_today` counted against their cap
    (0 when the row holds its slot already)."""
    return floor_decision(
        now=now, lane=claim.lane, channel=claim.channel, still_eligible=still_eligible(claim),
        opted_out_channels=context.opted_out, sent_today=0 if holds_slot(claim, day) else sent_today,
        daily_cap=context.daily_cap, tz=context.timezone, quiet_start=context.quiet_start,
        quiet_end=context.quiet_end, code_expires_at=claim.otp_expires_at)


def plan(claim: Claim, context: SendContext, now: datetime) -> Take | None:
    """A `Take` when the row may go now and only needs its slot, version and price; None: the long way decides."""
    if attempts_used_up(claim):
        return None
    if superseded(claim) or claim.campaign_status == "cancelled" or not endpoint_closed(claim):
        return None
    if claim.channel == "webhook":
        return Take(None, 0, price_to_hold(claim), None) if isinstance(webhook_decision(claim, now), Send) else None
    contact = context.contact(claim.channel)
    if not context.found or not contact:
        return None
    day = local_day(now, context.timezone)
    if holds_stale_slot(claim, day):
        return None  # it is given back first: the long way
    if not isinstance(person_decision(claim, context, now, day, context.taken_on(day)), Send):
        return None
    take_slot = takes_slot(claim, context, day)
    if take_slot and (context.daily_cap or 0) <= 0:
        return None
    body = None
    if context.template_body is not None:
        data = dict(claim.payload)
        if claim.template == otp.TEMPLATE:
            data["code"] = otp.derive_code(context.otp_nonce) if context.otp_nonce else ""
        body = render(context.template_body, data)
    return Take(day if take_slot else None, context.daily_cap or 0, price_to_hold(claim), context.template_version,
                contact, body)
