"""What the browser-driving tools share (the push bench, the scale-out test): log an operator in through the real
login page, open an order and wait until the page shows that order. Playwright objects are passed in; nothing here
starts a browser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEMO_PASSWORD = "outbox-demo"  # the seeded operators' password, development mode only


def operator_page(browser: Any, app: str, user: str, *, cookies: Sequence[dict[str, str]] = (),
                  timeout_ms: float = 30_000) -> Any:
    """A fresh browser context logged in as `user` at `app` (platform on-call lands on /ops, others on /orders)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    if cookies:
        ctx.add_cookies(list(cookies))
    page = ctx.new_page()
    page.set_default_timeout(timeout_ms)
    page.goto(f"{app}/login")
    page.get_by_test_id("login-user").fill(user)
    page.get_by_test_id("login-password").fill(DEMO_PASSWORD)
    page.get_by_test_id("login-submit").click()
    page.wait_for_url("**/ops" if user == "pat" else "**/orders")
    return page


def open_order(page: Any, app: str, order_id: int) -> None:
    """Open an order and wait until the page shows THAT order (the previous one may still be on screen)."""
    page.goto(f"{app}/orders/{order_id}")
    page.wait_for_function("([id]) => document.body.innerText.includes(`Order #${id}`)", arg=[order_id])
