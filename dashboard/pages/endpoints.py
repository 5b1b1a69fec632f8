"""Webhook endpoints: the tenant's endpoints (URL, event types, enabled — or why not —, rotation under way, circuit
breaker, health from the attempts: success rate over 24 h, last success, last error); on-call adds one (its
`whsec_…` secret shown once, in that answer only), disables, enables, rotates (the new secret shown once; both sign
for 24 h) and deletes after a confirmation. Every handler asks `_allowed(Act.ENDPOINTS)` itself and acts on the
session's tenant only. The URL guard is the API's (domain/endpoints/urls.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, card, data_table, error_callout, shell
from dashboard.events import Followup, event
from dashboard.format import when
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.endpoints import store, urls
from domain.ledger.reasons import error_text
from domain.support import pages

PAGE_SIZE = 50


def _health(h: dict[str, Any]) -> tuple[str, str]:
    """("97% of 120 attempts in 24 h", "last success … · last error: the receiver had a server error at …")."""
    rate = "no attempts in 24 h" if h["success_rate_24h"] is None else \
        f"{h['success_rate_24h']:.0%} of {h['attempts_24h']} attempts in 24 h"
    last = [f"last success {when(h['last_success_at'])}" if h["last_success_at"] else "no success yet"]
    if h["last_error"]:
        last.append(f"last error: {error_text(h['last_error'])} at {when(h['last_error_at'])}")
    return rate, " · ".join(last)


def _row(e: dict[str, Any]) -> dict[str, str]:
    rate, last = _health(e["health"])
    return {"id": str(e["id"]), "url": str(e["url"]), "description": str(e["description"] or ""),
            "types": ", ".join(e["event_types"]) if e["event_types"] else "every event",
            "state": "enabled" if e["enabled"] else "disabled",
            "rotating": f"old secret signs until {when(e['rotating_until'])}" if e["rotating_until"] else "",
            "why": "" if e["enabled"] else str(e["disabled_reason"] or ""),
            "breaker": f"failing: sends held until {when(e['breaker_open_until'])} (circuit breaker)"
                       if e["breaker_open_until"] else "",
            "rate": rate, "last": last}


class EndpointsState(paging.KeysetPaged, AuthState):
    endpoints: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    secret: rx.Field[str] = rx.field("")  # a secret just created or rotated: cleared by the next load or action
    confirm_id: rx.Field[str] = rx.field("")
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")

    def _clear(self) -> None:
        self.secret = self.notice = self.error = ""

    async def _reload(self) -> None:
        """The page at the position the view holds (newest first)."""
        if not await self._fresh() or not self._tenant_id:
            return
        page = await asyncio.to_thread(pages.endpoints, self._tenant_id, PAGE_SIZE, self._before or None,
                                       self._after or None)
        self.endpoints = [_row(e) for e in page.rows]
        self.has_older, self.has_newer = page.has_older, page.has_newer

    def _page_rows(self) -> list[dict[str, str]]:
        return self.endpoints

    async def _page_reload(self) -> None:
        await self._reload()

    def _url(self) -> Followup:
        return paging.replace_url(routes.ENDPOINTS, {"before": self._before, "after": self._after})

    @event
    async def load(self) -> None:
        self._clear()
        self.confirm_id = ""
        before, after = paging.position(self.router.url.query_parameters)
        self._before, self._after = before or 0, after or 0
        if not self._tenant_id:
            self.endpoints = []
            return
        await self._reload()

    async def _may(self) -> bool:
        if await self._allowed(Act.ENDPOINTS) and self._tenant_id:
            return True
        self.error = refusal(Act.ENDPOINTS)
        return False

    @event
    async def create(self, form: dict[str, str]) -> None:
        self._clear()
        if not await self._may():
            return
        url, description = str(form.get("url", "")).strip(), str(form.get("description", "")).strip()[:200]
        verdict = await asyncio.to_thread(urls.check, url, urls.dev_allowlist())
        if isinstance(verdict, urls.Refused):
            self.error = f"Not added: the URL {verdict.reason}."
            return
        row = await asyncio.to_thread(store.create, self._tenant_id, url, description, None, self._actor_ref)
        self.secret, self.notice = row["secret"], (f"Endpoint {row['id']} added. Copy its signing secret now: "
                                                   "it is shown only this once.")
        self._before = self._after = 0  # the newest page, where the new endpoint is
        await self._reload()

    @event
    async def set_enabled(self, endpoint_id: str, on: bool) -> None:
        self._clear()
        if not await self._may() or not str(endpoint_id).isdigit():
            return
        row = await asyncio.to_thread(store.set_enabled, self._tenant_id, int(endpoint_id), bool(on), self._actor_ref)
        self.notice = "No such endpoint." if row is None else f"Endpoint {endpoint_id} {'enabled' if on else 'disabled'}."
        await self._reload()

    @event
    async def rotate(self, endpoint_id: str) -> None:
        self._clear()
        if not await self._may() or not str(endpoint_id).isdigit():
            return
        row = await asyncio.to_thread(store.rotate, self._tenant_id, int(endpoint_id), self._actor_ref)
        if row is None:
            self.error = "No such endpoint."
        else:
            self.secret = row["secret"]
            self.notice = (f"Endpoint {endpoint_id}: new secret below (shown only this once); the old one keeps "
                           "signing for 24 hours.")
        await self._reload()

    @event
    async def ask_delete(self, endpoint_id: str) -> None:
        self._clear()
        if await self._may():
            self.confirm_id = str(endpoint_id)

    @event
    def keep(self) -> None:
        self.confirm_id = ""

    @event
    async def delete(self) -> None:
        self._clear()
        endpoint_id, self.confirm_id = self.confirm_id, ""
        if not await self._may() or not endpoint_id.isdigit():
            return
        gone = await asyncio.to_thread(store.delete, self._tenant_id, int(endpoint_id), self._actor_ref)
        self.notice = f"Endpoint {endpoint_id} deleted." if gone else "No such endpoint."
        await self._reload()


def _endpoint_row(e: Row) -> rx.Component:
    actions = rx.hstack(
        rx.cond(e["state"] == "enabled",
                action_button("Disable", size="1", variant="soft", on_click=EndpointsState.set_enabled(e["id"], False),
                          data_testid="disable-endpoint"),
                action_button("Enable", size="1", variant="soft", on_click=EndpointsState.set_enabled(e["id"], True),
                          data_testid="enable-endpoint")),
        action_button("Rotate secret", size="1", variant="soft", on_click=EndpointsState.rotate(e["id"]),
                  data_testid="rotate-endpoint"),
        action_button("Delete", size="1", variant="soft", color_scheme="red", on_click=EndpointsState.ask_delete(e["id"]),
                  data_testid="delete-endpoint"),
        spacing="2", wrap="wrap")
    return rx.table.row(
        rx.table.cell(rx.code(e["url"]), rx.text(e["description"], size="1")), rx.table.cell(e["types"]),
        rx.table.cell(rx.cond(e["state"] == "enabled", rx.badge("enabled", color_scheme="green"),
                              rx.badge("disabled", color_scheme="gray")), rx.text(e["rotating"], size="1"),
                      rx.text(e["why"], size="1", data_testid="endpoint-why"),
                      rx.text(e["breaker"], size="1", color=rx.color("amber", 11), data_testid="endpoint-breaker")),
        rx.table.cell(rx.text(e["rate"], size="2", data_testid="endpoint-health"),
                      rx.text(e["last"], size="1", color=rx.color("gray", 11))),
        rx.table.cell(rx.cond(EndpointsState.oncall, actions)), data_testid="endpoint-row")


def endpoints_page() -> rx.Component:
    return shell(
        "Webhook endpoints",
        rx.text("Where this tenant's order events are signed and sent (see docs/webhooks.md). Private, loopback and "
                "metadata addresses are refused.", size="2", color=rx.color("gray", 11), margin_bottom="12px"),
        rx.cond(EndpointsState.oncall, card(action_form(rx.flex(
            rx.vstack(rx.text("URL", size="1"), rx.input(name="url", placeholder="https://hooks.example.com/outbox",
                                                         width="360px", data_testid="endpoint-url"), spacing="1"),
            rx.vstack(rx.text("Description", size="1"), rx.input(name="description", data_testid="endpoint-description"),
                      spacing="1"),
            action_button("Add endpoint", type="submit", data_testid="add-endpoint"),
            gap="12px", align="end", wrap="wrap"), on_submit=EndpointsState.create, reset_on_submit=True),
            margin_bottom="12px")),
        rx.cond(EndpointsState.notice != "", rx.callout(
            rx.vstack(rx.text(EndpointsState.notice, data_testid="endpoints-notice"),
                      rx.cond(EndpointsState.secret != "", rx.code(EndpointsState.secret, data_testid="endpoint-secret")),
                      spacing="2"), icon="key_round", width="100%", margin_bottom="12px")),
        error_callout(EndpointsState.error),
        rx.cond(EndpointsState.confirm_id != "", card(rx.hstack(
            rx.text("Delete endpoint ", EndpointsState.confirm_id, "? It receives nothing more.", weight="medium"),
            action_button("Delete", color_scheme="red", on_click=EndpointsState.delete, data_testid="confirm-delete"),
            rx.button("Keep it", variant="soft", on_click=EndpointsState.keep), align="center", wrap="wrap"),
            margin_bottom="12px")),
        data_table(["Endpoint", "Events", "State", "Health", ""], EndpointsState.endpoints, _endpoint_row,
                   "No webhook endpoints yet.", "endpoints-table"),
        paging.pager(EndpointsState.older, EndpointsState.newer, EndpointsState.has_older, EndpointsState.has_newer,
                     "endpoints-pager"),
    )


PAGE = Page(routes.ENDPOINTS, endpoints_page, "Webhook endpoints · Outbox",
            [AuthState.require_login, EndpointsState.load], ("Endpoints", "webhook"))
