"""The operator pages in a real browser: an order opened and shown, a fresh order, a test id's text waited
for, an element's right edge, and whether the page scrolls sideways."""

from __future__ import annotations

from domain.orders.commands import create_order
from e2e.conftest import APP


def open_order(page, order_id: int) -> None:  # type: ignore[no-untyped-def]
    """Open an order and wait until the page shows THAT order (the previous one may still be on screen while the
    new one loads)."""
    page.goto(f"{APP}/orders/{order_id}")
    page.get_by_test_id("order-revision").wait_for()
    page.wait_for_function("([id]) => document.body.innerText.includes(`Order #${id}`)", arg=[order_id])


def fresh_order(customer: str = "cust-002") -> int:
    return create_order(tenant_id=42, customer_ref=customer, amount_cents=2500, currency="EUR")


def wait_text(page, testid: str, text: str, timeout: float = 20_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "([id, t]) => { const e = document.querySelector(`[data-testid=\"${id}\"]`); "
        "return e && e.innerText.trim() === t }",
        arg=[testid, text], timeout=timeout, polling="raf")


def right_edge(page, testid: str) -> float:  # type: ignore[no-untyped-def]
    return float(page.get_by_test_id(testid).first.evaluate("e => e.getBoundingClientRect().right"))


def page_scrolls_sideways(page) -> bool:  # type: ignore[no-untyped-def]
    return bool(page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1"))
