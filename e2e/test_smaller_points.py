"""Browser test for the smaller points of issue 27, item 9.

Invariants: the current page's link in the navigation is marked (aria-current="page", one link only, also on a
page under it); on a phone (390×844) the header's search and the operator's name are on screen and the search
works, with nothing scrolling sideways; the tenant is shown by its name; an order's page lists its history (who,
what, when) and a change made on it appears there; a sent one-time code's page shows the body it went out with,
the code masked; a tab whose session ended elsewhere goes to the login page at its next step instead of keeping
dead buttons; the balance reads by the hour with Older/Newer and says its forecast is at the last hour's spend.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from domain.ledger import otp, recipients
from domain.orders.commands import Committed, execute_order_command
from e2e.conftest import APP, shot
from jobs.ops.procs import wait_until
from tests.support.browser import fresh_order, open_order, page_scrolls_sideways, right_edge


def current_links(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The hrefs of the navigation links marked as the current page, in the visible navigation."""
    return list(page.evaluate("""() => [...document.querySelectorAll('[aria-current="page"]')]
        .filter(a => a.offsetParent !== null).map(a => a.getAttribute('href'))"""))


def test_the_current_page_is_marked_in_the_navigation(new_operator):
    a = new_operator("alice")
    a.goto(f"{APP}/ledger")
    a.get_by_test_id("ledger-total").wait_for()
    a.wait_for_function("() => document.querySelector('[aria-current=\"page\"]') !== null")
    assert current_links(a) == ["/ledger"], current_links(a)
    assert a.get_by_test_id("tenant-label").inner_text() == "Northwind Retail", "the tenant by its name"
    oid = fresh_order()
    open_order(a, oid)
    a.wait_for_function("() => [...document.querySelectorAll('[aria-current=\"page\"]')]"
                        ".some(l => l.getAttribute('href') === '/orders')")
    assert current_links(a) == ["/orders"], "an order's page marks Orders"
    shot(a, "nav-current-order")


def test_on_a_phone_the_search_and_the_operator_stay_reachable(new_operator):
    phone = new_operator("alice", width=390, height=844)
    phone.get_by_test_id("order-row").first.wait_for()
    for testid in ("nav-search", "operator-name", "logout", "tenant-label"):
        el = phone.get_by_test_id(testid)
        assert el.is_visible(), f"{testid} hidden on a phone"
        assert right_edge(phone, testid) <= 390, f"{testid} off screen on a phone"
    assert phone.get_by_test_id("operator-name").inner_text().strip(), "the operator's name is shown"
    assert not page_scrolls_sideways(phone)
    shot(phone, "phone-header-390")
    phone.get_by_test_id("nav-search").fill("cust-001")
    phone.get_by_test_id("nav-search").press("Enter")
    phone.wait_for_url("**/search?q=cust-001")


def test_an_order_page_shows_its_history_and_a_change_joins_it(new_operator):
    oid = fresh_order()
    r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="operator:bob", request_id=f"req-hist-{uuid.uuid4().hex[:8]}")
    assert isinstance(r, Committed)
    a = new_operator("alice")
    open_order(a, oid)
    a.get_by_test_id("history-row").first.wait_for()
    rows = [x.inner_text() for x in a.get_by_test_id("history-row").all()]
    assert len(rows) == 1 and "approved" in rows[0] and "bob" in rows[0], rows
    a.get_by_test_id("fulfill").click()
    wait_until(lambda: a.get_by_test_id("history-row").count() == 2, 20, "the fulfilment to join the history")
    rows = [x.inner_text() for x in a.get_by_test_id("history-row").all()]
    assert "fulfilled" in rows[0] and "alice" in rows[0] and "approved" in rows[1], "newest first, with who"
    shot(a, "order-history")


def test_a_sent_code_s_page_shows_the_body_with_the_code_masked(new_operator):
    ref = f"otp-{uuid.uuid4().hex[:8]}"
    person = recipients.create(42, {"ref": ref, "display_name": "Code Person", "phone": "+15550007777"},
                               "operator:test")
    got = otp.request(42, person["id"], "sms", datetime.now(UTC))
    assert got is not None
    a = new_operator("alice")

    def sent() -> bool:
        a.goto(f"{APP}/messages/{got.notification_id}")
        a.get_by_test_id("message-id").wait_for()
        return a.get_by_test_id("message-body").count() > 0

    wait_until(sent, 60, "the code to be sent and its body shown")
    body = a.get_by_test_id("message-body").inner_text()
    assert "••••••" in body and not re.search(r"\d{4,}", body), body
    assert "of at most" in a.content(), "a sent message counts its attempts"
    shot(a, "message-body-otp")


def test_a_tab_whose_session_ended_elsewhere_goes_to_login(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        first = ctx.new_page()
        first.set_default_timeout(20_000)
        from e2e.conftest import log_in

        log_in(first, "alice")
        first.goto(f"{APP}/ledger")
        first.get_by_test_id("ledger-total").wait_for()
        other = ctx.new_page()  # the same browser: the same session cookie
        other.goto(f"{APP}/balance")
        other.get_by_test_id("logout").click()
        other.wait_for_url("**/login")
        first.get_by_test_id("ledger-export").click()  # any step the first tab takes finds the session gone
        # To the login page, which comes back to the ledger after login (a static export's folder: /login/).
        first.wait_for_url(re.compile(r".*/login/?\?next=%2Fledger.*"))
    finally:
        ctx.close()


def test_the_balance_reads_by_the_hour_with_older_and_newer(new_operator):
    a = new_operator("alice")
    a.goto(f"{APP}/balance")
    a.get_by_test_id("balance").wait_for()
    assert "Runs out, at the last hour's spend" in a.inner_text("body"), "the forecast says what it is at"
    a.get_by_test_id("hours-table").wait_for()
    assert a.get_by_test_id("hours-pager-older").is_visible() and a.get_by_test_id("hours-pager-newer").is_visible()
    assert a.get_by_text("Load more").count() == 0
    a.get_by_test_id("hour-open").first.click()
    a.get_by_test_id("entries-table").wait_for()
    a.wait_for_url(re.compile(r".*/balance\?hour=\d+"))
    a.get_by_test_id("hours-back").click()
    a.get_by_test_id("hours-table").wait_for()
    shot(a, "balance-by-hour")
