"""Recipients: find a person by ref or name (newest first, a keyset page at a time, the search and the page in the
URL); each links to their page (`recipient_detail.py`), which answers "why
didn't they get it?"."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, data_table, shell
from dashboard.events import Followup, event
from dashboard.format import search_text
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.ledger.reasons import CHANNEL_NAME
from domain.support import pages

PAGE_SIZE = 50


def _summary_row(r: dict[str, Any]) -> dict[str, str]:
    return {"id": str(r["recipient_id"]), "ref": r["ref"], "name": r["display_name"], "timezone": r["timezone"],
            "opted_out": ", ".join(CHANNEL_NAME.get(c, c) for c in r["opted_out_channels"]) or "—",
            "cap": str(r["daily_cap"]) if r["daily_cap"] is not None else "none"}


class RecipientsState(paging.KeysetPaged, AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    query: rx.Field[str] = rx.field("")
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    @event
    async def load(self) -> None:
        """A page load: the search and the position from the URL, then the rows."""
        params = self.router.url.query_parameters
        self.query = search_text(params.get("q", ""), 64)
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        await self._query()

    async def _query(self) -> None:
        if not await self._fresh() or not self._tenant_id:
            return
        page = await asyncio.to_thread(pages.recipients, self._tenant_id, self.query, PAGE_SIZE,
                                       self._before or None, self._after or None)
        self.rows = [_summary_row(r) for r in page.rows]
        self.has_older, self.has_newer = page.has_older, page.has_newer

    def _url(self) -> Followup:
        return paging.replace_url(routes.RECIPIENTS, {"q": self.query.strip(), "before": self._before,
                                                      "after": self._after})

    @event
    async def search(self, form: dict[str, str]) -> Followup:
        self.query, self._before, self._after = search_text(form.get("q", ""), 64), 0, 0
        await self._query()
        return self._url()




def _list_row(r: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(r["ref"], href=f"/recipients/{r['id']}", weight="bold", data_testid="recipient-link")),
        rx.table.cell(r["name"]), rx.table.cell(r["timezone"]), rx.table.cell(r["opted_out"]),
        rx.table.cell(r["cap"]), data_testid="recipient-row")


def recipients_page() -> rx.Component:
    return shell(
        "Recipients",
        rx.form(rx.hstack(rx.input(name="q", placeholder="ref or name (cust-001, Night Owl)", width="100%",
                                   default_value=RecipientsState.query, key=RecipientsState.query,
                                   data_testid="recipient-query"),
                          rx.button("Find", type="submit"), width="100%"),
                on_submit=RecipientsState.search, width="100%", margin_bottom="16px"),
        paging.pager(RecipientsState.older, RecipientsState.newer, RecipientsState.has_older,
                     RecipientsState.has_newer, "recipients-pager"),
        data_table(["Ref", "Name", "Timezone", "Opted out of", "Daily cap"], RecipientsState.rows, _list_row,
                   "No recipient matches.", "recipients-table"),
    )


PAGE = Page(routes.RECIPIENTS, recipients_page, "Recipients · Outbox",
            [AuthState.require_login, RecipientsState.load], ("Recipients", "users"))
