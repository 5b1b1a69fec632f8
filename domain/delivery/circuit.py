"""A tenant endpoint's circuit breaker at work, inside the claim's and the record's own transactions (long_way.py).

At claim: a row whose endpoint's breaker is open is deferred until it closes — not attempted, so not an attempt —
except the one probe taken when its time is up (half-open). The probe is taken last, after every floor rule and the
money, so it goes to a claim that will send; a claim the worker gives back gives its probe back with it. At record:
a 2xx closes the breaker and ends the run of failures; a failure adds to the run, and `domain/endpoints/breaker.py`
decides whether the breaker opens or, after sustained failure, the endpoint is disabled. Disabling settles what the
endpoint still owes (its rows no live lease holds; a leased one is settled by its own claim next time) SUPPRESSED
`endpoint_disabled` with the reason in plain words, records an operator alert in the audit log (`auto-disable
webhook endpoint`, counted on /metrics as `outbox_endpoints_auto_disabled_total`), all in the record's transaction.

Only a claim's own answer counts: the record calls `note_attempt` only when its guarded write matched (a stale
claim, whose lease ran out, moves no breaker).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from domain import logs
from domain.access import actions
from domain.db import UnitOfWork
from domain.delivery.plan import Claim
from domain.endpoints import store
from domain.endpoints.breaker import Disable, Open, Thresholds, after_failure
from domain.ledger import metering
from domain.ledger.write import settle_unsent_where

ALERT_ACTOR = "system:circuit-breaker"
ALERT_ACTION = "auto-disable webhook endpoint"
log = logs.get_logger("outbox.circuit")


def open_until(c: Claim, now: datetime) -> datetime | None:
    """Until when the breaker defers this row (None: closed, or its time is up and a probe may go). Pure: the probe
    itself is taken last, by `take_probe`, once every floor rule and the money said the claim will send."""
    if c.endpoint_id is None or c.ep_open_until is None or c.ep_open_until <= now:
        return None
    return c.ep_open_until


def take_probe(uow: UnitOfWork, c: Claim, now: datetime) -> Claim | datetime:
    """Half-open: the one probe, for a claim that will send. Answers the claim to send — carrying the probe it took
    (`probe_until`), so that giving the claim back gives the probe back — or, when another claim holds the probe,
    until when to defer. A claim whose breaker was closed is answered as it is."""
    if c.endpoint_id is None or c.ep_open_until is None:
        return c
    until = now + Thresholds.from_settings().cooldown
    if store.take_probe(uow, c.tenant_id, c.endpoint_id, now, until):
        return replace(c, probe_until=until)
    held = store.breaker_until(uow, c.tenant_id, c.endpoint_id)
    return held if held is not None and held > now else c  # closed meanwhile (a success): send as usual


def give_back_probe(uow: UnitOfWork, c: Claim) -> None:
    """The claim will not send after all (the worker gave it back): its probe goes back with it, so the next claim
    probes now instead of a whole cooldown later."""
    if c.endpoint_id is not None and c.probe_until is not None and c.ep_open_until is not None:
        store.give_back_probe(uow, c.tenant_id, c.endpoint_id, c.probe_until, c.ep_open_until)


def note_attempt(uow: UnitOfWork, c: Claim, *, ok: bool, error_class: str | None, started: datetime) -> None:
    if c.endpoint_id is None:
        return
    if ok:
        store.note_success(uow, c.tenant_id, c.endpoint_id)
        return
    # One lock order with the claim's (the balance, then the endpoint's row for the probe): this failure may
    # disable the endpoint, which gives back what its owed rows hold — the tenant's balance. Taken here, before the
    # endpoint's row, a probe's claim waits for this record instead of deadlocking against it.
    metering.lock_balance(uow, c.tenant_id)
    failing = store.note_failure(uow, c.tenant_id, c.endpoint_id, started)
    if failing is None:
        return  # disabled or deleted meanwhile: nothing left to count
    now = datetime.now(UTC)
    decision = after_failure(failing.streak, failing.failing_since, now, Thresholds.from_settings(), c.endpoint_id,
                             error_class or "unknown")
    if isinstance(decision, Open):
        store.open_breaker(uow, c.tenant_id, c.endpoint_id, decision.until)
    elif isinstance(decision, Disable):
        _disable(uow, c.tenant_id, c.endpoint_id, decision.why)


def _disable(uow: UnitOfWork, tenant_id: int, endpoint_id: int, why: str) -> None:
    url = store.auto_disable(uow, tenant_id, endpoint_id, why)
    if url is None:
        return  # disabled already: one alert per disabling
    settled = settle_unsent_where(uow, endpoint=(tenant_id, endpoint_id), reason="endpoint_disabled", detail=why,
                                  refund_reason="refund: endpoint disabled")
    actions.record(uow, tenant_id=tenant_id, actor_ref=ALERT_ACTOR, action=ALERT_ACTION,
                   target=f"endpoint {endpoint_id} → {url}",
                   note=f"{why}; {len(settled)} message(s) it still owed settled unsent (endpoint_disabled). "
                        "Fix the endpoint, then enable it on /endpoints.")
    log.warning("endpoint disabled automatically", tenant=tenant_id, endpoint_id=endpoint_id,
                settled=len(settled))
