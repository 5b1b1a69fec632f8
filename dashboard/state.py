"""Session state shared by every page. The tenant lives only in backend-only vars set at login."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import quote

import reflex as rx

from dashboard import live, routes
from dashboard.events import Followup, event
from domain.access import peers, roles, sessions
from domain.access.auth import LockedOut, Principal, login_operator
from domain.access.roles import Act
from domain.settings import get_settings


class AuthState(rx.State):
    # Backend-only (leading underscore): never sent to the browser, never settable from it.
    _tenant_id: int = 0  # 0 = no tenant: nobody logged in, or a platform operator (roles.NO_TENANT)
    _actor_ref: str = ""
    _role: str = ""
    _operator_id: int = 0
    # The browser's cookie session (its token's hash): shared by every tab; ended at logout for all of them.
    _session_hash: str = ""
    _ticket_hash: str = ""  # the login ticket this tab minted, until the page spent it
    display_name: rx.Field[str] = rx.field("")
    tenant_label: rx.Field[str] = rx.field("")
    # Display only (which buttons to show); every handler asks `_allowed`, which re-reads the role.
    role: rx.Field[str] = rx.field("")
    login_error: rx.Field[str] = rx.field("")
    logging_in: rx.Field[bool] = rx.field(False)
    session_gone: rx.Field[bool] = rx.field(False)  # this tab was logged in and its session ended: to /login

    @rx.var
    def logged_in(self) -> bool:
        return bool(self.display_name)

    @rx.var
    def oncall(self) -> bool:
        return self.role == roles.ONCALL

    @rx.var
    def platform(self) -> bool:
        return self.role == roles.PLATFORM

    @rx.var
    def may_replay(self) -> bool:
        return roles.may(self.role, Act.REPLAY)

    @rx.var
    def may_change(self) -> bool:
        """Orders and preferences: everyone of a tenant but support (display only, like `role`)."""
        return roles.may(self.role, Act.ORDERS)

    @event
    async def login(self, form: dict[str, str]) -> AsyncIterator[Followup]:
        self.logging_in = True
        self.login_error = ""
        yield None
        # The websocket's peer (rxconfig keeps Reflex's own X-Forwarded-For reading off), or behind one of
        # OUTBOX_TRUSTED_PROXIES the client it forwarded: the throttle counts people, not our nginx.
        peer = str(getattr(self.router.session, "client_ip", "") or "unknown")
        client = peers.client_address(peer, self.router.headers.raw_headers.get("x-forwarded-for"),
                                      get_settings().trusted_networks)
        p = await asyncio.to_thread(login_operator, str(form.get("login", "")).strip(), str(form.get("password", "")),
                                    client)
        self.logging_in = False
        if isinstance(p, LockedOut):
            wait = max(1, int((p.until - datetime.now(UTC)).total_seconds()) + 1)
            self.login_error = (f"Too many failed attempts. Try again in {wait} seconds "
                                f"(after {p.until:%H:%M:%S} UTC).")
            return
        if p is None:
            self.login_error = "That login and password do not match an operator."
            return
        # The session lives in an HttpOnly cookie that only an HTTP answer can set: a one-time ticket goes to the
        # page, the page spends it at POST /api/session, and `adopt` then takes the session that ticket bought
        # (found by the ticket's hash, which only this tab's server state knows).
        ticket = await asyncio.to_thread(sessions.mint_ticket, p.operator_id or 0)
        self._ticket_hash = sessions.token_hash(ticket)
        self.logging_in = True
        yield rx.call_script(
            "fetch('/api/session', {method: 'POST', credentials: 'same-origin', "
            "headers: {'content-type': 'application/json'}, "
            f"body: JSON.stringify({{ticket: {json.dumps(ticket)}}})}})"
            ".then(r => r.ok).catch(() => false)", callback=AuthState.adopt)

    @event
    async def adopt(self, started: bool) -> Followup:
        """The page spent this tab's ticket: take the session it bought and go where the login was asked from."""
        ticket_hash, self._ticket_hash = self._ticket_hash, ""
        found = await asyncio.to_thread(sessions.bought_with, ticket_hash) if started is True else None
        self.logging_in = False
        if found is None:
            self.login_error = "Could not start a session: this browser must accept cookies from this site."
            return None
        self._become(found[1], found[0])
        return rx.redirect(sessions.safe_next(self.router.url.query_parameters.get("next"), self._home()))

    def _home(self) -> str:
        if not self._operator_id:
            return routes.LOGIN
        return routes.ORDERS if roles.has_tenant(self._role) else routes.OPS

    def _become(self, p: Principal | None, hashed: str = "") -> bool:
        if p is None:
            # A tab that was logged in and finds its session gone (a logout in another tab, an expiry, an operator
            # removed) goes to the login page: `session_gone` mounts the shell's redirect, whichever handler found
            # it — the page's buttons are not left dead under an empty operator.
            was_in = bool(self.display_name)
            self._tenant_id, self._role, self._operator_id, self._session_hash = 0, "", 0, ""
            self._assign_changed(role="", display_name="", tenant_label="", session_gone=was_in)
            return False
        self._tenant_id, self._actor_ref, self._role = p.tenant_id, p.actor_ref, p.role
        self._operator_id = p.operator_id or 0
        self._assign_changed(role=p.role, display_name=p.display_name, session_gone=False,
                             tenant_label=(p.tenant_name or f"tenant {p.tenant_id}") if roles.has_tenant(p.role)
                             else "platform on-call")
        if hashed:
            self._session_hash = hashed
        return True

    def _assign_changed(self, **shown: object) -> None:
        """Assign only what changed: Reflex sends every assigned var (and the computed vars that read it) to the
        browser, and a change to this state re-renders every page under it — the role check every command makes
        must not cost a full re-render of the page when nothing about the operator changed."""
        for name, value in shown.items():
            if getattr(self, name) != value:
                setattr(self, name, value)

    async def _fresh(self) -> bool:
        """Re-read the session, role and tenant from the database: a logout in another tab, a removed or demoted
        operator, an expired session — each loses every right on the spot."""
        if not self._session_hash:
            return self._become(None)
        return self._become(await asyncio.to_thread(sessions.live_session, self._session_hash))

    async def _restore(self) -> bool:
        """The browser's cookie (sent with this tab's websocket) first — a new tab, a reload, a newer login in
        another tab — else the session this tab already holds."""
        token = sessions.cookie_token(self.router.headers.cookie)
        hashed = sessions.token_hash(token) if token else ""
        if hashed and hashed != self._session_hash:
            p = await asyncio.to_thread(sessions.live_session, hashed)
            if p is not None:
                return self._become(p, hashed)
        return await self._fresh()

    @staticmethod
    async def _session_ended(hashed: str) -> bool:
        """For a live task, outside the state lock: has this tab's session (its hash, taken when the task started)
        ended in the database — a logout in another tab, an expiry, an operator removed? A task pushes nothing
        after that: its tab still holds the tenant, but its operator no longer may see it."""
        return not hashed or await asyncio.to_thread(sessions.live_session, hashed) is None

    def _forget_if(self, session: tuple[int, int]) -> None:
        """A live task found its session ended: the tab forgets its operator (as any handler's `_fresh` would),
        unless it has logged in as someone else meanwhile. Call under the state lock."""
        if self._session() == session:
            self._become(None)

    def _session(self) -> tuple[int, int]:
        """Who this tab is logged in as. A live task takes it when it starts and compares before it assigns
        anything: after a logout or another login in the tab, it pushes nothing more."""
        return self._tenant_id, self._operator_id

    async def _allowed(self, act: Act) -> bool:
        """The one gate for a privileged action, asked inside the handler every time (the browser can send any
        event with any arguments; hiding a button proves nothing)."""
        return await self._fresh() and roles.may(self._role, act)

    @event
    async def logout(self) -> list[Followup]:
        """End the session for every tab of this browser (in the database, and the cookie), and forget everything
        every page loaded for this operator: the next person at this tab starts from an empty session."""
        live.end_watch(self.router.session.client_token)  # this tab's live task stops before it pushes again
        if self._session_hash:
            await asyncio.to_thread(sessions.end_session, self._session_hash)
        # Reflex resets substates too, and every page's state derives from this one.
        self.reset()  # type: ignore[no-untyped-call]  # Reflex left BaseState.reset unannotated
        # The cookie is cleared by the HTTP answer; the session is already over in the database for every tab.
        return [rx.call_script("fetch('/api/session/end', {method: 'POST', credentials: 'same-origin'})"),
                rx.redirect(routes.LOGIN)]

    def _login_url(self) -> str:
        """The login page, coming back to this page after login. A full load of /ledger arrives as /ledger/ (the
        static export's folders): come back without it."""
        here = (self.router.url.path.rstrip("/") or "/") + (f"?{self.router.url.query}" if self.router.url.query
                                                             else "")
        return f"{routes.LOGIN}?next={quote(here, safe='')}" if here not in ("", "/") else routes.LOGIN

    @event
    def to_login(self) -> Followup:
        """The shell's "session ended" notice, as it mounts: to the login page (a read: nothing changes; the same
        address `require_login` gives, by the client's router)."""
        return rx.redirect(self._login_url())

    @event
    async def require_login(self) -> Followup:
        """First on_load of every page: no live session → the login page, which comes back here after login; a
        platform operator (no tenant) has only the Ops page."""
        if not await self._restore():
            return rx.redirect(self._login_url())
        if not roles.has_tenant(self._role) and self.router.url.path.rstrip("/") != routes.OPS:
            return rx.redirect(routes.OPS)
        return None

    @event
    async def go_home(self) -> Followup:
        await self._restore()
        return rx.redirect(self._home())
