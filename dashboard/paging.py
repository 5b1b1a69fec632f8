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


def pager(older: Any, newer: Any, has_older: rx.Var[bool], has_newer: rx.Var[bool], testid: str = "pager") -> rx.Component:
    return rx.hstack(
        rx.button(icon("chevron-left", size=14), "Newer", on_click=newer, disabled=~has_newer, variant="soft",
                  size="1", data_testid=f"{testid}-newer"),
        rx.button("Older", icon("chevron-right", size=14), on_click=older, disabled=~has_older, variant="soft",
                  size="1", data_testid=f"{testid}-older"),
        spacing="2", justify="end", width="100%", margin_y="8px",
    )
