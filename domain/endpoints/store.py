"""A tenant's webhook endpoints: create (the secret is answered once), list, read, disable, enable, delete,
rotate. Every statement filters on the tenant: another tenant's endpoint is exactly a missing one.

Secrets are `whsec_` + base64 of 24 random bytes (Standard Webhooks). They are kept to sign with, so they are
stored; no read here returns one after `create` and `rotate` answered it. After a rotation the previous secret
keeps signing for `ROTATION_OVERLAP` (both signatures in one `webhook-signature` header), so receivers can switch
without a gap.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.endpoints import sql

ROTATION_OVERLAP: Final = timedelta(hours=24)


def target(endpoint_id: int) -> str:
    """How the audit log names an endpoint (create and delete add ` → <url>`)."""
    return f"endpoint {endpoint_id}"


def last_actions(tenant_id: int, endpoint_ids: list[int], engine: Engine | None = None) -> dict[int, dict[str, Any]]:
    """Per endpoint shown, the last thing someone did to it (create, disable, enable, rotate), from the audit
    log: who, what, when, the note."""
    if not endpoint_ids:
        return {}
    found = actions.last_on_targets(tenant_id, [target(i) for i in endpoint_ids], engine, prefix=True)
    return {i: found[target(i)] for i in endpoint_ids if target(i) in found}


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _public(row: Any, health: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    d = dict(row._mapping)
    now = datetime.now(UTC)
    until = d.pop("previous_secret_until")
    d["rotating_until"] = until if until and until > now else None
    if d["breaker_open_until"] is not None and (not d["enabled"] or d["breaker_open_until"] <= now):
        d["breaker_open_until"] = None  # open only while it defers sends
    h = (health or {}).get(d["id"], {})
    ok, failed = int(h.get("ok_24h") or 0), int(h.get("failed_24h") or 0)
    d["health"] = {"attempts_24h": ok + failed,
                   "success_rate_24h": round(ok / (ok + failed), 4) if ok + failed else None,
                   "last_success_at": h.get("last_success_at"), "last_error": h.get("last_error"),
                   "last_error_at": h.get("last_error_at"),
                   # For the page's plain words (reasons.attempt_text): the last failed attempt's HTTP status and
                   # the first characters of its answer.
                   "last_error_status": h.get("last_error_status"),
                   "last_error_excerpt": h.get("last_error_excerpt")}
    return d


def _health(uow: UnitOfWork, tenant_id: int, endpoint_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per endpoint shown, from its rows' attempts: the last 24 hours' successes and failures, the last success and
    the last error (a stale or suppressed line is neither)."""
    if not endpoint_ids:
        return {}
    return {int(r.endpoint_id): dict(r._mapping)
            for r in uow.execute(sql.HEALTH, {"t": tenant_id, "ids": endpoint_ids})}


def create(tenant_id: int, url: str, description: str, event_types: list[str] | None, actor_ref: str,
           engine: Engine | None = None) -> dict[str, Any]:
    """The new endpoint with its secret: the only answer that ever carries it whole."""
    secret = new_secret()
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.CREATE, {"t": tenant_id, "u": url, "d": description, "e": _json(event_types),
                                       "s": secret}).one()
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="create webhook endpoint",
                       target=f"{target(row.id)} → {url}")
        uow.commit()
    return {**_public(row), "secret": secret}


def _json(v: list[str] | None) -> str | None:
    return None if v is None else json.dumps(v)


def list_endpoints(tenant_id: int, limit: int = 1000, before: int | None = None, after: int | None = None,
                   engine: Engine | None = None) -> list[dict[str, Any]]:
    """Newest first: the endpoints older than `before`, or (oldest first) just newer than `after` — a keyset page,
    each with the health of its own rows only."""
    with UnitOfWork(engine) as uow:
        rows = uow.execute(sql.LIST, {"t": tenant_id, "l": limit, "b": before, "a": after}).all()
        health = _health(uow, tenant_id, [int(r.id) for r in rows])
    return [_public(r, health) for r in rows]


def get(tenant_id: int, endpoint_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.GET, {"t": tenant_id, "i": endpoint_id}).first()
        health = _health(uow, tenant_id, [endpoint_id]) if row else {}
    return _public(row, health) if row else None


def set_enabled(tenant_id: int, endpoint_id: int, enabled: bool, actor_ref: str,
                engine: Engine | None = None, *, note: str = "") -> dict[str, Any] | None:
    """Each call is one audit row with `note` (enabling an enabled endpoint too: someone asked, and said why).
    None: no such endpoint of this tenant, nothing written."""
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SET_ENABLED, {"t": tenant_id, "i": endpoint_id, "on": enabled,
                                            "why": f"endpoint {endpoint_id} was disabled by {actor_ref}"}).first()
        if row is None:
            return None
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref,
                       action="enable webhook endpoint" if enabled else "disable webhook endpoint",
                       target=target(endpoint_id), note=note)
        uow.commit()
    return _public(row)


