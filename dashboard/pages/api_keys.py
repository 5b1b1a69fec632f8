"""API keys: every key of the tenant by prefix, who it acts as, when it was created or revoked; the tenant's on-call
creates a key (shown whole once, in that answer only) and revokes one after a confirmation with a note. Every
handler asks `_allowed(Act.API_KEYS)` itself; the tenant comes from the session, never from the browser."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import reflex as rx

from dashboard import routes
from dashboard.components import Row, caption, card, data_table, error_callout, secondary, shell
from dashboard.events import event
from dashboard.format import parse_id, when
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.apikeys import list_keys, revoke_key
from domain.access.auth import create_api_key
from domain.access.roles import Act, refusal

_ACTOR = re.compile(r"^[A-Za-z0-9._:@-]{1,64}$")


def _who(actor_ref: object) -> str:
    return str(actor_ref).removeprefix("operator:") if actor_ref else "unknown"


def _row(k: dict[str, Any]) -> dict[str, str]:
    """Who made the key and who revoked it come from the audit log (the rows written in the key's transactions)."""
    revoked = ""
    if k["revoked_at"]:
        revoked = f"revoked {when(k['revoked_at'])} by {_who(k.get('revoked_by'))}" + (
            f": {k['revoke_note']}" if k.get("revoke_note") else "")
    return {"id": str(k["id"]), "prefix": f"{k['prefix']}…", "actor": str(k["actor_ref"]),
            "created": when(k["created_at"]), "created_by": f"by {_who(k.get('created_by'))}",
            "revoked": revoked, "state": "revoked" if k["revoked_at"] else "live"}


class ApiKeysState(AuthState):
    keys: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    # The whole key, in the answer that created it only: cleared by the next load or action.
    new_key: rx.Field[str] = rx.field("")
    confirm_id: rx.Field[str] = rx.field("")
    confirm_prefix: rx.Field[str] = rx.field("")
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")

    @event
    async def load(self) -> None:
        self.new_key = self.notice = self.error = ""
        self.confirm_id = self.confirm_prefix = ""
        if not self._tenant_id:
            self.keys = []
            return
        self.keys = [_row(k) for k in await asyncio.to_thread(list_keys, self._tenant_id)]

    async def _reload(self) -> None:
        self.keys = [_row(k) for k in await asyncio.to_thread(list_keys, self._tenant_id)]

    @event
    async def create(self, form: dict[str, str]) -> None:
        self.new_key = self.notice = self.error = ""
        if not await self._allowed(Act.API_KEYS) or not self._tenant_id:
            self.error = refusal(Act.API_KEYS)
            return
        actor = str(form.get("actor", "")).strip()
        if actor and not _ACTOR.match(actor):
            self.error = "The actor is at most 64 letters, digits or . _ : @ - (e.g. svc:shop); nothing was created."
            return
        key = await asyncio.to_thread(create_api_key, self._tenant_id, actor or None, None, self._actor_ref)
        self.new_key = key
        self.notice = f"Key {key[:8]}… created. Copy it now: it is shown only this once."
        await self._reload()

    @event
    async def ask_revoke(self, key_id: str, prefix: str) -> None:
        self.new_key = self.notice = self.error = ""
        if not await self._allowed(Act.API_KEYS):
            self.error = refusal(Act.API_KEYS)
            return
        kid = parse_id(key_id)
        if kid is None:
            self.error = "No such key for this tenant; nothing was revoked."
            return
        # The prefix shown is the listed key's, never the browser's word for it.
        row = next((k for k in self.keys if k["id"] == str(kid)), None)
        if row is None:
            self.error = "No such key for this tenant; nothing was revoked."
            return
        self.confirm_id, self.confirm_prefix = str(kid), row["prefix"]

    @event
    def cancel_revoke(self) -> None:
        self.confirm_id = self.confirm_prefix = ""

    @event
    async def revoke(self, form: dict[str, str]) -> None:
        self.new_key = self.notice = self.error = ""
        if not await self._allowed(Act.API_KEYS) or not self._tenant_id:
            self.error = refusal(Act.API_KEYS)
            return
        note = str(form.get("note", "") if isinstance(form, dict) else "").strip()
        if not note or len(note) > 500:
            self.error = "Say why (at most 500 characters): the note is kept in the audit log. Nothing was revoked."
            return
        key_id = parse_id(self.confirm_id) or 0
        r = await asyncio.to_thread(revoke_key, key_id, tenant_id=self._tenant_id, actor_ref=self._actor_ref,
                                    note=note)
        self.confirm_id = self.confirm_prefix = ""
        if r is None:
            self.error = "No such key for this tenant; nothing was revoked."
        else:
            self.notice = (f"Key {r.prefix}… was already revoked." if r.already else
                           f"Key {r.prefix}… revoked: the API refuses it within seconds.")
        await self._reload()


def _key_row(k: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.code(k["prefix"])), rx.table.cell(k["actor"]),
        rx.table.cell(rx.text(k["created"], size="1"), caption(k["created_by"], data_testid="key-created-by")),
        rx.table.cell(rx.cond(k["state"] == "live", rx.badge("live", color_scheme="green"),
                              caption(k["revoked"], data_testid="key-revoked"))),
        rx.table.cell(rx.cond(ApiKeysState.oncall & (k["state"] == "live"),
                              action_button("Revoke", size="1", color_scheme="red", variant="soft",
                                        on_click=ApiKeysState.ask_revoke(k["id"], k["prefix"]),
                                        data_testid="revoke-key"))),
        data_testid="key-row")


