"""A tenant endpoint's circuit breaker at work, inside the claim's and the record's own transactions (claims.py).

At claim: a row whose endpoint's breaker is open is deferred until it closes — not attempted, so not an attempt —
except the one probe taken when its time is up (half-open). At record: a 2xx closes the breaker and ends the run of
failures; a failure adds to the run, and `domain/endpoints/breaker.py` decides whether the breaker opens or, after
sustained failure, the endpoint is disabled. Disabling settles what the endpoint still owes (its rows no live lease
holds; a leased one is settled by its own claim next time) SUPPRESSED `endpoint_disabled` with the reason in plain
words, records an operator alert in the audit log (`auto-disable webhook endpoint`, counted on /metrics as
`outbox_endpoints_auto_disabled_total`), all in the record's transaction.

Only a claim's own answer counts: the record calls `note_attempt` only when its guarded write matched (a stale
claim, whose lease ran out, moves no breaker).
"""

from __future__ import annotations

from datetime import UTC, datetime

from domain import logs
from domain.access import actions
from domain.db import UnitOfWork
from domain.delivery.claimed import Claim
from domain.endpoints import store
from domain.endpoints.breaker import Disable, Open, Thresholds, after_failure
from domain.ledger.write import settle_unsent_where

ALERT_ACTOR = "system:circuit-breaker"
ALERT_ACTION = "auto-disable webhook endpoint"
log = logs.get_logger("outbox.circuit")


def defer_until(uow: UnitOfWork, c: Claim, now: datetime) -> datetime | None:
    """None: send (the breaker is closed, or this claim holds the probe); else defer the row until then."""
    if c.endpoint_id is None or c.ep_open_until is None:
        return None
    if c.ep_open_until > now:
        return c.ep_open_until
    return store.take_probe(uow, c.tenant_id, c.endpoint_id, now, Thresholds.from_settings().cooldown)


def note_attempt(uow: UnitOfWork, c: Claim, *, ok: bool, error_class: str | None, started: datetime) -> None:
    if c.endpoint_id is None:
        return
    if ok:
        store.note_success(uow, c.tenant_id, c.endpoint_id)
        return
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
