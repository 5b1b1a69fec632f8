"""Disconnected means read-only, in a real browser against the real app.

Invariants: while a tab's link to the backend is down, every page says so in words and its action buttons are
disabled; a click made while disconnected is never sent — not then, not on reconnect (Reflex's client used to
queue it and fire it when the socket came back); on reconnect the view reloads from PostgreSQL and says what
changed while it was away, one missed change as much as many; an order action acts only on the revision its
operator saw.

The connection is cut two ways: through the tab's own websocket (the test stands between the page and the backend,
closes both sides and refuses new connections until it restores them — the page's socket drops at once, and every
frame the page sends upstream is kept), and with the browser's offline switch (`navigator.onLine`).
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from dashboard.link import BACK_TEXT, OFFLINE_TEXT
from dashboard.pages.order_detail import OrderState
from domain.db import get_engine
from domain.delivery.queue import order_channel
from domain.delivery.wakeups import after_commit, arq_pool
from domain.orders.commands import Committed, create_order, execute_order_command
from e2e.conftest import APP, log_in, nothing_published_on, shot, wait_listeners

pytestmark = pytest.mark.e2e
EVENT_SOCKET = re.compile(r".*/_event/.*")

# A click that gets past a disabled button (a keyboard, a script, a race with the drop): the button's own React
# click handler, called directly — exactly what the page runs on a click, whatever the DOM's `disabled` says.
FIRE_CLICK_HANDLER = """(el) => {
  const key = Object.keys(el).find((k) => k.startsWith('__reactProps$'));
  const handler = key && el[key].onClick;
  if (!handler) return false;
  handler({type: 'click', target: el, currentTarget: el, preventDefault() {}, stopPropagation() {}});
  return true;
}"""


class Line:
    """The tab's websocket to the backend, through the test: `cut()` closes both sides and refuses every new
    connection until `restore()`; `sent` keeps every frame the page sent upstream, on every connection."""

    def __init__(self, page) -> None:  # type: ignore[no-untyped-def]
        self.page = page
        self.down = False
        self.sent: list[str] = []
        self.open: list[tuple[object, object]] = []
        page.route_web_socket(EVENT_SOCKET, self._route)

    def _route(self, ws) -> None:  # type: ignore[no-untyped-def]
        if self.down:
            ws.close()  # as a backend that cannot be reached
            return
        server = ws.connect_to_server()
        self.open.append((ws, server))

        def up(m: str | bytes) -> None:
            self.sent.append(m if isinstance(m, str) else m.decode(errors="replace"))
            server.send(m)

        ws.on_message(up)
        server.on_message(lambda m: ws.send(m))

    def cut(self) -> None:
        self.down = True
        for ws, server in self.open:
            server.close()  # type: ignore[attr-defined]
            ws.close()  # type: ignore[attr-defined]
        self.open.clear()

    def restore(self) -> None:
        self.down = False

    def forge(self, handler: str, payload: dict[str, object]) -> None:
        """`OrderState.<handler>(payload)` sent on the tab's own connection, framed as the page frames an event."""
        path = "/" + self.page.url.split("//", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
        event = {"name": f"{OrderState.get_full_name()}.{handler}", "payload": payload,
                 "router_data": {"pathname": path, "asPath": path}}
        self.open[-1][1].send("42/_event," + json.dumps(["event", event]))  # type: ignore[attr-defined]

    def calls(self, handler: str) -> list[str]:
        name = f"{OrderState.get_full_name()}.{handler}"
        return [f for f in self.sent if f'"{name}"' in f]


def routed_login(browser, user: str):  # type: ignore[no-untyped-def]
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    line = Line(page)  # before the first page opens its websocket
    log_in(page, user)
    return page, line


def open_order(page, order_id: int) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{APP}/orders/{order_id}")
    page.get_by_test_id("order-revision").wait_for()
    page.wait_for_function("([id]) => document.body.innerText.includes(`Order #${id}`)", arg=[order_id])


def wait_link(page, state: str, timeout: float = 30_000) -> None:  # type: ignore[no-untyped-def]
    """The link as the page shows it: "down" or "back" (the banner), "up" (no banner)."""
    page.wait_for_function("(s) => document.documentElement.dataset.outboxLink === s", arg=state, timeout=timeout)


def wait_text(page, testid: str, text: str, timeout: float = 30_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "([id, t]) => { const e = document.querySelector(`[data-testid=\"${id}\"]`); "
        "return e && e.innerText.trim() === t }",
        arg=[testid, text], timeout=timeout)


def publish_after_commit(result: Committed) -> None:
    """What the dashboard does after its own commit (the hint to open views), on a thread of its own: Playwright's
    sync API owns this thread's event loop."""
    async def run() -> None:
        pool = await arq_pool()
        try:
            await after_commit(pool, result)
        finally:
            await pool.aclose()

    with ThreadPoolExecutor(1) as ex:
        ex.submit(asyncio.run, run()).result()


def order_row(order_id: int) -> tuple[str, int, int]:
    """(status, revision, outbox events written for it) from PostgreSQL."""
    with get_engine().connect() as c:
        status, revision = c.execute(sa.text("SELECT status, revision FROM orders WHERE id = :i"),
                                     {"i": order_id}).one()
        events = c.execute(sa.text("SELECT count(*) FROM outbox_events WHERE aggregate_type = 'order' "
                                   "AND aggregate_id = :o"), {"o": str(order_id)}).scalar_one()
    return str(status), int(revision), int(events)


def test_a_click_made_while_disconnected_is_never_sent_and_the_view_reloads_on_reconnect(browser):
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    page, line = routed_login(browser, "alice")
    try:
        open_order(page, oid)
        channel = order_channel(42, oid)
        wait_listeners(channel, at_least=1)
        approve, cancel = page.get_by_test_id("approve"), page.get_by_test_id("cancel")
        assert approve.is_enabled() and cancel.is_enabled()

        line.cut()
        wait_link(page, "down")
        banner = page.get_by_test_id("link-banner")
        assert OFFLINE_TEXT in banner.inner_text(), "the page says in words that it is offline"
        assert approve.is_disabled() and cancel.is_disabled(), "no action while disconnected"
        assert page.get_by_text("Cannot connect to server").count() == 0, "Reflex's technical toast is gone"
        shot(page, "order-detail-offline")
        wait_listeners(channel, at_most=0)  # the backend has dropped this tab's live view

        with nothing_published_on(channel):
            approve.click(force=True)  # a pointer on a disabled button: nothing
            assert approve.evaluate(FIRE_CLICK_HANDLER), "the button's click handler ran"
            cancel.evaluate(FIRE_CLICK_HANDLER)
            line.restore()
            wait_link(page, "back")  # reconnected: the page reloaded from the database and says so
            assert BACK_TEXT in page.get_by_test_id("link-banner").inner_text()
            wait_listeners(channel, at_least=1)  # on_load ran again on the new connection: its live view is back
            assert approve.is_enabled()
        assert line.calls("approve") == [] and line.calls("cancel") == [], \
            "a click made while disconnected was sent on reconnect"
        assert order_row(oid) == ("authorized", 1, 0), "the order is as it was: nothing clicked offline happened"
        assert page.get_by_test_id("order-revision").inner_text() == "1"
        assert page.get_by_test_id("command-error").count() == 0

        # Online again, a click acts once: the only approve that ever reached the backend is this one.
        approve.click()
        wait_text(page, "order-revision", "2")
        assert "approved at revision 2" in page.get_by_test_id("command-notice").inner_text()
        assert len(line.calls("approve")) == 1
        assert order_row(oid) == ("approved", 2, 1)
    finally:
        page.context.close()


def test_a_view_that_missed_exactly_one_change_says_so_on_reconnect(browser, new_operator):
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    a = new_operator("alice")
    b, line = routed_login(browser, "bob")
    try:
        open_order(a, oid)
        open_order(b, oid)
        channel = order_channel(42, oid)
        wait_listeners(channel, at_least=2)
        line.cut()
        wait_link(b, "down")
        wait_listeners(channel, at_most=1)  # B's live view is gone: no push can reach it
        a.get_by_test_id("approve").click()
        wait_text(a, "order-revision", "2")
        assert b.get_by_test_id("order-revision").inner_text() == "1", "B was cut off and cannot have seen it"
        line.restore()
        wait_text(b, "order-revision", "2")
        note = b.get_by_test_id("missed-refresh")
        note.wait_for()
        text = note.inner_text()
        assert "reloaded at revision 2" in text and "1 change since this page showed revision 1" in text, text
        assert "approved by alice" in text, f"the note says what changed: {text}"
        shot(b, "order-detail-missed-one-change")
    finally:
        b.context.close()


def test_an_order_action_is_refused_when_the_order_moved_past_the_revision_its_operator_saw(browser):
    """The action carries the revision on the operator's screen, not the one the tab's server state holds by the time
    it arrives: a Mark fulfilled sent for revision 1 of an order approved (revision 2) meanwhile is refused with who
    changed it, and changes nothing — before, the server acted on its own newer revision."""
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    page, line = routed_login(browser, "alice")
    try:
        open_order(page, oid)
        wait_listeners(order_channel(42, oid), at_least=1)
        r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                                  actor_ref="operator:bob", request_id=f"req-seen-{oid}")
        assert isinstance(r, Committed)

        publish_after_commit(r)
        wait_text(page, "order-revision", "2")  # the tab's state is at revision 2 now
        line.forge("fulfill", {"seen_revision": 1})
        page.wait_for_function("() => { const e = document.querySelector('[data-testid=command-error]'); "
                               "return e && e.innerText.includes('Someone changed this order first') }")
        assert "approved by bob" in page.get_by_test_id("command-error").inner_text()
        assert order_row(oid) == ("approved", 2, 1), "the stale action changed nothing"
    finally:
        page.context.close()


def test_the_browser_going_offline_pauses_every_action_at_once_and_online_gives_them_back(new_operator):
    """The browser's own offline switch: the banner and the disabled buttons come at once, before the websocket
    has noticed anything (a dead socket takes the ping interval plus timeout to notice), on the order page and on
    /ops alike; back online, the actions come back."""
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    a = new_operator("alice")
    open_order(a, oid)
    p = new_operator("pat")
    p.get_by_test_id("lane-toggle").first.wait_for()
    for page, testid in ((a, "approve"), (p, "lane-toggle")):
        button = page.get_by_test_id(testid).first
        assert button.is_enabled()
        page.context.set_offline(True)
        wait_link(page, "down", timeout=5_000)
        assert OFFLINE_TEXT in page.get_by_test_id("link-banner").inner_text()
        assert button.is_disabled(), f"{testid} is disabled while offline"
        page.context.set_offline(False)
        # "up" at once if the socket never noticed; after "back" if a lost ping made it reconnect.
        wait_link(page, "up", timeout=30_000)
        assert button.is_enabled()
        assert page.get_by_test_id("link-banner").count() == 0
    assert order_row(oid) == ("authorized", 1, 0)
