"""One attempt of one claimed row, as both delivery paths make it (the per-row job in jobs/worker.py, a batch's
row in jobs/batches.py): its deadline inside the lease, the HTTP request (to the system's receiver and providers,
or to a tenant's own endpoint), the answer classified and the retry decided (domain/delivery/retry.py, pure).

The claim before it and the record after it are the store's (domain/delivery/store.py); this module holds no SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any, Final

import httpx

from domain import faults, logs
from domain.delivery import plan, store, store_batch
from domain.delivery.plan import Claim, Ready
from domain.delivery.retry import Outcome, decide_retry
from domain.delivery.signing import signed_headers
from domain.delivery.wakeups import publish_refresh
from domain.endpoints import store as endpoints
from domain.endpoints import urls
from domain.endpoints.signing import signed_headers_all
from domain.orders.envelope import canonical_json
from domain.settings import get_settings
from jobs import dns

# One attempt has one deadline, shorter than its lease: the attempt is recorded (as a timeout, under its own claim
# token) before another worker may claim the row. httpx's timeouts are per phase and would not bound it.
ATTEMPT_SHARE_OF_LEASE: Final = 0.75
# Less than this share of the lease left after the claim (a slow claim: lock waits, a loaded machine): do not
# start a send that could only time out half-sent; give the attempt back and try again at once.
MIN_SEND_SHARE_OF_LEASE: Final = 0.2
HTTP_TIMEOUT: Final = httpx.Timeout(connect=2.0, read=5.0, write=5.0, pool=2.0)
HTTP_LIMITS: Final = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0)
# Bytes of a tenant endpoint's answer read at most (its status, and a JSON answer's `status` if it is that short).
ENDPOINT_ANSWER_MAX: Final = 64 * 1024

log = logs.get_logger("outbox.worker")


def attempt_deadline(lease_seconds: float) -> float:
    """Seconds one send may take: a share of the lease, leaving the rest for the claim and the record."""
    return max(0.05, lease_seconds * ATTEMPT_SHARE_OF_LEASE)


async def send_ready(ctx: dict[str, Any], ready: Ready, claim_started: float,
                     gate: asyncio.Semaphore | None = None) -> store_batch.Attempted | None:
    """Send one claimed row within what is left of its attempt's deadline (counted from its claim, `claim_started`
    a monotonic time) and decide what comes next; None: not sent, its attempt given back (owed again at once) —
    too little of the lease was left, or its tenant endpoint was disabled or deleted since the claim. `gate`: the
    sends in flight it waits its turn among (a batch's, per tenant and endpoint or channel)."""
    settings = get_settings()
    claim = ready.claim
    target = None
    if claim.endpoint_id is not None:  # read now, never carried anywhere: the URL and the live secrets
        target = await store.send_target(ctx["db"], claim.tenant_id, claim.endpoint_id)
    if claim.endpoint_id is None or target is not None:
        async with gate if gate is not None else contextlib.nullcontext():
            deadline = attempt_deadline(settings.lease_seconds) - (time.monotonic() - claim_started)
            if deadline >= settings.lease_seconds * MIN_SEND_SHARE_OF_LEASE:
                started = datetime.now(UTC)
                posted = time.perf_counter()
                outcome, ref = await send(ctx, claim, ready.contact, ready.body, deadline, target)
                latency_ms = (time.perf_counter() - posted) * 1000
                decision = decide_retry(outcome, claim.attempts, claim.max_attempts, settings.backoff_base,
                                        settings.backoff_cap, ctx["rng"])
                return store_batch.Attempted(claim, decision, started, outcome.status_code, latency_ms, ref,
                                             outcome.excerpt, outcome.error)
    await store.give_back(ctx["db"], claim)
    return None


async def send(ctx: dict[str, Any], claim: Claim, contact: str | None, text: str | None,
               deadline: float, target: endpoints.SendTarget | None = None) -> tuple[Outcome, str | None]:
    """The one HTTP request of an attempt, bounded by `deadline` seconds; its answer classified, and the
    reference the other side gave it."""
    try:
        async with asyncio.timeout(deadline):
            if target is not None:
                return await _post_endpoint(ctx, claim, target)
            return await _post(ctx, claim, contact, text)
    except TimeoutError:  # the attempt's deadline (the receiver may have accepted it: the next claim asks again)
        return Outcome(None, error="timeout"), None


async def _post(ctx: dict[str, Any], claim: Claim, contact: str | None, text: str | None) -> tuple[Outcome, str | None]:
    """To the system's receiver: an order's webhook (signed with the system's secret), or a message to a channel's
    provider."""
    settings = get_settings()
    client: httpx.AsyncClient = ctx["http"]
    try:
        if claim.channel == "webhook":
            assert claim.event_id is not None and claim.envelope is not None
            body = canonical_json(claim.envelope.wire()).decode()
            headers = signed_headers(settings.webhook_secret, str(claim.event_id), body)
            headers["Idempotency-Key"] = str(claim.event_id)
            response = await client.post(f"{settings.receiver_url}/webhooks/orders", content=body, headers=headers)
            return _answered(response.status_code, response.text, "result_ref")
        response = await client.post(f"{settings.receiver_url}/providers/{claim.channel}/messages", json={
            "to": contact, "template": claim.template, "body": text, "idempotency_key": plan.idempotency_key(claim),
        })
        return _answered(response.status_code, response.text, "reference")
    except httpx.TransportError as exc:
        return _unanswered(exc), None


async def _post_endpoint(ctx: dict[str, Any], claim: Claim, target: endpoints.SendTarget) -> tuple[Outcome, str | None]:
    """A tenant endpoint's webhook: its URL checked again after a fresh DNS lookup (a name re-pointed at an
    internal address is refused, and nothing is sent), then one POST to the very address checked, signed with
    every live secret of the endpoint. The event id stays the webhook-id: receivers deduplicate on it."""
    try:
        async with asyncio.timeout(dns.DNS_DEADLINE_S):
            verdict = await dns.look_up(claim.tenant_id, target.url)
    except TimeoutError:
        return Outcome(None, error="connection",
                       excerpt=f"the endpoint's name did not resolve within {dns.DNS_DEADLINE_S:.0f} s"), None
    if isinstance(verdict, urls.Refused):
        return Outcome(None, error="url_not_allowed", excerpt=f"refused before sending: {verdict.reason}"), None
    assert claim.event_id is not None and claim.envelope is not None
    body = canonical_json(claim.envelope.wire()).decode()
    headers = signed_headers_all(list(target.secrets), str(claim.event_id), body)
    headers.update({"Idempotency-Key": str(claim.event_id), "content-type": "application/json"})
    req = urls.pinned(target.url, verdict)
    if req.host:
        headers["Host"] = req.host
    client: httpx.AsyncClient = ctx["http"]
    try:  # the answer is read up to a bound: a tenant's endpoint must not fill a shared worker's memory
        async with client.stream("POST", req.url, content=body, headers=headers, follow_redirects=False,
                                 extensions={"sni_hostname": req.sni} if req.sni else None) as response:
            head = b""
            async for chunk in response.aiter_bytes():
                head += chunk
                if len(head) >= ENDPOINT_ANSWER_MAX:
                    break
    except httpx.TransportError as exc:
        return _unanswered(exc), None
    return _answered(response.status_code, head[:ENDPOINT_ANSWER_MAX].decode("utf-8", "replace"), "result_ref")


def _answered(status_code: int, text: str, reference_field: str) -> tuple[Outcome, str | None]:
    """An answer: its status, the `status` of a JSON object answer, its first 200 characters, and the reference
    the other side gave it (`reference_field` of that object). The answer is the other side's (a tenant endpoint's is
    anyone's server): what is kept of it is text PostgreSQL can hold — no NUL, and a reference that is a string (a
    number as its digits; an object, a list, a boolean is none) — or the record it goes into fails, and with it
    every row of its batch."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = {}
    data = parsed if isinstance(parsed, dict) else {}
    return (Outcome(status_code, body_status=data.get("status"), excerpt=_no_nul(text[:200])),
            _reference(data.get(reference_field)))


def _no_nul(text: str) -> str:
    return text.replace("\x00", "")


def _reference(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return _no_nul(str(value)) or None


def _unanswered(exc: httpx.TransportError) -> Outcome:
    """No answer: a timeout, or a connection that failed (what failed kept as the excerpt: a TLS failure reads as
    one)."""
    if isinstance(exc, httpx.TimeoutException):
        return Outcome(None, error="timeout")
    return Outcome(None, error="connection", excerpt=_no_nul(f"{type(exc).__name__}: {exc}"[:200]))


async def armed_from_ops(ctx: dict[str, Any], point: str) -> None:
    """Development only: a one-shot fault armed on /ops ends this process at `point`, like OUTBOX_FAULT does."""
    if await faults.take_armed_crash(ctx["redis"], ctx["lane"], point):
        print(f"fault injected point={point} (armed from ops) pid={os.getpid()}", file=sys.stderr, flush=True)
        os._exit(faults.EXIT_CODE)


async def refresh_views(ctx: dict[str, Any], claim: Claim) -> None:
    """The order's open pages reload (best effort: a page that missed it reloads from the database)."""
    if claim.order_id is None:
        return
    try:
        await publish_refresh(ctx["redis"], claim.tenant_id, claim.order_id, -1, str(claim.event_id),
                              kind="notification")
    except Exception:  # transient by design
        pass
