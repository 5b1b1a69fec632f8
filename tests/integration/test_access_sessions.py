"""Cookie sessions on real PostgreSQL and the real ASGI app.

Invariants: a login ticket is spent once, within its time, for an HttpOnly SameSite=Strict cookie; a new login
ends the browser's previous session (rotation); logout ends the session for every tab and clears the cookie; only
hashes are stored; a removed operator's session logs nobody in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from domain.access import sessions
from domain.db import get_engine


def _operator(login: str = "alice") -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT id FROM operators WHERE login = :l"), {"l": login}).scalar_one())


async def test_a_ticket_buys_one_strict_httponly_cookie_and_logout_ends_it(client):
    op = _operator()
    ticket = sessions.mint_ticket(op)
    r = await client.post("/api/session", json={"ticket": ticket})
    assert r.status_code == 200, r.text
    set_cookie = r.headers["set-cookie"]
    assert set_cookie.startswith(f"{sessions.COOKIE}=") and "HttpOnly" in set_cookie
    assert "SameSite=strict" in set_cookie or "SameSite=Strict" in set_cookie
    token = r.cookies[sessions.COOKIE]
    p = sessions.live_session(sessions.token_hash(token))
    assert p is not None and p.operator_id == op and p.tenant_id == 42
    # The tab that logged in finds the session by its ticket's hash (it never sees the cookie's token).
    adopted = sessions.bought_with(sessions.token_hash(ticket))
    assert adopted is not None and adopted[0] == sessions.token_hash(token) and adopted[1].operator_id == op
    assert sessions.bought_with(sessions.token_hash("y" * 43)) is None and sessions.bought_with("") is None
    again = await client.post("/api/session", json={"ticket": ticket})
    assert again.status_code == 401 and again.json()["error"] == "unauthorized"  # spent
    with get_engine().connect() as c:
        stored = {row[0] for row in c.execute(sa.text("SELECT token_hash FROM operator_sessions"))}
    assert token not in stored and ticket not in stored  # only hashes
    # A second login in the same browser: a new token, and the old one ends (rotation).
    r2 = await client.post("/api/session", json={"ticket": sessions.mint_ticket(op)},
                           cookies={sessions.COOKIE: token})
    token2 = r2.cookies[sessions.COOKIE]
    assert token2 != token and sessions.live_session(sessions.token_hash(token)) is None
    assert sessions.live_session(sessions.token_hash(token2)) is not None
    # Logout: ended in the database (every tab), cookie cleared.
    out = await client.post("/api/session/end", cookies={sessions.COOKIE: token2})
    assert out.status_code == 200 and 'Max-Age=0' in out.headers["set-cookie"]
    assert sessions.live_session(sessions.token_hash(token2)) is None


async def test_expired_forged_or_orphaned_tickets_and_sessions_log_nobody_in(client):
    op = _operator()
    old = sessions.mint_ticket(op, now=datetime.now(UTC) - timedelta(seconds=sessions.TICKET_SECONDS + 1))
    assert (await client.post("/api/session", json={"ticket": old})).status_code == 401
    assert (await client.post("/api/session", json={"ticket": "x" * 43})).status_code == 401
    assert (await client.post("/api/session", json={"ticket": "\x00"})).status_code == 422
    assert (await client.post("/api/session", json={})).status_code == 422
    token = sessions.exchange_ticket(sessions.mint_ticket(op))
    assert token is not None
    later = datetime.now(UTC) + sessions.SESSION_TTL + timedelta(seconds=1)
    assert sessions.live_session(sessions.token_hash(token), now=later) is None  # expired
    with get_engine().begin() as c:
        c.execute(sa.text("DELETE FROM operators WHERE id = :i"), {"i": op})
    assert sessions.live_session(sessions.token_hash(token)) is None  # the operator is gone: so is the session
