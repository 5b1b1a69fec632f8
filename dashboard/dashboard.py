"""The Reflex app: pages from the registry, the HTTP API mounted at the same origin."""

from __future__ import annotations

import reflex as rx

from dashboard import components, link, sessions
from dashboard.api.app import build_api
from dashboard.pages import all_pages, not_found
from dashboard.state import AuthState
from domain import logs

logs.configure("dashboard")


def index() -> rx.Component:
    return rx.center(rx.spinner(), min_height="100vh")


app = rx.App(
    api_transformer=build_api(),
)
# Our link banner in words instead of Reflex's overlay (a wifi icon and a toast "Cannot connect to server: websocket
# error … ws://…/_event"), on every page.
app.app_wraps[5, "Overlay"] = link.overlay
app.register_lifespan_task(sessions.keep_sessions_portable)
pages = all_pages()
components.NAV.extend((p.nav[0], p.route, p.nav[1]) for p in pages if p.nav)
for page in pages:
    app.add_page(page.component, route=page.route, title=page.title, on_load=page.on_load)
app.add_page(index, route="/", title="Outbox", on_load=AuthState.go_home)
app.add_page(not_found.not_found_page, route=not_found.ROUTE, title="Page not found · Outbox")
