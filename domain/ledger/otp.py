"""One-time codes on the critical lane: exempt from quiet hours and the marketing cap, metered like any message.

The code is never stored and never travels in a job, a log, a metric or the dashboard: it is derived at send time
as HMAC(OUTBOX_OTP_SECRET, the row's random nonce), rendered into the provider request only, and kept as an HMAC
of (row, code) to check what the person types. The same row always derives the same code, so a redelivery of the
same message (at least once) never strands the person with a code we no longer accept.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.ledger import sql
from domain.ledger.send import SendRefused, recipient_ref
from domain.ledger.write import Ledgered, NewMessage, ledger_message
from domain.settings import get_settings

TEMPLATE: Final[str] = "otp_code"
CHANNELS: Final[tuple[str, ...]] = ("sms", "whatsapp")
LANE: Final[str] = "critical"
TTL: Final[timedelta] = timedelta(minutes=10)
MAX_TRIES: Final[int] = 5


def derive_code(nonce: str) -> str:
    digest = hmac.new(get_settings().otp_secret.encode(), f"otp:{nonce}".encode(), hashlib.sha256).digest()
    return f"{int.from_bytes(digest[:8], 'big') % 1_000_000:06d}"


def _check_hash(notification_id: int, code: str) -> str:
    return hmac.new(get_settings().otp_secret.encode(), f"check:{notification_id}:{code}".encode(),
                    hashlib.sha256).hexdigest()


def request(tenant_id: int, recipient_id: int, channel: str, now: datetime,
            engine: Engine | None = None) -> Ledgered | None:
    """Ledger one code message (its own dedupe key: every request is a new code). None: no such recipient."""
    if channel not in CHANNELS:
        raise SendRefused("unknown_channel", f"one-time codes go by {' or '.join(CHANNELS)}, not {channel!r}")
    with UnitOfWork(engine) as uow:
        ref = recipient_ref(uow, tenant_id, recipient_id)
        if ref is None:
            return None
        row = ledger_message(uow, NewMessage(tenant_id=tenant_id, recipient=ref, channel=channel, lane=LANE,
                                             template=TEMPLATE, subject=f"otp-{uuid.uuid4().hex}"))
        nonce = secrets.token_hex(16)
        uow.execute(sql.INSERT_OTP, {"n": row.notification_id, "t": tenant_id, "nonce": nonce,
             "h": _check_hash(row.notification_id, derive_code(nonce)), "exp": now + TTL})
        uow.commit()
    return row


def code_for_send(uow: UnitOfWork, notification_id: int) -> str | None:
    """At send time only: the code to render into the provider request."""
    nonce = uow.execute(sql.OTP_NONCE, {"n": notification_id}).scalar()
    return derive_code(nonce) if nonce else None


@dataclass(frozen=True)
class Verification:
    outcome: str  # valid | invalid | expired | locked | used | not_found


def verify(tenant_id: int, notification_id: int, code: str, now: datetime,
           engine: Engine | None = None) -> Verification:
    """Once per code, at most MAX_TRIES guesses, within its lifetime."""
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.OTP_FOR_CHECK, {"t": tenant_id, "n": notification_id}).first()
        if r is None:
            return Verification("not_found")
        if r.verified_at is not None:
            return Verification("used")
        if r.tries >= MAX_TRIES:
            return Verification("locked")
        if r.expires_at < now:
            return Verification("expired")
        ok = hmac.compare_digest(r.code_hash, _check_hash(notification_id, code))
        uow.execute(sql.OTP_TRIED, {"ok": ok, "n": notification_id})
        uow.commit()
    return Verification("valid" if ok else "invalid")
