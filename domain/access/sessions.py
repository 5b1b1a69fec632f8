"""Dashboard sessions that every tab of a browser shares: an HttpOnly, SameSite=Strict cookie holding a random token
(only its SHA-256 is stored, in `operator_sessions`).

A login never puts the token in a websocket message: the login handler mints a one-time *ticket* (valid
`TICKET_SECONDS`, usable once), the page posts it to `POST /api/session`, and that HTTP answer sets the cookie — a new
token at every login (the old session, if the browser had one, ends there: rotation). The session row keeps the ticket's
hash, by which the tab that logged in adopts it; every other tab reads the cookie off its websocket. Logout ends the
session in the database, so every other tab of that browser loses it at its next step, and clears the cookie.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.cookies import CookieError, SimpleCookie
from typing import Final
from urllib.parse import unquote, urlsplit

from sqlalchemy.engine import Engine

from domain.access import sql
from domain.access.auth import Principal, principal_of_operator
from domain.db import UnitOfWork

COOKIE: Final = "outbox_session"
SESSION_TTL: Final = timedelta(hours=12)
TICKET_SECONDS: Final = 60
_TOKEN_CHARS: Final = 43  # secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Session:
    token_hash: str
    principal: Principal


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _well_formed(token: str) -> bool:
    return len(token) == _TOKEN_CHARS and all(c.isascii() and (c.isalnum() or c in "-_") for c in token)


def cookie_token(cookie_header: str) -> str:
    """The session token in a Cookie header ('' when there is none or it is malformed). Pure."""
    try:
        jar = SimpleCookie(cookie_header or "")
    except CookieError:
        return ""
    morsel = jar.get(COOKIE)
    token = morsel.value if morsel is not None else ""
    return token if _well_formed(token) else ""


def mint_ticket(operator_id: int, now: datetime | None = None, engine: Engine | None = None) -> str:
    """A one-time ticket for the operator who just proved their password in this tab."""
    now = now or datetime.now(UTC)
    ticket = secrets.token_urlsafe(32)
    with UnitOfWork(engine) as uow:
        uow.execute(sql.INSERT_SESSION, {"h": token_hash(ticket), "o": operator_id, "kind": "ticket", "now": now,
                                         "exp": now + timedelta(seconds=TICKET_SECONDS), "th": None})
        uow.commit()
    return ticket


def exchange_ticket(ticket: str, previous_token: str = "", now: datetime | None = None,
                    engine: Engine | None = None) -> str | None:
    """The ticket spent (once, within its time) for a new session token; the browser's previous session ends in
    the same commit. None for an unknown, spent or expired ticket (nothing changes then)."""
    if not _well_formed(ticket):
        return None
    now = now or datetime.now(UTC)
    token = secrets.token_urlsafe(32)
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SPEND_TICKET, {"h": token_hash(ticket), "now": now}).first()
        if row is None:
            return None
        if _well_formed(previous_token):
            uow.execute(sql.END_PREVIOUS_SESSION, {"h": token_hash(previous_token), "now": now})
        uow.execute(sql.INSERT_SESSION, {"h": token_hash(token), "o": row.operator_id, "kind": "session", "now": now,
                                         "exp": now + SESSION_TTL, "th": token_hash(ticket)})
        uow.commit()
    return token


def live_session(hashed: str, now: datetime | None = None, engine: Engine | None = None) -> Principal | None:
    """The operator behind a live session (by the token's hash), with role and tenant as they are now."""
    if not hashed:
        return None
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.LIVE_SESSION, {"h": hashed, "now": now or datetime.now(UTC)}).first()
    return principal_of_operator(row) if row is not None else None


def bought_with(ticket_hash: str, now: datetime | None = None,
                engine: Engine | None = None) -> tuple[str, Principal] | None:
    """The live session a ticket was spent for, and its operator: how the tab that logged in (whose websocket
    opened before the cookie existed) adopts the session — it alone knows the ticket's hash (a backend-only var)."""
    if not ticket_hash:
        return None
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.SESSION_BOUGHT_WITH, {"t": ticket_hash, "now": now or datetime.now(UTC)}).first()
    return (str(row.token_hash), principal_of_operator(row)) if row is not None else None


def end_session(hashed: str, now: datetime | None = None, engine: Engine | None = None) -> None:
    with UnitOfWork(engine) as uow:
        uow.execute(sql.END_SESSION, {"h": hashed, "now": now or datetime.now(UTC)})
        uow.commit()


def _local_path(target: str) -> bool:
    parts = urlsplit(target)
    return (target.startswith("/") and not target.startswith("//") and "\\" not in target and not parts.scheme
            and not parts.netloc and not any(ord(c) < 32 for c in target))


def safe_next(raw: str | None, default: str) -> str:
    """Where to go after login: a path on this site only (never `//evil`, a scheme, or a backslash trick — checked
    as given and once more decoded). Pure."""
    target = raw or ""
    if (len(target) > 2000 or not _local_path(target) or not _local_path(unquote(target))
            or urlsplit(target).path.rstrip("/") == "/login"):
        return default
    return target
