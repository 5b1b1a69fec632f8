"""Open views converge without the refresh fast path, in a real browser against the real running app.

Invariant: with Redis pub/sub refresh publishing switched off in every process of the system (the dashboard that
commits, the lane workers that deliver), operator B's open order page and B's orders list still show operator A's
approval — and the page the ledger rows it produced — within one view-check interval plus a margin, by the
dashboard's periodic revision check alone (dashboard/live.py). Nothing at all is published while it happens, so
without that check B would keep showing revision 1 and this test fails.
"""

from __future__ import annotations

import time

import pytest

from domain.delivery.queue import order_channel, tenant_channel
from domain.settings import get_settings
from e2e.conftest import APP, nothing_published_on, shot, switched_off, wait_listeners
from tests.support.browser import fresh_order, open_order, wait_text

pytestmark = pytest.mark.e2e

# Browser round trips, the probe and the reload on a busy 2-core machine: seconds beyond the interval itself.
MARGIN_S = 4.0


def order_row_shows(page, order_id: int, status: str, timeout_ms: float) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "([id, s]) => [...document.querySelectorAll('[data-testid=order-row]')].some(r => "
        "r.innerText.includes(`#${id}`) && r.innerText.toLowerCase().includes(s))",
        arg=[order_id, status], timeout=timeout_ms)


def test_with_publishing_off_b_sees_a_approval_within_the_check_interval(new_operator):
    interval = get_settings().view_check_interval  # the e2e system runs with this process's environment
    deadline_ms = (interval + MARGIN_S) * 1000
    oid = fresh_order()
    a, b, b_list = new_operator("alice"), new_operator("bob"), new_operator("bob")
    open_order(a, oid)
    open_order(b, oid)
    order_row_shows(b_list, oid, "authorized", 20_000)  # logged in on /orders, this order listed as it is now
    wait_listeners(order_channel(42, oid), at_least=2)  # both order views are live before the click
    wait_listeners(tenant_channel(42), at_least=1)
    with (switched_off("refresh_publish"), nothing_published_on(order_channel(42, oid)),
          nothing_published_on(tenant_channel(42))):
        t0 = time.monotonic()
        a.get_by_test_id("approve").click()
        wait_text(a, "order-revision", "2")  # A's own page reloads after its command
        wait_text(b, "order-revision", "2", timeout=deadline_ms)
        order_row_shows(b_list, oid, "approved", deadline_ms)
        print(f"B converged without pub/sub in {time.monotonic() - t0:.2f}s (check interval {interval}s)")
        assert b.get_by_test_id("order-status").get_attribute("data-status") == "approved"
        # The ledger rows change later, in the workers (which publish nothing either): the same check shows them.
        b.wait_for_function(
            "() => [...document.querySelectorAll('[data-testid=notification-row]')].some(r => r.innerText.includes"
            "('webhook') && r.innerText.includes('DELIVERED'))", timeout=30_000)
    assert b.get_by_test_id("missed-refresh").count() == 0, "one revision behind is caught up, not a missed refresh"
    assert b.url.startswith(f"{APP}/orders/{oid}")
    shot(b, "order-detail-without-pubsub")
