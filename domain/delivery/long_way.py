"""The long way of a claim and a record: every case the workers' store's common case (store.py, store_batch.py) does
not settle, written once against a `UnitOfWork` — a floor rule that suppresses or defers, a cap, the money short, a
breaker, a late truth, a receipt pending. Status machine: QUEUED -> SENT -> DELIVERED | FAILED; QUEUED -> FAILED |
SUPPRESSED.

Where it runs: the `*_on(uow, ...)` steps run inside their caller's transaction. The workers run them on their own
connection, in the very transaction their fast path opened (`domain.db.run_sync`: one store, one driver — async
psycopg, no thread, no second connection): a claim the plan sends this way is settled before that claim's COMMIT, a
record that matched nothing is taken up where the record's statement left it. `claim`, `settle_claimed`, `record`,
`give_back` and `channel_of` are the same steps, each in a transaction of its own on the SQLAlchemy engine, for sync
callers (the tests, an operator's command).

`claim` is ONE transaction: the lease, the floor rules at send time (eligibility, opt-out, quiet hours, cap), and —
for a message that may go — its cap slot and its price taken with guarded updates (domain/ledger/metering.py). It
settles what must not go (SUPPRESSED with its reason, or deferred to the end of quiet hours) in that same transaction.
`record` settles the attempt: SENT keeps the money, FAILED gives it back; only contract errors go to review.
The common case of each is one statement (domain/delivery/sql.py `CLAIM` then `TAKE`; sql_record.py `RECORD_SENT` or
`RECORD_RETRY`), decided by plan.py's `plan`.

Fencing: every claim takes the row's next `claim_token`; every write that follows — suppress, defer, retry, fail —
is guarded by it, and money moves only when that guarded update matched (domain/ledger/write.py). A worker
whose lease ran out and whose row another worker claimed changes nothing but its own attempt line ("stale"). The one
exception is an accepted send: that is the truth and is recorded whatever the row says (write.accept_truth).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery import circuit, sql, sql_record
from domain.delivery.plan import (
    Claim,
    ClaimResult,
    Deferred,
    Exhausted,
    Ready,
    SendContext,
    Suppressed,
    Take,
    attempts_used_up,
    claim_params,
    final_status,
    holds_stale_slot,
    idempotency_key,
    local_day,
    month_key,
    person_decision,
    plan,
    superseded,
    takes_slot,
    webhook_decision,
)
from domain.delivery.retry import Fail, Retry, RetryDecision, Succeeded
from domain.ledger import metering, reasons
from domain.ledger.floor import Defer, Send, Suppress
from domain.ledger.templates import render_for_send
from domain.ledger.write import accept_truth, settle_receipts, settle_unsent

__all__ = ["BulkRoute", "channel_of", "channel_of_on", "claim", "claim_on", "give_back", "give_back_on", "record",
           "record_on", "record_params", "refused_take", "settle_claimed", "take_for_send", "take_or_decide"]



@dataclass(frozen=True)
class BulkRoute:
    """Where a bulk row's pace comes from: its channel's bucket, and its tenant's (with the tenant's own cap)."""

    channel: str
    tenant_id: int
    tenant_rate: float | None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> BulkRoute:
        rate = row["tenant_rate"]
        return cls(str(row["channel"]), int(row["tenant_id"]), None if rate is None else float(rate))


def channel_of(notification_id: int, engine: Engine | None = None,
               created_at: datetime | None = None) -> BulkRoute | None:
    """The route of a row still owed (the bulk lane takes its tenant's and channel's tokens before claiming)."""
    with UnitOfWork(engine) as uow:
        return channel_of_on(uow, notification_id, created_at)


def channel_of_on(uow: UnitOfWork, notification_id: int, created_at: datetime | None = None) -> BulkRoute | None:
    stmt = sql.CHANNEL_OF.sa if created_at is None else sql.CHANNEL_OF_IN_MONTH.sa
    row = uow.execute(stmt, {"id": notification_id, "created_at": created_at}).first()
    return None if row is None else BulkRoute.from_mapping(dict(row._mapping))


def claim(notification_id: int, lease_seconds: float, now: datetime, worker: str = "worker",
          engine: Engine | None = None, created_at: datetime | None = None) -> ClaimResult | None:
    """None: not owed now (done, leased by another worker, paused or not yet due). `created_at`: the row's month,
    when its wake-up carries it (the claim then reads that partition alone)."""
    with UnitOfWork(engine) as uow:
        result = claim_on(uow, notification_id, lease_seconds, now, worker, created_at)
        uow.commit()
    return result


def claim_on(uow: UnitOfWork, notification_id: int, lease_seconds: float, now: datetime, worker: str,
             created_at: datetime | None = None) -> ClaimResult | None:
    """`claim`'s steps in the caller's transaction."""
    stmt = sql.CLAIM.sa if created_at is None else sql.CLAIM_IN_MONTH.sa
    found = uow.execute(stmt, claim_params(notification_id, lease_seconds, now, created_at)).first()
    if found is None:
        return None
    row = dict(found._mapping)
    claim, context = Claim.from_mapping(row), SendContext.from_mapping(row)
    return take_or_decide(uow, claim, context, plan(claim, context, now), now, worker)


def settle_claimed(claim: Claim, context: SendContext, now: datetime, worker: str = "worker",
                   refused: Take | None = None, engine: Engine | None = None) -> ClaimResult:
    """`take_or_decide` in a transaction of its own, for a row already claimed (its lease and token committed)."""
    with UnitOfWork(engine) as uow:
        result = take_or_decide(uow, claim, context, refused, now, worker)
        uow.commit()
    return result


def take_or_decide(uow: UnitOfWork, claim: Claim, context: SendContext, take: Take | None, now: datetime,
                   worker: str) -> ClaimResult:
    """For a row this transaction claimed: a `Take`, the common case's take (`take_for_send`; a batch's take that its
    savepoint refused is tried again here: at the cap or without the money it is suppressed with its reason); None:
    the long way decides what `plan` left out (`_decide_and_take`). Every write is fenced by the claim's token."""
    if take is None:
        return _decide_and_take(uow, claim, context, now, worker)
    return take_for_send(uow, claim, take, worker, now)