def delete(tenant_id: int, endpoint_id: int, actor_ref: str, engine: Engine | None = None, *,
           note: str = "") -> bool:
    with UnitOfWork(engine) as uow:
        gone = uow.execute(sql.DELETE, {"t": tenant_id, "i": endpoint_id}).first()
        if gone is None:
            return False
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="delete webhook endpoint",
                       target=f"{target(endpoint_id)} → {gone.url}", note=note)
        uow.commit()
    return True


def rotate(tenant_id: int, endpoint_id: int, actor_ref: str, now: datetime | None = None,
           engine: Engine | None = None, *, note: str = "") -> dict[str, Any] | None:
    """A new secret (answered once); the current one keeps signing beside it for ROTATION_OVERLAP."""
    now = now or datetime.now(UTC)
    secret = new_secret()
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.ROTATE, {"t": tenant_id, "i": endpoint_id, "s": secret,
                                       "until": now + ROTATION_OVERLAP, "now": now}).first()
        if row is None:
            return None
        actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="rotate webhook endpoint secret",
                       target=target(endpoint_id), note=note)
        uow.commit()
    return {**_public(row), "secret": secret}


def signing_secrets(tenant_id: int, endpoint_id: int, now: datetime | None = None,
                    engine: Engine | None = None) -> list[str]:
    """For the sender only: the current secret, and the previous one while its overlap lasts."""
    now = now or datetime.now(UTC)
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SECRETS, {"t": tenant_id, "i": endpoint_id}).first()
    if row is None:
        return []
    out = [row.secret]
    if row.previous_secret and row.previous_secret_until and row.previous_secret_until > now:
        out.append(row.previous_secret)
    return out


# ---- fan-out: inside the order command's transaction ---------------------------------------------------------------
def targets(uow: UnitOfWork, tenant_id: int, event_type: str) -> list[int] | None:
    """The endpoints this event goes to (enabled, and asking for its type), in id order. None: the tenant has no
    endpoint at all, so its events go to the system-wide receiver as before. Never commits."""
    rows = uow.execute(sql.TARGETS, {"t": tenant_id, "et": event_type}).all()
    if not rows:
        return None
    return [int(r.id) for r in rows if r.wants]


def targets_scalar() -> str:
    """`targets` as one SQL scalar over `:t` (the tenant) and `:et` (the event type), for a statement of another
    room to carry in its own result (the order command's guarded update does: the fan-out costs no round trip of
    its own). `targets_from` reads its value."""
    return sql.TARGETS_SCALAR


def targets_from(scalar: list[list[Any]] | None) -> list[int] | None:
    """`targets`, read from the value of `targets_scalar()`."""
    if scalar is None:
        return None
    return [int(ep) for ep, wants in scalar if wants]


# ---- send time: the worker's read -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SendTarget:
    """Where one webhook goes and what signs it, read just before the send; its repr never shows a secret."""

    url: str
    secrets: tuple[str, ...] = field(repr=False)


def send_target(tenant_id: int, endpoint_id: int, now: datetime | None = None,
                engine: Engine | None = None) -> SendTarget | None:
    """The URL and the live secrets (the current one, and the previous one while its overlap lasts) of an enabled
    endpoint of this tenant; None: disabled or gone since the claim."""
    with UnitOfWork(engine) as uow:
        return send_target_on(uow, tenant_id, endpoint_id, now)


def send_target_on(uow: UnitOfWork, tenant_id: int, endpoint_id: int,
                   now: datetime | None = None) -> SendTarget | None:
    now = now or datetime.now(UTC)
    row = uow.execute(sql.SEND_TARGET, {"t": tenant_id, "i": endpoint_id}).first()
    if row is None:
        return None
    live = [row.secret] + ([row.previous_secret] if row.previous_secret and row.previous_secret_until
                           and row.previous_secret_until > now else [])
    return SendTarget(row.url, tuple(live))


# ---- the breaker's bookkeeping: inside the caller's transaction (domain/delivery/circuit.py) ------------------------
@dataclass(frozen=True)
class Failing:
    streak: int
    failing_since: datetime
    url: str


def note_success(uow: UnitOfWork, tenant_id: int, endpoint_id: int) -> None:
    uow.execute(sql.NOTE_SUCCESS, {"t": tenant_id, "i": endpoint_id})


