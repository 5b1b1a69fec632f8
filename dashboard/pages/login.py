from __future__ import annotations

import reflex as rx

from dashboard import routes
from dashboard.components import error_callout, icon, secondary
from dashboard.pages import Page
from dashboard.state import AuthState


def login_page() -> rx.Component:
    return rx.center(
        rx.card(
            rx.form(
                rx.vstack(
                    rx.hstack(icon("send", size=22, color=rx.color("indigo", 9)), rx.heading("Outbox", size="6"),
                              align="center", spacing="2"),
                    secondary("Sign in to approve orders and see every message we sent."),
                    error_callout(AuthState.login_error, "login-error"),
                    rx.text("Login", size="2", weight="medium"),
                    rx.input(name="login", placeholder="alice", auto_focus=True, width="100%",
                             data_testid="login-user", auto_complete="username"),
                    rx.text("Password", size="2", weight="medium"),
                    rx.input(name="password", type="password", width="100%", data_testid="login-password",
                             auto_complete="current-password"),
                    rx.button("Sign in", type="submit", width="100%", loading=AuthState.logging_in,
                              data_testid="login-submit"),
                    spacing="3", width="100%",
                ),
                on_submit=AuthState.login, reset_on_submit=False,
            ),
            width="min(380px, 92vw)", padding="24px",
        ),
        min_height="100vh", background=rx.color("gray", 2),
    )


PAGE = Page(routes.LOGIN, login_page, "Sign in · Outbox")
