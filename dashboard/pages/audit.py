"""Audit: "was it sent?" — one timeline for whatever search finds (a recipient by ref, name, phone or email; a
message by `#id`, job id or provider reference; an event id; an order number, `#913` as the orders list prints it),
with reasons in plain words."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import reflex as rx

from dashboard import paging, routes
from dashboard.components import (
    ACTION_HEADERS,
    Row,
    action_row,
    action_table_row,
    caption,
    data_table,
    empty_state,
    error_callout,
    icon,
    shell,
)
from dashboard.events import Followup, event
from dashboard.format import search_text, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.ledger import views as ledger_views
from domain.support.pages import actions as action_pages
from domain.support.query import QueryRefused, names_contact_point
from domain.support.search import audit_named

PAGE_SIZE = 50

KIND_ICON = {"order": "package", "event": "file-text", "ledger": "mail", "attempt": "send", "effect": "circle-check",
             "receipt": "inbox"}


class AuditState(paging.KeysetPaged, AuthState):
    query: rx.Field[str] = rx.field("")
    items: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    searched: rx.Field[bool] = rx.field(False)
    error: rx.Field[str] = rx.field("")  # a query that cannot be one, in words (nothing ran)
    kinds: rx.Field[str] = rx.field("")  # what the query was read as
    # When the search is a recipient: the cross-channel answer first ("did we reach them at all?").
    who: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    actions: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    @event
    async def load_actions(self) -> None:
        before, after = paging.position(self.router.url.query_parameters)
        self._before, self._after = before or 0, after or 0
        await self._actions()

    async def _actions(self) -> None:
        if await self._fresh() and self._tenant_id:
            page = await asyncio.to_thread(action_pages, self._tenant_id, PAGE_SIZE, self._before or None,
                                           self._after or None)
            self.actions = [{**action_row(a), "id": str(a["id"])} for a in page.rows]
            self.has_older, self.has_newer = page.has_older, page.has_newer

    def _page_rows(self) -> list[dict[str, str]]:
        return self.actions

    async def _page_reload(self) -> None:
        await self._actions()

    def _url(self) -> Followup:
        """The search (unless it names a contact point: those stay out of URLs) and the actions' page position."""
        q = self.query.strip()
        return paging.replace_url(routes.AUDIT, {"q": "" if names_contact_point(q) else q, "before": self._before,
                                                 "after": self._after})

    @event
    async def load(self) -> None:
        q = search_text(self.router.url.query_parameters.get("q", ""), 200)
        if q:
            self.query = q
            await self._search()

    async def _search(self) -> None:
        self.error = ""
        if not self.query.strip():
            self.items, self.who, self.searched = [], [], False
            return
        if not await self._fresh() or not self._tenant_id:
            return
        tenant, q = self._tenant_id, self.query.strip()[:200]
        try:  # read as search reads it: ref, name, phone, email, #id, n-job, provider ref, event id, order number
            found = await asyncio.to_thread(audit_named, tenant, q)
        except QueryRefused as exc:
            self.items, self.who, self.searched, self.error = [], [], False, exc.message
            return
        self.items = [{"at": when(r["at"]), "kind": r["kind"], "ref": r["ref"], "text": r["text"],
                       "message_id": str(r.get("message_id") or "")} for r in found["timeline"]]
        self.kinds = "read as: " + ", ".join(found["kinds"]) if found["kinds"] else ""
        self.who = []
        for rid, _ in found["recipients"]:
            w = await asyncio.to_thread(ledger_views.recipient_messages, tenant, rid, datetime.now(UTC), 1)
            if w is not None:
                self.who.append({
                    "id": str(rid), "name": w["display_name"],
                    "text": f"Heard from us today: {'yes' if w['heard_from_us_today'] else 'no'} · sent this week: "
                            f"{w['sent_this_week']} · reached by: {', '.join(w['reached_by']) or 'no channel yet'}"})
        self.searched = True

    @event
    async def search(self, form: dict[str, str]) -> Followup:
        self.query = search_text(form.get("q", ""), 200)
        await self._search()
        return self._url()


def _item(i: Row) -> rx.Component:
    return rx.hstack(
        rx.match(i["kind"], *[(k, icon(v, size=16)) for k, v in KIND_ICON.items()], icon("dot", size=16)),
        caption(i["at"], min_width="140px"),
        rx.badge(i["kind"], variant="soft"),
        rx.text(i["text"], size="2"),
        rx.cond(i["message_id"] != "", rx.link("message →", href="/messages/" + i["message_id"], size="1",
                                               data_testid="message-link")),
        spacing="3", align="center", padding_y="6px", border_bottom=f"1px solid {rx.color('gray', 4)}",
        width="100%", wrap="wrap", data_testid="audit-item",
    )


def _who(w: Row) -> rx.Component:
    return rx.callout(rx.hstack(rx.text(w["name"], weight="bold"), rx.text(w["text"], data_testid="audit-why"),
                                rx.link("every message and why →", href=f"/recipients/{w['id']}"),
                                spacing="3", wrap="wrap"),
                      icon="user", width="100%", margin_bottom="12px")


def audit_page() -> rx.Component:
    return shell(
        "Audit",
        rx.form(rx.hstack(rx.input(name="q", placeholder="ref, name, phone, email, #message, n-job, provider ref, "
                                                      "event, order",
                                   default_value=AuditState.query, width="100%", data_testid="audit-query"),
                          rx.button("Search", type="submit", data_testid="audit-search"), width="100%"),
                on_submit=AuditState.search, width="100%", margin_bottom="16px"),
        error_callout(AuditState.error, "audit-error"),
        rx.cond(AuditState.kinds != "", caption(AuditState.kinds, margin_bottom="8px",
                                                  data_testid="audit-kinds")),
        rx.foreach(AuditState.who, _who),
        rx.cond(AuditState.items.length() > 0,
                rx.card(rx.foreach(AuditState.items, _item), width="100%"),
                rx.cond(AuditState.searched, empty_state("Nothing found for that search in your tenant."),
                        empty_state("Search to see one timeline across event, attempts, receiver and receipts."))),
        rx.heading("Privileged actions", size="4", margin_top="20px", margin_bottom="8px"),
        paging.pager(AuditState.older, AuditState.newer, AuditState.has_older, AuditState.has_newer, "actions-pager"),
        data_table(ACTION_HEADERS, AuditState.actions, action_table_row,
                   "No privileged actions yet.", "actions-table"),
    )


PAGE = Page(routes.AUDIT, audit_page, "Audit · Outbox", [AuthState.require_login, AuditState.load,
                                                           AuditState.load_actions],
            ("Audit", "search"))
