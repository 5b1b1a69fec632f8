"""Session state shared by every page. The tenant lives only in backend-only vars set at login."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import reflex as rx

from dashboard import routes
from domain.auth import LockedOut, login_operator, operator_now


def _reset_tree(state: rx.State) -> None:
    state.reset()
    for sub in state.substates.values():
        _reset_tree(sub)


class AuthState(rx.State):
    # Backend-only (leading underscore): never sent to the browser, never settable from it.
    _tenant_id: int = 0
    _actor_ref: str = ""
    _oncall: bool = False
    _operator_id: int = 0
    display_name: str = ""
    tenant_label: str = ""
    oncall: bool = False  # display only; every handler re-checks the backend-only `_oncall`
    login_error: str = ""
    logging_in: bool = False

    @rx.var
    def logged_in(self) -> bool:
        return bool(self.display_name)

    @rx.event
    async def login(self, form: dict[str, str]):  # type: ignore[no-untyped-def]
        self.logging_in = True
        self.login_error = ""
        yield
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
        self._oncall = self.oncall = p.oncall
        self.tenant_label = f"tenant {p.tenant_id}"
        yield rx.redirect(routes.ORDERS)

    async def _fresh(self) -> bool:
        """Re-read role and tenant before a privileged action; a removed operator is logged out on the spot."""
        if not self._operator_id:
            return False
        p = await asyncio.to_thread(operator_now, self._operator_id)
        if p is None:
            self._tenant_id, self._oncall, self.oncall = 0, False, False
            return False
        self._tenant_id, self._actor_ref, self._oncall, self.oncall = p.tenant_id, p.actor_ref, p.oncall, p.oncall
        return True

    @rx.event
    def logout(self):  # type: ignore[no-untyped-def]
        """Forget the operator AND everything every page loaded for them: the next person at this tab starts from
        an empty session."""
        _reset_tree(self)
        return rx.redirect(routes.LOGIN)

    @rx.event
    def require_login(self):  # type: ignore[no-untyped-def]
        if not self._tenant_id:
            return rx.redirect(routes.LOGIN)
        return None

    @rx.event
    def go_home(self):  # type: ignore[no-untyped-def]
        return rx.redirect(routes.ORDERS if self._tenant_id else routes.LOGIN)
