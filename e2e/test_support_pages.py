"""Support's pages and links in a real browser: one search box finds anyone or any message, a message has its own
page, a link opened in a new tab of a logged-in browser opens that page, and a link opened logged out comes back to
it after login.

Invariants: a phone number finds its recipient and never lands in the URL, a `#id` search is itself a link; the
message page shows the answer, the attempts and the money, and a queued message in a paused lane says what holds it
(never "being sent now"); the session is a cookie every tab shares (HttpOnly, so no
script reads it), ended for every tab at logout; after login the browser lands on the page it asked for, and never
on another site; another tenant's message looks exactly like a missing one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from domain.delivery.lanes import set_lane_paused
from domain.ledger import otp
from domain.ledger.recipients import find_by_ref
from domain.ledger.send import send
from e2e.conftest import APP, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


def _message(ref: str = "cust-002", channel: str = "email") -> int:
    ((tenant, rid),) = find_by_ref(42, ref)
    row = send(tenant_id=tenant, recipient_id=rid, channel=channel, template="offer", lane="normal",
               data={"headline": "Spring sale."}, subject_period=f"e2e-support-{datetime.now(UTC):%H%M%S%f}")
    assert row is not None and row.created
    return row.notification_id


def test_search_by_phone_and_by_message_id_then_the_message_page(new_operator):
    # cust-008: a customer no other browser test writes to, so the daily cap (10) cannot suppress this message
    # after a full run's approvals to cust-002
    nid = _message("cust-008")
    s = new_operator("sam")  # support: reads everything, changes nothing
    s.goto(f"{APP}/search")
    s.get_by_test_id("search-query").fill("+91 98000 00001")
    s.get_by_test_id("search-query").press("Enter")
    s.get_by_test_id("search-hit").first.wait_for()
    hit = s.get_by_test_id("search-hit").first.inner_text()
    assert "Asha Rao" in hit and "matched by phone" in hit and "Heard from us today" in hit
    assert "98000" not in s.url and s.url.rstrip("/").endswith("/search")  # a contact point stays out of the URL
    s.get_by_test_id("search-query").fill(f"#{nid}")
    s.get_by_test_id("search-query").press("Enter")
    s.wait_for_function(f"() => location.search === '?q=' + encodeURIComponent('#{nid}')")
    s.wait_for_function("() => [...document.querySelectorAll('[data-testid=search-hit]')]"
                        f".some(e => e.innerText.includes('#{nid} email offer'))")
    shot(s, "search")
    s.get_by_test_id("search-hit-link").first.click()
    s.wait_for_url(f"**/messages/{nid}")
    s.get_by_test_id("message-answer").wait_for()

    def answered() -> bool:
        s.reload()
        s.get_by_test_id("message-answer").wait_for()
        text = s.get_by_test_id("message-answer").inner_text()
        return text.startswith("sent") or text == "delivered"

    wait_until(answered, 30, "the worker to send it and the page to say so")
    s.get_by_test_id("attempt-row").first.wait_for()
    assert "sent" in s.get_by_test_id("attempt-row").first.inner_text()
    assert "charged" in s.get_by_test_id("money-summary").inner_text()
    assert "cust-002@example.test" not in s.content()
    shot(s, "message")
    # A search is a link: opening it fresh runs it again.
    s.goto(f"{APP}/search?q={quote(f'n-{nid}')}")
    s.wait_for_function("() => [...document.querySelectorAll('[data-testid=search-hit]')]"
                        f".some(e => e.innerText.includes('#{nid}'))")


def test_a_link_opens_in_a_new_tab_and_logout_ends_every_tab(new_operator):
    nid = _message("cust-003")
    a = new_operator("alice")
    cookies = {c["name"]: c for c in a.context.cookies()}
    session = cookies["outbox_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert a.evaluate("() => document.cookie").find("outbox_session") == -1  # no script can read it
    tab = a.context.new_page()  # a second tab of the same browser
    tab.goto(f"{APP}/messages/{nid}")
    tab.get_by_test_id("message-answer").wait_for()
    assert tab.url.endswith(f"/messages/{nid}")
    a.get_by_test_id("logout").click()
    a.wait_for_url("**/login")
    tab.goto(f"{APP}/ledger")  # the other tab's session ended too
    tab.wait_for_url("**/login?next=%2Fledger")
    wait_until(lambda: "outbox_session" not in {c["name"] for c in a.context.cookies()}, 10, "the cookie cleared")


def test_after_login_the_browser_lands_on_the_page_it_asked_for(browser):
    nid = _message("cust-004")
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        p = ctx.new_page()
        p.set_default_timeout(20_000)
        p.goto(f"{APP}/messages/{nid}")
        p.wait_for_url(f"**/login?next=%2Fmessages%2F{nid}")
        p.get_by_test_id("login-user").fill("bob")
        p.get_by_test_id("login-password").fill("outbox-demo")
        p.get_by_test_id("login-submit").click()
        p.wait_for_url(f"**/messages/{nid}")
        p.get_by_test_id("message-answer").wait_for()
        # A hostile `next` goes home instead, never to another site.
        p.get_by_test_id("logout").click()
        p.wait_for_url("**/login")
        p.goto(f"{APP}/login?next=" + quote("//evil.example/x", safe=""))
        p.get_by_test_id("login-user").fill("bob")
        p.get_by_test_id("login-password").fill("outbox-demo")
        p.get_by_test_id("login-submit").click()
        p.wait_for_url(f"{APP}/orders")
    finally:
        ctx.close()


def test_another_tenants_message_looks_missing(new_operator):
    nid = _message("cust-005")
    c = new_operator("carol")  # tenant 7
    for mid in (nid, 2**31 - 1):
        c.goto(f"{APP}/messages/{mid}")
        c.get_by_test_id("empty-state").wait_for()
        assert "No such message for your tenant." in c.get_by_test_id("empty-state").inner_text()
    c.goto(f"{APP}/search?q={nid}")
    c.get_by_test_id("empty-state").wait_for()
    c.wait_for_function("() => document.body.innerText.includes('Nothing of your tenant matches')")


def test_the_ledger_pages_by_keyset_keeps_filters_in_the_url_and_exports_them(new_operator):
    """Beyond 200 rows the ledger pages (older / newer), every filter and the position live in the URL (a reload
    shows the same page), each row links to its message, and the export holds the filtered rows, no contact point."""
    ((tenant, rid),) = find_by_ref(42, "cust-kolkata")  # opted out of SMS: each one settles at once, suppressed
    stamp = f"{datetime.now(UTC):%H%M%S%f}"
    ids = []
    for i in range(205):
        row = send(tenant_id=tenant, recipient_id=rid, channel="sms", template="offer", lane="normal",
                   data={"headline": "x"}, subject_period=f"e2e-paging-{stamp}-{i}")
        assert row is not None
        ids.append(row.notification_id)
    s = new_operator("sam")
    s.goto(f"{APP}/ledger?channel=sms&recipient=cust-kolkata&window=all")
    s.wait_for_function("() => document.querySelectorAll('[data-testid=ledger-row]').length === 200")
    first = s.get_by_test_id("message-link").first.inner_text()
    assert s.get_by_test_id("ledger-pager-newer").is_disabled()
    s.get_by_test_id("ledger-pager-older").click()
    s.wait_for_function("() => location.search.includes('before=') && location.search.includes('channel=sms')")
    s.wait_for_function("() => document.querySelectorAll('[data-testid=ledger-row]').length >= 5")
    older = s.evaluate("() => location.search")
    older_first = s.get_by_test_id("message-link").first.inner_text()
    s.reload()  # the page position is a link
    s.wait_for_function("() => (document.querySelector('[data-testid=message-link]') || {}).innerText === "
                        f"'{older_first}'")
    assert s.evaluate("() => location.search") == older and older_first != first
    s.get_by_test_id("ledger-pager-newer").click()
    s.wait_for_function(f"() => (document.querySelector('[data-testid=message-link]') || {{}}).innerText === '{first}'")
    with s.expect_download() as dl:
        s.get_by_test_id("ledger-export").click()
    text = open(dl.value.path(), encoding="utf-8").read()
    assert all(f"\n{i}," in text for i in ids) and "+91" not in text and "asha@" not in text
    s.get_by_test_id("message-link").first.click()
    s.wait_for_url(f"**/messages/{first.lstrip('#')}")
    s.get_by_test_id("message-answer").wait_for()


def test_the_navigation_search_box_answers_from_any_page(new_operator):
    """The box in the navigation: from any page, a `#id` lands on the search page with that message found."""
    nid = _message("cust-006")
    s = new_operator("sam")
    s.goto(f"{APP}/ledger")
    s.get_by_test_id("nav-search").fill(f"#{nid}")
    s.get_by_test_id("nav-search").press("Enter")
    s.wait_for_function(f"() => location.pathname.startsWith('/search') && location.search.includes('{nid}')")
    s.wait_for_function("() => [...document.querySelectorAll('[data-testid=search-hit]')]"
                        f".some(e => e.innerText.includes('#{nid} email offer'))")


def test_a_code_in_a_paused_lane_says_what_holds_it_never_being_sent_now(new_operator):
    """Issue 27, item 1: with the critical lane paused, a one-time code's page read "QUEUED — being sent now", its
    next retry already past. Its page says what holds it — the pause, since when and by whom — and when it can go
    next ("when the lane is resumed"); resumed, the same page says it was sent."""
    ((_, rid),) = find_by_ref(42, "cust-002")
    set_lane_paused("critical", True, actor_ref="operator:pat", note="e2e: the SMS provider is down")
    try:
        asked = otp.request(42, rid, "sms", datetime.now(UTC))
        assert asked is not None
        nid = asked.notification_id
        s = new_operator("sam")  # support, who answers the customer
        s.goto(f"{APP}/messages/{nid}")
        s.get_by_test_id("message-answer").wait_for()
        answer = s.get_by_test_id("message-answer").inner_text()
        assert answer.startswith("waiting: lane paused since ") and " by pat " in answer, answer
        assert "being sent now" not in s.content()
        facts = [f.inner_text() for f in s.get_by_test_id("message-fact").all()]
        assert any("Next try" in f and "when the lane is resumed" in f for f in facts), facts
        shot(s, "message-waiting-lane-paused")
    finally:
        set_lane_paused("critical", False, actor_ref="operator:pat", note="e2e: the provider is back")

    def sent() -> bool:
        s.reload()
        s.get_by_test_id("message-answer").wait_for()
        text = s.get_by_test_id("message-answer").inner_text()
        return text.startswith("sent") or text == "delivered"

    wait_until(sent, 30, "the resumed lane to send the code and its page to say so")
