"""The search state and its box, apart from the page: the navigation's box (on every page) and the Search page share
them.
A search is a link (`/search?q=…`) unless the query is a phone or an email, which stays out of URLs."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import reflex as rx
from reflex_components_lucide.icon import Icon

from dashboard import routes
from dashboard.events import Followup, event
from dashboard.state import AuthState
from domain.support.query import QueryRefused, names_contact_point
from domain.support.search import search as find


def _hit(h: dict[str, Any]) -> dict[str, str]:
    return {"kind": h["kind"], "title": h["title"], "answer": h["answer"], "href": h["href"],
            "matched_by": h["matched_by"], "status": str(h.get("status") or ""),
            "leads": " · ".join(f"lead {ld['id']}: {ld['step'] or 'no step yet'}" for ld in h.get("leads", [])),
            "lead_href": h["leads"][0]["href"] if h.get("leads") else ""}


def search_url(q: str) -> str:
    """Where a search lives: with its query, unless the query is a contact point (kept out of URLs)."""
    return routes.SEARCH if not q.strip() or names_contact_point(q) else f"{routes.SEARCH}?q={quote(q.strip())}"


class SearchState(AuthState):
    query: rx.Field[str] = rx.field("")
    hits: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    kinds: rx.Field[str] = rx.field("")
    searched: rx.Field[bool] = rx.field(False)
    error: rx.Field[str] = rx.field("")

    @event
    async def load(self) -> None:
        q = self.router.url.query_parameters.get("q")
        if q is not None:
            self.query = q
        await self._run()

    async def _run(self) -> None:
        self.error, self.hits, self.kinds = "", [], ""
        if not await self._fresh() or not self._tenant_id or not self.query.strip():
            self.searched = False
            return
        try:
            answer = await asyncio.to_thread(find, self._tenant_id, self.query, datetime.now(UTC))
        except QueryRefused as exc:
            self.error, self.searched = exc.message, False
            return
        self.hits = [_hit(h) for h in answer["items"]]
        self.kinds = "read as: " + ", ".join(answer["kinds"]) if answer["kinds"] else ""
        self.searched = True

    @event
    async def search(self, form: dict[str, str]) -> Followup:
        """The search box (this page's and the navigation's): runs the search and keeps the URL a link to it."""
        self.query = str(form.get("q", ""))[:1000]
        if self.router.url.path.rstrip("/") != routes.SEARCH:
            return rx.redirect(search_url(self.query))
        await self._run()
        return rx.call_script(f"window.history.replaceState(null, '', {json.dumps(search_url(self.query))})")


def search_box(width: str = "100%", testid: str = "search-query") -> rx.Component:
    return rx.form(
        rx.hstack(rx.input(name="q", placeholder="ref, name, phone, email, #message, n-job, provider ref, event, order",
                           default_value=SearchState.query, width="100%", data_testid=testid, max_length=200),
                  rx.button(Icon.create("search", size=14), "Search", type="submit", data_testid=f"{testid}-go"),
                  width="100%"),
        on_submit=SearchState.search, width=width, reset_on_submit=False)
