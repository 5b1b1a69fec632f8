"""The page for a route nobody serves: the shell (so the navigation is there), what happened, and a way back."""

from __future__ import annotations

import reflex as rx

from dashboard.components import card, icon, secondary, shell
from dashboard.state import AuthState

ROUTE = "404"  # Reflex serves its "404" page for every path no page claims


def not_found_page() -> rx.Component:
    return shell(
        "Page not found",
        card(rx.vstack(
            rx.hstack(icon("map_pin_off", size=24, color=rx.color("amber", 9)),
                      rx.text("There is no page at this address.", size="3", weight="medium"), align="center"),
            secondary("The link may be mistyped or out of date. Use the navigation above, or:"),
            rx.button(icon("arrow_left", size=16), "Back to the dashboard", on_click=AuthState.go_home,
                      data_testid="not-found-home"),
            spacing="3", padding="8px",
        ), data_testid="not-found"),
    )