def take_for_send(uow: UnitOfWork, claim: Claim, take: Take, worker: str, now: datetime) -> ClaimResult:
    """The common case in one statement (`sql.TAKE`): at the cap, or without the money, it is suppressed."""
    if not take.takes_nothing:
        got = uow.execute(sql.TAKE.sa, take.params(claim)).one()
        if not (got.slot_ok and got.paid):
            return refused_take(uow, claim, bool(got.slot_ok), worker, now)
    return Ready(claim, take.contact, take.body)


def refused_take(uow: UnitOfWork, claim: Claim, slot_ok: bool, worker: str, now: datetime) -> Suppressed:
    """`sql.TAKE` answered no, in this transaction (the workers' fast claim's, or `take_for_send`'s): no cap slot
    left today, or not the money. Suppressed with that reason; whatever the take did hold is given back."""
    return _suppress(uow, claim, worker, "insufficient_balance" if slot_ok else "daily_cap", now)


def _decide_and_take(uow: UnitOfWork, claim: Claim, context: SendContext, now: datetime, worker: str) -> ClaimResult:
    """The long way: everything `plan` leaves out (suppress, defer, a cap slot of another day), settled here."""
    if attempts_used_up(claim):
        return _used_up(uow, claim)
    if superseded(claim):
        return _suppress(uow, claim, worker, "superseded", now)
    if claim.campaign_status == "cancelled":  # a row left to a worker at cancel comes back here after a retry
        return _suppress(uow, claim, worker, "campaign_cancelled", now)
    if claim.channel == "webhook":
        decision = webhook_decision(claim, now)
        if isinstance(decision, Suppress):
            return _suppress(uow, claim, worker, decision.reason, now)
        if claim.endpoint_id is not None:  # a tenant's own endpoint: still there, enabled, its breaker closed?
            if not claim.ep_found:
                return _suppress(uow, claim, worker, "endpoint_deleted", now)
            if claim.ep_disabled:
                return _suppress(uow, claim, worker, "endpoint_disabled", now, claim.ep_disabled_reason)
            until = circuit.open_until(claim, now)
            if until is not None:
                return _defer(uow, claim, until, _breaker_holds(claim, until))
        if not _take_money(uow, claim):
            return _suppress(uow, claim, worker, "insufficient_balance", now)
        # Half-open: the one probe goes to a claim that will send, so it is taken after every check (the balance
        # row, then the endpoint's: the record's order too). Deferred for want of it, the row keeps what it holds.
        probe = circuit.take_probe(uow, claim, now)
        if isinstance(probe, datetime):
            return _defer(uow, claim, probe, _breaker_holds(claim, probe))
        return Ready(probe)
    contact = context.contact(claim.channel)
    if not context.found or not contact:
        return _suppress(uow, claim, worker, "no_contact_point", now)
    day = local_day(now, context.timezone)
    taken = uow.execute(sql.CAP_TAKEN, {"tenant_id": claim.tenant_id, "recipient": claim.recipient,
                                        "day": day}).scalar() or 0
    if holds_stale_slot(claim, day):
        metering.release_stale_slot(uow, claim.id)
    decision = person_decision(claim, context, now, day, int(taken))
    if isinstance(decision, Suppress):
        detail = _opt_out_detail(uow, claim) if decision.reason == "opted_out" else None
        if decision.reason == "code_expired" and claim.otp_expires_at is not None:
            detail = reasons.code_expired(claim.otp_expires_at)
        return _suppress(uow, claim, worker, decision.reason, now, detail)
    if isinstance(decision, Defer):
        until_local = decision.until.astimezone(ZoneInfo(context.timezone))
        return _defer(uow, claim, decision.until, f"quiet hours until {until_local:%H:%M} {context.timezone}")
    assert isinstance(decision, Send)
    # The cap slot and the money, each once per row, each a guarded update: the pure rule above is the fast
    # answer, these are what hold under concurrency.
    if takes_slot(claim, context, day) and not metering.take_cap_slot(
            uow, tenant_id=claim.tenant_id, recipient=claim.recipient, day=day, cap=context.daily_cap or 0,
            notification_id=claim.id):
        return _suppress(uow, claim, worker, "daily_cap", now)
    body = render_for_send(uow, notification_id=claim.id, template=claim.template, channel=claim.channel,
                           payload=claim.payload)
    if not _take_money(uow, claim):  # last: the balance row is locked last and held shortest (metering.reserve)
        return _suppress(uow, claim, worker, "insufficient_balance", now)
    return Ready(claim, contact, body)


