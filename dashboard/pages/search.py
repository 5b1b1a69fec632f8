"""Search: find anything by anything — a recipient ref, name, phone, email, message id (`4940`, `#4940`), job id
(`n-4940`), provider reference, event id or order number — answered with the recipient's cross-channel answer or
the message itself. The query goes into the URL (a search is a link) unless it is a phone or an email."""

from __future__ import annotations

import reflex as rx

from dashboard import routes
from dashboard.components import Row, caption, empty_state, error_callout, icon, shell, status_badge
from dashboard.pages import Page
from dashboard.search_state import SearchState, search_box
from dashboard.state import AuthState

KIND_ICON = {"recipient": "user", "order": "shopping-cart", "event": "file-text", "message": "mail", "lead": "route",
             "campaign": "megaphone"}


def _hit_card(h: Row) -> rx.Component:
    return rx.card(
        rx.hstack(
            rx.match(h["kind"], *[(k, icon(v, size=18)) for k, v in KIND_ICON.items()], icon("dot", size=18)),
            rx.link(rx.text(h["title"], weight="bold"), href=h["href"], data_testid="search-hit-link"),
            rx.badge(h["kind"], variant="soft"),
            rx.cond(h["status"] != "", status_badge(h["status"])),
            caption("matched by " + h["matched_by"].to(str)),
            spacing="3", align="center", wrap="wrap"),
        rx.text(h["answer"], size="2", margin_top="6px", data_testid="search-answer"),
        rx.cond(h["leads"] != "", rx.link(rx.text(h["leads"], size="1"), href=h["lead_href"])),
        width="100%", data_testid="search-hit",
    )


def search_page() -> rx.Component:
    return shell(
        "Search",
        rx.box(search_box(), margin_bottom="12px", width="100%"),
        error_callout(SearchState.error, "search-error"),
        caption(SearchState.kinds, margin_bottom="8px", data_testid="search-kinds"),
        rx.cond(SearchState.hits.length() > 0,
                rx.vstack(rx.foreach(SearchState.hits, _hit_card), spacing="3", width="100%"),
                rx.cond(SearchState.searched, empty_state("Nothing of your tenant matches that search."),
                        empty_state("One box for everything: who, which message, which order, which event."))),
    )


PAGE = Page(routes.SEARCH, search_page, "Search · Outbox", [AuthState.require_login, SearchState.load],
            ("Search", "text-search"))
