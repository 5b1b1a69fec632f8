"""Recipients: find a person by ref or name; each links to their page (`recipient_detail.py`), which answers "why
didn't they get it?"."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx

from dashboard import routes
from dashboard.components import Row, data_table, shell
from dashboard.events import event
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.ledger import recipients
from domain.ledger.reasons import CHANNEL_NAME

PAGE_SIZE = 50


def _summary_row(r: dict[str, Any]) -> dict[str, str]:
    return {"id": str(r["recipient_id"]), "ref": r["ref"], "name": r["display_name"], "timezone": r["timezone"],
            "opted_out": ", ".join(CHANNEL_NAME.get(c, c) for c in r["opted_out_channels"]) or "—",
            "cap": str(r["daily_cap"]) if r["daily_cap"] is not None else "none"}


class RecipientsState(AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    query: rx.Field[str] = rx.field("")
    more: rx.Field[bool] = rx.field(False)

    @event
    async def load(self) -> None:
        if not self._tenant_id:
            return
        found = await asyncio.to_thread(recipients.list_recipients, self._tenant_id, self.query, PAGE_SIZE + 1)
        self.rows, self.more = [_summary_row(r) for r in found[:PAGE_SIZE]], len(found) > PAGE_SIZE

    @event
    async def search(self, form: dict[str, str]) -> None:
        self.query = str(form.get("q", ""))[:64]
        await self.load()

    @event
    async def load_more(self) -> None:
        if not self._tenant_id or not self.rows:
            return
        after = int(self.rows[-1]["id"])
        found = await asyncio.to_thread(recipients.list_recipients, self._tenant_id, self.query, PAGE_SIZE + 1,
                                        after)
        self.rows = self.rows + [_summary_row(r) for r in found[:PAGE_SIZE]]
        self.more = len(found) > PAGE_SIZE


def _list_row(r: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(r["ref"], href=f"/recipients/{r['id']}", weight="bold", data_testid="recipient-link")),
        rx.table.cell(r["name"]), rx.table.cell(r["timezone"]), rx.table.cell(r["opted_out"]),
        rx.table.cell(r["cap"]), data_testid="recipient-row")


def recipients_page() -> rx.Component:
    return shell(
        "Recipients",
        rx.form(rx.hstack(rx.input(name="q", placeholder="ref or name (cust-001, Night Owl)", width="100%",
                                   default_value=RecipientsState.query, data_testid="recipient-query"),
                          rx.button("Find", type="submit"), width="100%"),
                on_submit=RecipientsState.search, width="100%", margin_bottom="16px"),
        data_table(["Ref", "Name", "Timezone", "Opted out of", "Daily cap"], RecipientsState.rows, _list_row,
                   "No recipient matches.", "recipients-table"),
        rx.cond(RecipientsState.more, rx.button("Load more", on_click=RecipientsState.load_more, variant="soft",
                                                margin_top="12px")),
    )


PAGE = Page(routes.RECIPIENTS, recipients_page, "Recipients · Outbox",
            [AuthState.require_login, RecipientsState.load], ("Recipients", "users"))