def _breaker_holds(claim: Claim, until: datetime) -> str:
    return f"endpoint {claim.endpoint_id} keeps failing: its circuit breaker holds sends until {until:%H:%M:%S} UTC"


# The last attempt of a row re-claimed after its lease ran out got no answer in time: its failure, as the record of
# a timeout at the last attempt would settle it (FAILED, not for review).
LOST_ATTEMPT = "timeout"


def _used_up(uow: UnitOfWork, claim: Claim) -> Exhausted:
    """No claim runs past `max_attempts`: this claim's count is given back (the row made `max_attempts`) and the row
    settles FAILED as its last attempt's failure would, under this claim's token; what it holds is given back, and
    a receipt kept meanwhile is settled with it (settle_unsent). A late answer of that attempt is still the truth
    (write.accept_truth records it)."""
    uow.execute(sql.GIVE_BACK_ATTEMPT, {"id": claim.id, "created_at": month_key(claim),
                                        "claim_token": claim.claim_token})
    settle_unsent(uow, claim.id, claim.claim_token, status="FAILED", error_class=LOST_ATTEMPT,
                  refund_reason=f"refund: {LOST_ATTEMPT}", intent_why=f"failed: {LOST_ATTEMPT}")
    return Exhausted(replace(claim, attempts=claim.max_attempts), LOST_ATTEMPT)


def _take_money(uow: UnitOfWork, claim: Claim) -> bool:
    if claim.reserved_cents > 0 or claim.cost_cents <= 0:
        return True  # held since an earlier attempt, or free
    return metering.reserve(uow, tenant_id=claim.tenant_id, notification_id=claim.id,
                            cost_cents=claim.cost_cents, reason=f"{claim.channel} {claim.template}")