def _create_form() -> rx.Component:
    return card(action_form(rx.flex(
        rx.vstack(rx.text("Acts as (optional, kept in every change log)", size="1"),
                  rx.input(name="actor", placeholder="svc:shop", data_testid="key-actor"), spacing="1"),
        action_button("Create key", type="submit", data_testid="create-key"),
        gap="12px", align="end", wrap="wrap"), on_submit=ApiKeysState.create, reset_on_submit=True),
        margin_bottom="12px")


def _confirm() -> rx.Component:
    return rx.cond(ApiKeysState.confirm_id != "", card(action_form(rx.vstack(
        rx.text("Revoke key ", rx.code(ApiKeysState.confirm_prefix),
                "? Every client using it is refused from then on.", weight="medium"),
        rx.input(name="note", placeholder="why (kept in the audit log)", width="100%", data_testid="revoke-note"),
        rx.hstack(action_button("Revoke", type="submit", color_scheme="red", data_testid="confirm-revoke"),
                  rx.button("Keep it", type="button", variant="soft", on_click=ApiKeysState.cancel_revoke)),
        spacing="2"), on_submit=ApiKeysState.revoke, reset_on_submit=True),
        margin_bottom="12px", data_testid="revoke-confirm"))


def api_keys_page() -> rx.Component:
    return shell(
        "API keys",
        secondary("Keys are shown by their first 8 characters; a whole key is shown once, when it is created.",
                  margin_bottom="12px"),
        rx.cond(ApiKeysState.oncall, _create_form()),
        rx.cond(ApiKeysState.new_key != "", rx.callout(
            rx.vstack(rx.text(ApiKeysState.notice), rx.code(ApiKeysState.new_key, data_testid="new-key"),
                      spacing="2"), icon="key", color_scheme="amber", width="100%", margin_bottom="12px")),
        rx.cond((ApiKeysState.notice != "") & (ApiKeysState.new_key == ""),
                rx.callout(ApiKeysState.notice, icon="check", width="100%", margin_bottom="12px",
                           data_testid="keys-notice")),
        error_callout(ApiKeysState.error),
        _confirm(),
        data_table(["Key", "Acts as", "Created (UTC)", "State", ""], ApiKeysState.keys, _key_row,
                   "No API keys yet.", "keys-table"),
    )


PAGE = Page(routes.API_KEYS, api_keys_page, "API keys · Outbox", [AuthState.require_login, ApiKeysState.load],
            ("API keys", "key_round"))
