"""Session state shared by every page. The tenant lives only in backend-only vars set at login."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import reflex as rx

from dashboard import live, routes
from dashboard.events import Followup, event
from domain.access import roles
from domain.access.auth import LockedOut, login_operator, operator_now
from domain.access.roles import Act


class AuthState(rx.State):
    # Backend-only (leading underscore): never sent to the browser, never settable from it.
    _tenant_id: int = 0  # 0 = no tenant: nobody logged in, or a platform operator (roles.NO_TENANT)
    _actor_ref: str = ""
    _role: str = ""
    _operator_id: int = 0
    display_name: rx.Field[str] = rx.field("")
    tenant_label: rx.Field[str] = rx.field("")
    role: rx.Field[str] = rx.field("")  # display only (which buttons to show); every handler asks `_allowed`, which re-reads the role
    login_error: rx.Field[str] = rx.field("")
    logging_in: rx.Field[bool] = rx.field(False)

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
        client = str(getattr(self.router.session, "client_ip", "") or "unknown")
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
        self._tenant_id, self._actor_ref, self.display_name = p.tenant_id, p.actor_ref, p.display_name
        self._operator_id = p.operator_id or 0
        self._role = self.role = p.role
        self.tenant_label = f"tenant {p.tenant_id}" if roles.has_tenant(p.role) else "platform on-call"
        yield rx.redirect(self._home())

    def _home(self) -> str:
        if not self._operator_id:
            return routes.LOGIN
        return routes.ORDERS if roles.has_tenant(self._role) else routes.OPS

    async def _fresh(self) -> bool:
        """Re-read role and tenant from the database; a removed operator loses every right on the spot."""
        if not self._operator_id:
            return False
        p = await asyncio.to_thread(operator_now, self._operator_id)
        if p is None:
            self._tenant_id, self._role, self.role, self._operator_id = 0, "", "", 0
            return False
        self._tenant_id, self._actor_ref, self._role, self.role = p.tenant_id, p.actor_ref, p.role, p.role
        return True

    def _session(self) -> tuple[int, int]:
        """Who this tab is logged in as. A live task takes it when it starts and compares before it assigns
        anything: after a logout or another login in the tab, it pushes nothing more."""
        return self._tenant_id, self._operator_id

    async def _allowed(self, act: Act) -> bool:
        """The one gate for a privileged action, asked inside the handler every time (the browser can send any
        event with any arguments; hiding a button proves nothing)."""
        return await self._fresh() and roles.may(self._role, act)

    @event
    def logout(self) -> Followup:
        """Forget the operator AND everything every page loaded for them: the next person at this tab starts from
        an empty session."""
        live.end_watch(self.router.session.client_token)  # this tab's live task stops before it pushes again
        # Reflex resets substates too, and every page's state derives from this one.
        self.reset()  # type: ignore[no-untyped-call]  # Reflex left BaseState.reset unannotated
        return rx.redirect(routes.LOGIN)

    @event
    def require_login(self) -> Followup:
        """First on_load of every page: no operator → the login page; a platform operator (no tenant) has only
        the Ops page."""
        if not self._operator_id:
            return rx.redirect(routes.LOGIN)
        if not roles.has_tenant(self._role) and self.router.url.path.rstrip("/") != routes.OPS:
            return rx.redirect(routes.OPS)
        return None

    @event
    def go_home(self) -> Followup:
        return rx.redirect(self._home())