def _opt_out_detail(uow: UnitOfWork, claim: Claim) -> str | None:
    """"opted out of SMS on 2026-11-28 by support": the change that did it, from the recipient's change log."""
    change = uow.execute(sql.OPT_OUT_CHANGE, {"tenant_id": claim.tenant_id, "recipient": claim.recipient,
                                              "channel_like": f"%{claim.channel}%"}).first()
    if change is None:
        return None
    channel = claim.channel.upper() if claim.channel == "sms" else claim.channel
    return f"opted out of {channel} on {change.changed_at:%Y-%m-%d} by {change.actor_ref}"


def _attempt(uow: UnitOfWork, claim: Claim, worker: str, started: datetime, outcome: str,
             status_code: int | None, error_class: str | None, latency_ms: float | None,
             excerpt: str | None = None, next_attempt_at: datetime | None = None) -> None:
    # One line per claim; a stale claim's line may meet a later claim's number (a deferral gives the count back).
    uow.execute(sql_record.ATTEMPT_LINE.sa, {
        "id": claim.id, "created_at": month_key(claim), "attempt_no": claim.attempts, "worker": worker,
        "started": started, "outcome": outcome, "code": status_code, "error_class": error_class,
        "latency": latency_ms, "excerpt": excerpt, "next_attempt_at": next_attempt_at})


def _suppress(uow: UnitOfWork, claim: Claim, worker: str, reason: str, now: datetime,
              detail: str | None = None) -> Suppressed:
    """Settled unsent with its reason (and its detail in plain words); whatever it held is given back, and a
    receipt kept while it was owed is settled with it (`settle_unsent`)."""
    settle_unsent(uow, claim.id, claim.claim_token, status="SUPPRESSED", reason=reason, detail=detail,
                  intent_why=f"suppressed: {reason.replace('_', ' ')}")
    _attempt(uow, claim, worker, now, "suppressed", None, reason, None)
    return Suppressed(claim, reason)


def _defer(uow: UnitOfWork, claim: Claim, until: datetime, detail: str) -> Deferred:
    """Quiet hours: not an attempt, so the attempt count is given back; what it holds stays held."""
    uow.execute(sql.DEFER, {"until": until, "detail": detail, "id": claim.id, "created_at": month_key(claim),
                            "claim_token": claim.claim_token})
    return Deferred(claim, until)


def give_back(claim: Claim, engine: Engine | None = None) -> bool:
    """The worker will not send under this claim (too little of its lease is left to try): the attempt is given
    back and the row is owed again at once; what it holds stays held. Guarded by the token like every write. A
    breaker probe the claim took goes back with it (fenced by what the probe wrote): the next claim probes."""
    with UnitOfWork(engine) as uow:
        done = give_back_on(uow, claim)
        uow.commit()
    return done


def give_back_on(uow: UnitOfWork, claim: Claim) -> bool:
    done = uow.execute(sql.GIVE_BACK, {"id": claim.id, "created_at": month_key(claim),
                                       "claim_token": claim.claim_token}).first()
    circuit.give_back_probe(uow, claim)
    return done is not None


def record(
    claim: Claim, decision: RetryDecision, *, worker: str, started: datetime, status_code: int | None,
    latency_ms: float, provider_reference: str | None, excerpt: str | None = None, engine: Engine | None = None,
) -> str:
    """`record_on` in a transaction of its own."""
    with UnitOfWork(engine) as uow:
        outcome = record_on(uow, claim, decision, worker=worker, started=started, status_code=status_code,
                            latency_ms=latency_ms, provider_reference=provider_reference, excerpt=excerpt)
        uow.commit()
    return outcome


