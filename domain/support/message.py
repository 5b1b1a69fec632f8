"""One message, everything support and integrators ask about it: the envelope it came from (redacted), every
attempt (time, outcome, HTTP status, latency, response excerpt, next retry), the receipt, the charge and any refund,
and why it is where it is, in plain words."""

from __future__ import annotations

import dataclasses
import re
import string
from datetime import datetime
from pathlib import PurePath
from typing import Any, Final

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork, as_dicts
from domain.delivery.state import OwedState, read_states
from domain.ledger.reasons import attempt_text, error_text, ledger_reason, message_answer
from domain.ledger.render import render
from domain.support import sql

# Keys whose values are never shown, whatever they hold; and values that look like contact points.
SECRET_KEYS: Final = re.compile(r"(email|phone|mobile|msisdn|address|code|otp|secret|token|password|key|nonce)",
                                re.IGNORECASE)
_CONTACT = re.compile(r"[^@\s]+@[^@\s]+|\+?[0-9][0-9 ().-]{7,}")
REDACTED: Final = "•••"


def redact(value: Any, key: str = "") -> Any:
    """A payload with secrets and contact points replaced (keys kept, so its shape stays readable). Pure."""
    if isinstance(value, dict):
        return {str(k): redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if key and SECRET_KEYS.search(key) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str) and _CONTACT.search(value):
        return _CONTACT.sub(REDACTED, value)
    return value


CODE_MASK: Final = "••••••"


def body_as_sent(body: str, payload: Any) -> str:
    """The text a message was sent with, as its template rendered it at send time — but a one-time code (any
    placeholder named like a secret: `{code}`, `{otp}`, `{token}`…) as CODE_MASK, and the message's data redacted as
    on the rest of the page (contact points and secrets never reach it). The code itself is never stored, so it could
    not be shown anyway; this keeps even its place plain. Pure."""
    data = redact(payload) if isinstance(payload, dict) else {}
    try:
        names = {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(body) if name}
        masked = {**data, **{n: CODE_MASK for n in names if SECRET_KEYS.search(n)}}
        text = render(body, masked)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError):
        # A format the redacted data cannot fill (`{amount:.2f}` over •••): the template's own text, every
        # placeholder left as its name but a secret's.
        text = re.sub(r"\{([^{}]*)\}", lambda f: CODE_MASK if SECRET_KEYS.search(f.group(1)) else f.group(0), body)
    return _CONTACT.sub(REDACTED, text)


def _attempt(a: dict[str, Any], webhook: bool) -> dict[str, Any]:
    """A webhook's attempt in the endpoint page's words (`attempt_text`: 401 is a signature refused, …)."""
    started, finished = a["started_at"], a["finished_at"]
    if webhook:
        words = attempt_text(a["status_code"], a["error_class"], a["response_excerpt"])
    else:
        words = error_text(a["error_class"]) if a["error_class"] else ""
    return {**a, "error_text": words,
            "duration_ms": (finished - started).total_seconds() * 1000 if started and finished else None}


def _reason(m: dict[str, Any], state: OwedState | None) -> str:
    """The line under the answer. An owed row's answer says what holds it now, so an older detail (the quiet hours
    of an earlier deferral) is not repeated beside it; its last error is, unless the answer already names it."""
    if state is None:
        return ledger_reason(m)
    if m["last_error_class"] and state.kind not in ("retrying", "overdue"):
        return f"Last error: {error_text(m['last_error_class'])}"
    return ""


def _once(reason: str, answer: str) -> str:
    """The line under the answer, unless it says what the answer says (a suppressed row's reason is its answer)."""
    def same(text: str) -> str:
        return text.casefold().strip().rstrip(".")
    return "" if same(reason) == same(answer) else reason


