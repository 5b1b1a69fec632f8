"""Older / newer buttons for a keyset-paged list, and the page position as URL query parameters (`before`/`after`):
a page is a link like any other."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import reflex as rx
from reflex.event import EventSpec

from dashboard.components import icon
from dashboard.format import parse_id


def position(params: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(before, after) from a URL's query parameters; anything that is not a row id is no position. Pure."""
    before, after = parse_id(params.get("before", "")), parse_id(params.get("after", ""))
    return (before, None) if before is not None else (None, after)


def url(path: str, params: Mapping[str, Any]) -> str:
    """`path?k=v…` with the empty values left out. Pure."""
    kept = {k: str(v) for k, v in params.items() if v not in (None, "", 0)}
    return f"{path}?{urlencode(kept)}" if kept else path


def replace_url(path: str, params: Mapping[str, Any]) -> EventSpec:
    """Put the view's filters and position in the address bar (replaced, no reload): the view is a link."""
    return rx.call_script(f"window.history.replaceState(null, '', {json.dumps(url(path, params))})")


def pager(older: Any, newer: Any, has_older: rx.Var[bool], has_newer: rx.Var[bool],
          testid: str = "pager") -> rx.Component:
    return rx.hstack(
        rx.button(icon("chevron-left", size=14), "Newer", on_click=newer, disabled=~has_newer, variant="soft",
                  size="1", data_testid=f"{testid}-newer"),
        rx.button("Older", icon("chevron-right", size=14), on_click=older, disabled=~has_older, variant="soft",
                  size="1", data_testid=f"{testid}-older"),
        spacing="2", justify="end", width="100%", margin_y="8px",
    )


class KeysetPaged(rx.State, mixin=True):
    """Older / newer over a newest-first list, for every list page. By default the page's rows are `rows` and it
    reloads at the position it holds with `_query()`; a page with other names overrides `_page_rows` /
    `_page_reload`. It names its URL (`_url`). Paging needs a logged-in operator of a tenant (every list is a
    tenant's rows) with a live session, asked here, in the handler."""

    _before: int = 0  # backend-only: the page position (0: none)
    _after: int = 0

    def _page_rows(self) -> list[dict[str, str]]:
        return list(getattr(self, "rows", []))

    async def _page_allowed(self) -> bool:
        """A live session of an operator of a tenant, read again from the database (AuthState._fresh): a tab whose
        session ended elsewhere (a logout in another tab, an expiry, an operator removed) keeps its tenant in its
        backend state, and paging would read that tenant's rows for it."""
        fresh = getattr(self, "_fresh", None)
        return bool(fresh is not None and await fresh() and getattr(self, "_tenant_id", 0))

    async def _page_reload(self) -> None:
        await self._query()

    async def _query(self) -> None:
        raise NotImplementedError

    def _url(self) -> Any:
        raise NotImplementedError

    async def _page_to(self, before: int, after: int) -> Any:
        self._before, self._after = before, after
        await self._page_reload()
        return self._url()

    @rx.event
    async def older(self) -> Any:
        rows = self._page_rows()
        if not rows or not await self._page_allowed():
            return None
        return await self._page_to(int(rows[-1]["id"]), 0)

    @rx.event
    async def newer(self) -> Any:
        rows = self._page_rows()
        if not rows or not await self._page_allowed():
            return None
        return await self._page_to(0, int(rows[0]["id"]))