def record_on(
    uow: UnitOfWork, claim: Claim, decision: RetryDecision, *, worker: str, started: datetime,
    status_code: int | None, latency_ms: float, provider_reference: str | None, excerpt: str | None = None,
    matched: bool | None = None,
) -> str:
    """Record one attempt's outcome under the claim's token. SENT keeps the price reserved at claim (that
    reservation is the charge); FAILED refunds it in the same transaction. A retry or a failure whose token is
    stale (the lease ran out and another claim took the row) changes nothing and moves no money: "stale".
    An accepted send is recorded whatever the row says by now (the truth is never dropped). A tenant endpoint's
    answer moves its circuit breaker in the same transaction (circuit.py).
    `matched`: this transaction already ran the common case's statement for it (`RECORD_SENT` for an accepted send,
    `RECORD_RETRY` for a retry: the workers' fast record) and that is what it answered; None: run it here."""
    kw: dict[str, Any] = {"worker": worker, "started": started, "status_code": status_code,
                          "latency_ms": latency_ms, "provider_reference": provider_reference, "excerpt": excerpt}
    if isinstance(decision, Succeeded) and matched is None:
        matched = bool(uow.execute(sql_record.RECORD_SENT.sa, record_params(claim, decision, **kw)).scalar_one())
    elif isinstance(decision, Retry) and matched is None:
        matched = bool(uow.execute(sql_record.RECORD_RETRY.sa, record_params(claim, decision, **kw)).scalar_one())
    if isinstance(decision, Succeeded) and matched:
        outcome = "already_processed" if decision.already_processed else "sent"  # the common case, one statement
        settle_receipts(uow, [claim.id])  # receipts kept before this record (the ways below settle their own)
    elif isinstance(decision, Succeeded):
        # A webhook's 2xx IS its delivery; providers confirm later with a receipt.
        accepted = accept_truth(uow, claim.id, final=final_status(claim),
                                provider_reference=provider_reference, sent_key=idempotency_key(claim))
        outcome = accepted.outcome
        if outcome == "sent" and decision.already_processed:
            outcome = "already_processed"
        _attempt(uow, claim, worker, started, outcome, status_code, None, latency_ms, excerpt)
    elif isinstance(decision, Retry):
        outcome = "retry" if matched else _settle_outlived_code(uow, claim, decision)
        if outcome != "retry":
            _attempt(uow, claim, worker, started, outcome, status_code, decision.error_class, latency_ms, excerpt)
    else:
        assert isinstance(decision, Fail)
        # Only a contract problem needs a human; exhausted retries are simply FAILED.
        settled = settle_unsent(
            uow, claim.id, claim.claim_token, status="FAILED", error_class=decision.error_class,
            review="needs_review" if decision.review else None, refund_reason=f"refund: {decision.error_class}",
            intent_why=f"failed: {decision.error_class}")
        outcome = "failed" if settled else "stale"
        _attempt(uow, claim, worker, started, outcome, status_code, decision.error_class, latency_ms, excerpt)
    if claim.endpoint_id is not None and outcome != "stale":  # the endpoint's health moves on this claim's answer
        circuit.note_attempt(uow, claim, ok=isinstance(decision, Succeeded), started=started,
                             error_class=None if isinstance(decision, Succeeded) else decision.error_class)
    return outcome


def _settle_outlived_code(uow: UnitOfWork, claim: Claim, decision: Retry) -> str:
    """A one-time code's retry that would come due at or after the code's end of life is not scheduled
    (`sql_record.RECORD_RETRY` refuses it): the row is settled SUPPRESSED `code_expired` under the claim's token
    and what it holds is given back. "stale" when that is not why the retry matched nothing."""
    params = {"id": claim.id, "claim_token": claim.claim_token, "delay": decision.delay_seconds}
    expires_at = uow.execute(sql_record.CODE_OUTLIVED, params).scalar() if claim.otp_expires_at is not None else None
    if expires_at is None or not settle_unsent(
            uow, claim.id, claim.claim_token, status="SUPPRESSED", reason="code_expired",
            detail=reasons.code_outlived(expires_at), refund_reason="refund: code_expired",
            intent_why="suppressed: code expired"):
        return "stale"
    return "code_expired"


def record_params(claim: Claim, decision: RetryDecision, *, worker: str, started: datetime, status_code: int | None,
                  latency_ms: float, provider_reference: str | None, excerpt: str | None) -> dict[str, Any]:
    """`sql_record.RECORD_SENT`'s and `sql_record.RECORD_RETRY`'s parameters (both stores)."""
    params: dict[str, Any] = {"id": claim.id, "created_at": month_key(claim), "attempt_no": claim.attempts,
                              "worker": worker, "started": started, "code": status_code, "latency": latency_ms,
                              "excerpt": excerpt}
    if isinstance(decision, Succeeded):
        params.update(final=final_status(claim), provider_reference=provider_reference, key=idempotency_key(claim),
                      outcome="already_processed" if decision.already_processed else "sent")
    elif isinstance(decision, Retry):
        params.update(delay=decision.delay_seconds, error_class=decision.error_class, claim_token=claim.claim_token)
    return params