def archived(tenant_id: int, notification_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    """Where this tenant's message went when its month was archived (`outbox archive`), in words and parts; None
    when it was never this tenant's or is still in the ledger."""
    from domain.retention.archive import archived_message

    with UnitOfWork(engine) as uow:
        a = archived_message(uow, tenant_id, notification_id)
    if a is None:
        return None
    a = dataclasses.replace(a, file=PurePath(a.file).name)  # the export's name: the server's paths stay its own
    return {"id": notification_id, "month": a.month, "archived_at": a.archived_at.isoformat(), "file": a.file,
            "answer": f"Message #{notification_id} was {a.words()}."}


def message_page(tenant_id: int, notification_id: int, now: datetime,
                 engine: Engine | None = None) -> dict[str, Any] | None:
    """None when this tenant has no such message (another tenant's id reads exactly like a missing one)."""
    with UnitOfWork(engine) as uow:
        n = uow.execute(sql.MESSAGE, {"t": tenant_id, "i": notification_id}).first()
        if n is None:
            return None
        m = dict(n._mapping)
        attempts = as_dicts(uow.execute(sql.ATTEMPTS, {"i": notification_id, "c": m["created_at"]}))
        receipts = as_dicts(uow.execute(sql.RECEIPTS, {"r": m["provider_reference"], "c": m["channel"]})) \
            if m["provider_reference"] else []
        money = as_dicts(uow.execute(sql.MONEY, {"t": tenant_id, "i": notification_id}))
        envelope = uow.execute(sql.ENVELOPE, {"t": tenant_id, "e": m["event_id"]}).first() if m["event_id"] else None
        # The body as it went out: only for a row rendered for a send that was not then refused (a suppressed row
        # never reached anyone, even when its template was rendered before the balance said no).
        template_body = uow.execute(sql.TEMPLATE_BODY, {"n": m["template"], "v": m["template_version"]}).scalar() \
            if m["template_version"] is not None and m["status"] != "SUPPRESSED" else None
        # What holds it while it is owed, read in this same transaction (no state: it is not owed).
        state = read_states(uow, [notification_id], now, tenant_id).get(notification_id) \
            if m["status"] == "QUEUED" else None
    # Resolved by hand: who did it, when and why, from the audit log (the row keeps only that it was).
    # Replayed: who queued it again, when and why (the row keeps only when).
    done = actions.on_target(tenant_id, f"notification {notification_id}", engine) \
        if m["review"] == "resolved" or m["replayed_at"] else []
    resolved = next((a for a in reversed(done) if a["action"] == "resolve"), None) \
        if m["review"] == "resolved" else None
    replayed = next((a for a in reversed(done) if a["action"] == "replay"), None)
    charged = -sum(e["amount_cents"] for e in money if e["kind"] == "reserve")
    refunded = sum(e["amount_cents"] for e in money if e["kind"] == "refund")
    env = dict(envelope._mapping) if envelope is not None else None
    answer = state.text if state else message_answer(m, now)
    if env is not None:
        env["payload"] = redact(env["payload"])
    return {
        "notification_id": m["id"], "channel": m["channel"], "lane": m["lane"], "template": m["template"],
        "template_version": m["template_version"], "status": m["status"], "recipient": m["recipient"],
        "recipient_id": m["recipient_id"], "recipient_name": m["recipient_name"],
        "suppressed_reason": m["suppressed_reason"], "review": m["review"],
        "provider_reference": m["provider_reference"], "job_id": m["job_id"], "event_id": m["event_id"],
        "order_id": m["order_id"], "campaign_id": m["campaign_id"], "campaign_name": m["campaign_name"],
        "lead_id": m["lead_id"], "dedupe_key": m["dedupe_key"], "attempts": m["attempts"],
        "max_attempts": m["max_attempts"], "created_at": m["created_at"], "sent_at": m["sent_at"],
        "settled_at": m["settled_at"], "replayed_at": m["replayed_at"],
        "next_retry_at": m["next_attempt_at"] if m["status"] == "QUEUED" else None,
        "payload": redact(m["payload"]), "envelope": env,
        "attempt_log": [_attempt(a, m["channel"] == "webhook") for a in attempts],
        "receipts": receipts, "receipt": receipts[-1] if receipts else None,
        "money": {"entries": money, "charged_cents": charged, "refunded_cents": refunded,
                  "held_cents": m["reserved_cents"], "cost_cents": m["cost_cents"]},
        "reason": _once(_reason(m, state), answer), "answer": answer,
        "body": body_as_sent(template_body, m["payload"]) if template_body is not None else None,
        "state": state.as_dict() if state else None,
        "resolved_by": None if m["review"] != "resolved" else
        {"actor_ref": resolved["actor_ref"], "at": resolved["at"], "note": resolved["note"]} if resolved else
        {"actor_ref": None, "at": None, "note": None},
        "replayed_by": {"actor_ref": replayed["actor_ref"], "at": replayed["at"], "note": replayed["note"]}
        if replayed else None,
    }