def note_failure(uow: UnitOfWork, tenant_id: int, endpoint_id: int, at: datetime) -> Failing | None:
    """One more failed attempt in the run (the endpoint row stays locked until the caller commits). None: the
    endpoint is disabled or gone: nothing to count."""
    row = uow.execute(sql.NOTE_FAILURE, {"t": tenant_id, "i": endpoint_id, "at": at}).first()
    return None if row is None else Failing(int(row.failure_streak), row.failing_since, str(row.url))


def open_breaker(uow: UnitOfWork, tenant_id: int, endpoint_id: int, until: datetime) -> None:
    uow.execute(sql.OPEN_BREAKER, {"t": tenant_id, "i": endpoint_id, "until": until})


def take_probe(uow: UnitOfWork, tenant_id: int, endpoint_id: int, now: datetime, until: datetime) -> bool:
    """The breaker's time is up: the first claim takes the one probe (True) and holds the breaker open until `until`
    meanwhile. False: another claim took it, or the endpoint is disabled."""
    return uow.execute(sql.TAKE_PROBE, {"t": tenant_id, "i": endpoint_id, "now": now, "until": until}).first() \
        is not None


def breaker_until(uow: UnitOfWork, tenant_id: int, endpoint_id: int) -> datetime | None:
    until: datetime | None = uow.execute(sql.BREAKER_UNTIL, {"t": tenant_id, "i": endpoint_id}).scalar()
    return until


def give_back_probe(uow: UnitOfWork, tenant_id: int, endpoint_id: int, taken_until: datetime,
                    was: datetime) -> bool:
    """A probe taken (the breaker's time moved to `taken_until`) by a claim that will not send: the breaker's time is
    up again (`was`), so the next claim probes. Only while the breaker still says what that probe wrote: once an
    answer moved it, or another claim probed since, nothing changes (False)."""
    return uow.execute(sql.GIVE_BACK_PROBE, {"t": tenant_id, "i": endpoint_id, "taken": taken_until,
                                             "was": was}).first() is not None


def auto_disable(uow: UnitOfWork, tenant_id: int, endpoint_id: int, why: str) -> str | None:
    """Disabled for sustained failure; its URL, or None when it was disabled already (someone else acted first)."""
    url = uow.execute(sql.AUTO_DISABLE, {"t": tenant_id, "i": endpoint_id, "why": why}).scalar()
    return None if url is None else str(url)


def auto_disabled_counts(uow: UnitOfWork) -> dict[int, int]:
    """Endpoints disabled automatically, per tenant, ever (a counter for /metrics, read from the audit log)."""
    return {int(r.tenant_id): int(r.n) for r in uow.execute(sql.AUTO_DISABLED_COUNTS)}


def breakers_open(uow: UnitOfWork) -> int:
    """Enabled endpoints whose breaker defers their sends right now."""
    return int(uow.execute(sql.BREAKERS_OPEN).scalar() or 0)


# ---- a test event (domain/orders/trial.py writes it) and the endpoint's latest attempts (its page) -----------------
TEST_EVENT_TYPE: Final = "outbox.test"


def lock_for_test(uow: UnitOfWork, tenant_id: int, endpoint_id: int) -> bool | None:
    """Inside the test event's transaction: the endpoint locked until commit (two asks take turns); whether it is
    enabled, or None: no such endpoint of this tenant."""
    row = uow.execute(sql.LOCK_FOR_TEST, {"t": tenant_id, "i": endpoint_id}).first()
    return None if row is None else bool(row.enabled)


def latest_attempts(tenant_id: int, endpoint_ids: list[int], per_endpoint: int = 3,
                    engine: Engine | None = None) -> dict[int, list[dict[str, Any]]]:
    """Per endpoint shown, its last `per_endpoint` attempts, newest first (event type, when, outcome, HTTP status,
    error class, the answer's first characters, and the row's status)."""
    if not endpoint_ids:
        return {}
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in endpoint_ids}
    with UnitOfWork(engine) as uow:
        for r in uow.execute(sql.LATEST_ATTEMPTS, {"t": tenant_id, "ids": endpoint_ids, "n": per_endpoint}):
            out[int(r.endpoint_id)].append(dict(r._mapping))
    return out


def latest_tests(tenant_id: int, endpoint_ids: list[int], engine: Engine | None = None) -> dict[int, dict[str, Any]]:
    """Per endpoint shown, its latest test event's row (status, attempts, next try, last error class)."""
    if not endpoint_ids:
        return {}
    with UnitOfWork(engine) as uow:
        return {int(r.endpoint_id): dict(r._mapping) for r in uow.execute(
            sql.LATEST_OF_TEMPLATE, {"t": tenant_id, "ids": endpoint_ids, "tpl": TEST_EVENT_TYPE})}
