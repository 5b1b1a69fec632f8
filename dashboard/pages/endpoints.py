"""Webhook endpoints: the tenant's endpoints (URL, event types, enabled — or why not —, rotation under way, circuit
breaker, health from the attempts: success rate over 24 h, last success, last error); on-call adds one (its
`whsec_…` secret shown once, in that answer only), disables, enables, rotates (the new secret shown once; both sign
for 24 h) and deletes, each after a confirmation that says what follows and asks why (one audit row each; the
row's last action shows who did it). Every handler asks `_allowed(Act.ENDPOINTS)` itself and acts on the
session's tenant only. The URL guard is the API's (domain/endpoints/urls.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, card, data_table, error_callout, pick, shell
from dashboard.events import Followup, event
from dashboard.format import done_line, parse_id, when
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.endpoints import store, urls
from domain.ledger.reasons import error_text
from domain.support import pages

PAGE_SIZE = 50
NOTE_MAX = 500
# Each action asked before it happens: its question and, in plain words, what follows.
CONFIRM = {
    "disable": ("Disable {name}?", "It receives no more events until someone enables it again: events already owed "
                                   "to it are not sent, and the receiver's system stops hearing about orders."),
    "enable": ("Enable {name}?", "It receives this tenant's events again from now on, signed with its current "
                                 "secret."),
    "rotate": ("Rotate the signing secret of {name}?",
               "A new secret is made and shown once. The old one keeps signing beside it for 24 hours; after that, "
               "a receiver that still checks only the old secret rejects every event. Copy the new one to the "
               "receiver before then."),
    "delete": ("Delete {name}?", "It is gone for good and receives nothing more; events owed to it are not sent. "
                                 "This cannot be undone: to receive events again, add a new endpoint (with a new "
                                 "secret)."),
}
LABEL = {"disable": "Disable", "enable": "Enable", "rotate": "Rotate secret", "delete": "Delete"}
# The audit log's words, as the row says them.
DONE = {"create webhook endpoint": "Added", "disable webhook endpoint": "Disabled",
        "enable webhook endpoint": "Enabled", "rotate webhook endpoint secret": "Secret rotated"}


def _health(h: dict[str, Any]) -> tuple[str, str]:
    """("97% of 120 attempts in 24 h", "last success … · last error: the receiver had a server error at …")."""
    rate = "no attempts in 24 h" if h["success_rate_24h"] is None else \
        f"{h['success_rate_24h']:.0%} of {h['attempts_24h']} attempts in 24 h"
    last = [f"last success {when(h['last_success_at'])}" if h["last_success_at"] else "no success yet"]
    if h["last_error"]:
        last.append(f"last error: {error_text(h['last_error'])} at {when(h['last_error_at'])}")
    return rate, " · ".join(last)


def _row(e: dict[str, Any], done: dict[str, Any] | None = None) -> dict[str, str]:
    rate, last = _health(e["health"])
    return {"id": str(e["id"]), "url": str(e["url"]), "description": str(e["description"] or ""),
            "types": ", ".join(e["event_types"]) if e["event_types"] else "every event",
            "state": "enabled" if e["enabled"] else "disabled",
            "rotating": f"old secret signs until {when(e['rotating_until'])}" if e["rotating_until"] else "",
            "why": "" if e["enabled"] else str(e["disabled_reason"] or ""),
            "breaker": f"failing: sends held until {when(e['breaker_open_until'])} (circuit breaker)"
                       if e["breaker_open_until"] else "",
            "rate": rate, "last": last,
            "done": done_line(DONE.get(str(done["action"]), str(done["action"])), done) if done else ""}


class EndpointsState(paging.KeysetPaged, AuthState):
    endpoints: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    secret: rx.Field[str] = rx.field("")  # a secret just created or rotated: cleared by the next load or action
    # The confirmation of disable, enable, rotate or delete: which, on which endpoint, in words, and its error.
    confirm_action: rx.Field[str] = rx.field("")
    confirm_id: rx.Field[str] = rx.field("")
    confirm_title: rx.Field[str] = rx.field("")
    confirm_text: rx.Field[str] = rx.field("")
    confirm_error: rx.Field[str] = rx.field("")
    confirm_label: rx.Field[str] = rx.field("")  # the dialog's button: "Delete", "Rotate secret", …
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
        last = await asyncio.to_thread(store.last_actions, self._tenant_id, [int(e["id"]) for e in page.rows])
        self.endpoints = [_row(e, last.get(int(e["id"]))) for e in page.rows]
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
        self.confirm_action = self.confirm_id = self.confirm_error = ""
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
    async def ask(self, action: str, endpoint_id: str) -> None:
        """Step one of disable, enable, rotate or delete: say in plain words what it does, and ask why. Nothing
        changes until `confirm`, which asks the role again."""
        self._clear()
        eid = parse_id(endpoint_id)
        if action not in CONFIRM:
            self.error = "Unknown action; nothing was changed."
            return
        if not await self._may():
            return
        if eid is None:
            self.error = "No such endpoint; nothing was changed."
            return
        row = next((e for e in self.endpoints if e["id"] == str(eid)), None)
        name = f"endpoint {eid}" + (f" ({row['url']})" if row else "")
        self.confirm_title = CONFIRM[action][0].format(name=name)
        self.confirm_text, self.confirm_label = CONFIRM[action][1], LABEL[action]
        self.confirm_action, self.confirm_id, self.confirm_error = action, str(eid), ""

    @event
    def keep(self) -> None:
        self.confirm_action = self.confirm_id = self.confirm_error = ""

    @event
    async def confirm(self, form: dict[str, str]) -> None:
        """Step two: the action asked in step one, with its note (one audit row, in the action's transaction).
        Another tenant's endpoint is answered exactly as a missing one."""
        self._clear()
        action, eid = self.confirm_action, parse_id(self.confirm_id)
        if action not in CONFIRM or eid is None:
            self.confirm_action = self.confirm_id = ""
            return
        if not await self._may():
            self.confirm_action = self.confirm_id = ""
            return
        note = str(form.get("note", "") if isinstance(form, dict) else "").strip()
        if not note or len(note) > NOTE_MAX:
            self.confirm_error = f"Say why (1 to {NOTE_MAX} characters): the note is kept with your name."
            return
        self.confirm_action = self.confirm_id = self.confirm_error = ""
        tenant, actor = self._tenant_id, self._actor_ref
        if action in ("disable", "enable"):
            on = action == "enable"
            row = await asyncio.to_thread(lambda: store.set_enabled(tenant, eid, on, actor, note=note))
            if row is None:
                self.error = "No such endpoint; nothing was changed."
            else:
                self.notice = f"Endpoint {eid} {'enabled' if on else 'disabled'}."
        elif action == "rotate":
            row = await asyncio.to_thread(lambda: store.rotate(tenant, eid, actor, note=note))
            if row is None:
                self.error = "No such endpoint; nothing was changed."
            else:
                self.secret = row["secret"]
                self.notice = (f"Endpoint {eid}: new secret below (shown only this once); the old one keeps "
                               "signing for 24 hours.")
        else:
            gone = await asyncio.to_thread(lambda: store.delete(tenant, eid, actor, note=note))
            if gone:
                self.notice = f"Endpoint {eid} deleted."
            else:
                self.error = "No such endpoint; nothing was changed."
        await self._reload()


def _endpoint_row(e: Row) -> rx.Component:
    actions = rx.hstack(
        rx.cond(e["state"] == "enabled",
                action_button("Disable", size="1", variant="soft", on_click=EndpointsState.ask("disable", e["id"]),
                          data_testid="disable-endpoint"),
                action_button("Enable", size="1", variant="soft", on_click=EndpointsState.ask("enable", e["id"]),
                          data_testid="enable-endpoint")),
        action_button("Rotate secret", size="1", variant="soft", on_click=EndpointsState.ask("rotate", e["id"]),
                  data_testid="rotate-endpoint"),
        action_button("Delete", size="1", variant="soft", color_scheme="red", on_click=EndpointsState.ask("delete", e["id"]),
                  data_testid="delete-endpoint"),
        spacing="2", wrap="wrap")
    return rx.table.row(
        rx.table.cell(rx.code(e["url"]), rx.text(e["description"], size="1")), rx.table.cell(e["types"]),
        rx.table.cell(rx.cond(e["state"] == "enabled", rx.badge("enabled", color_scheme="green"),
                              rx.badge("disabled", color_scheme="gray")), rx.text(e["rotating"], size="1"),
                      rx.text(e["why"], size="1", data_testid="endpoint-why"),
                      rx.text(e["breaker"], size="1", color=rx.color("amber", 11), data_testid="endpoint-breaker"),
                      rx.text(e["done"], size="1", color=rx.color("gray", 11), data_testid="endpoint-last-action")),
        rx.table.cell(rx.text(e["rate"], size="2", data_testid="endpoint-health"),
                      rx.text(e["last"], size="1", color=rx.color("gray", 11))),
        rx.table.cell(rx.cond(EndpointsState.oncall, actions)), data_testid="endpoint-row")


def _confirm() -> rx.Component:
    """One dialog for the four actions: what it does in plain words, a note kept with the operator's name."""
    return rx.alert_dialog.root(
        rx.alert_dialog.content(
            rx.alert_dialog.title(EndpointsState.confirm_title),
            rx.alert_dialog.description(EndpointsState.confirm_text, size="2", data_testid="endpoint-confirm-text"),
            action_form(rx.vstack(
                rx.text_area(name="note", placeholder="Why, for whoever looks later", max_length=NOTE_MAX,
                             width="100%", data_testid="endpoint-confirm-note"),
                rx.cond(EndpointsState.confirm_error != "", rx.text(EndpointsState.confirm_error, size="1",
                                                                    color=rx.color("red", 11),
                                                                    data_testid="endpoint-confirm-error")),
                rx.hstack(rx.spacer(),
                          rx.button("Keep it as it is", type="button", variant="soft", color_scheme="gray",
                                    on_click=EndpointsState.keep, data_testid="endpoint-confirm-keep"),
                          action_button(EndpointsState.confirm_label, type="submit",
                                    color_scheme=pick(EndpointsState.confirm_action == "enable", "green", "red"),
                                    data_testid="confirm-endpoint-action"), width="100%"),
                spacing="3", width="100%"), on_submit=EndpointsState.confirm, reset_on_submit=True),
            max_width="520px", data_testid="endpoint-confirm-dialog"),
        open=EndpointsState.confirm_action != "",
    )


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
        _confirm(),
        data_table(["Endpoint", "Events", "State", "Health", ""], EndpointsState.endpoints, _endpoint_row,
                   "No webhook endpoints yet.", "endpoints-table"),
        paging.pager(EndpointsState.older, EndpointsState.newer, EndpointsState.has_older, EndpointsState.has_newer,
                     "endpoints-pager"),
    )


PAGE = Page(routes.ENDPOINTS, endpoints_page, "Webhook endpoints · Outbox",
            [AuthState.require_login, EndpointsState.load], ("Endpoints", "webhook"))
