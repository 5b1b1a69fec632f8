"""The webhook endpoints page in a real browser.

Invariants: on-call adds an endpoint and sees its secret once (a reload shows none) and its health (no attempts
yet); a private URL is refused with its reason and adds nothing; support sees the list without actions. Disable,
rotate and delete, each confirmed with a note: e2e/test_confirm_dialogs.py.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from e2e.conftest import APP, RECEIVER, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def no_endpoint_outlives_its_test():  # type: ignore[no-untyped-def]
    """Tenant 42 has no endpoint of its own in every other browser test, so its order events go to the mock
    receiver; an endpoint left behind would take them instead (every later webhook answered by another host)."""
    yield
    from domain.endpoints import store

    for ep in store.list_endpoints(42):
        store.delete(42, int(ep["id"]), "test-cleanup")


def stored(url: str) -> list[sa.Row]:
    with get_engine().connect() as c:
        return list(c.execute(sa.text("SELECT id, secret, disabled_at FROM webhook_endpoints WHERE url = :u"),
                              {"u": url}))


def test_oncall_adds_an_endpoint_and_sees_its_secret_once(new_operator):
    url = f"{RECEIVER}/webhooks/orders"
    a = new_operator("alice")
    a.goto(f"{APP}/endpoints")
    a.get_by_test_id("endpoint-url").fill("http://169.254.169.254/latest/meta-data/")
    a.get_by_test_id("add-endpoint").click()
    a.get_by_test_id("error").wait_for()
    assert "metadata" in a.get_by_test_id("error").inner_text() and not stored("http://169.254.169.254/latest/meta-data/")
    a.get_by_test_id("endpoint-url").fill(url)
    a.get_by_test_id("endpoint-description").fill("mock receiver")
    a.get_by_test_id("add-endpoint").click()
    a.get_by_test_id("endpoint-secret").wait_for()
    secret = a.get_by_test_id("endpoint-secret").inner_text().strip()
    ((_, kept, _),) = stored(url)
    assert secret.startswith("whsec_") and secret == kept
    shot(a, "endpoint-added")
    a.reload()
    a.get_by_test_id("endpoint-row").first.wait_for()
    # The tab's state comes back with the reload and the page's load clears the secret: wait for that load (a
    # deadline) — the secret must then be gone (as on /keys).
    wait_until(lambda: secret not in a.content(), 10, "the reloaded page to drop the secret")
    row = a.get_by_test_id("endpoint-row").filter(has_text=url)
    assert row.get_by_test_id("endpoint-health").inner_text() == "no attempts in 24 h"
    # Disable, rotate and delete, each through its confirmation: e2e/test_confirm_dialogs.py.


def test_support_sees_endpoints_without_actions(new_operator):
    from domain.endpoints import store

    store.create(42, "http://93.184.216.34/hooks", "visible", None, "test")
    s = new_operator("sam")
    s.goto(f"{APP}/endpoints")
    s.get_by_test_id("endpoint-row").first.wait_for()
    assert s.get_by_test_id("add-endpoint").count() == 0 and s.get_by_test_id("rotate-endpoint").count() == 0


def test_the_endpoints_list_pages_older_and_newer_with_its_position_in_the_url(new_operator):
    """Invariant (paging on every list): past a page of 50 the list pages older / newer, newest first, each
    endpoint on exactly one page, and the position is in the URL (a reload shows the same page)."""
    from domain.endpoints import store

    made = [int(store.create(42, f"http://93.184.216.34/hooks/p{i}", f"page {i}", None, "test")["id"])
            for i in range(51)]
    s = new_operator("sam")
    s.goto(f"{APP}/endpoints")
    s.get_by_test_id("endpoint-row").first.wait_for()
    assert s.get_by_test_id("endpoint-row").count() == 50 and s.get_by_test_id("endpoints-pager-newer").is_disabled()
    first_page = s.get_by_test_id("endpoint-row").first.inner_text()
    assert f"page {len(made) - 1}" in first_page  # newest first
    s.get_by_test_id("endpoints-pager-older").click()
    s.wait_for_function("() => location.search.includes('before=')")
    s.wait_for_function("() => document.querySelectorAll('[data-testid=endpoint-row]').length === 1")
    assert "page 0" in s.get_by_test_id("endpoint-row").first.inner_text()
    s.reload()
    s.wait_for_function("() => document.querySelectorAll('[data-testid=endpoint-row]').length === 1")
    assert s.get_by_test_id("endpoints-pager-older").is_disabled()
    s.get_by_test_id("endpoints-pager-newer").click()
    s.wait_for_function("() => document.querySelectorAll('[data-testid=endpoint-row]').length === 50")


def test_a_test_event_to_the_mock_verifies_and_its_outcome_shows_on_the_row(new_operator):
    """Invariant (issue 27 item 8): an endpoint added on the page, pointed at the demo's mock receiver with one
    event type ticked, has its secret handed to the mock; "Send test event" delivers a signed `outbox.test` through
    the workers, and the row shows the outcome by itself (HTTP 200, delivered) without a reload; the secret has a
    copy button and the docs link is the dashboard's own API docs page."""
    url = f"{RECEIVER}/webhooks/orders"
    a = new_operator("alice")
    a.goto(f"{APP}/endpoints")
    assert "/api/docs" in (a.get_by_test_id("endpoints-docs-link").get_attribute("href") or "")
    a.get_by_test_id("endpoint-url").fill(url)
    a.get_by_test_id("endpoint-type-order.approved").click()
    a.get_by_test_id("add-endpoint").click()
    a.get_by_test_id("endpoint-secret").wait_for()
    assert a.get_by_test_id("copy-endpoint-secret").is_visible()
    assert "mock receiver" in a.get_by_test_id("endpoints-notice").inner_text()
    row = a.get_by_test_id("endpoint-row").filter(has_text=url)
    assert "order.approved" in row.inner_text() and "every event" not in row.inner_text()
    row.get_by_test_id("test-endpoint").click()
    a.get_by_test_id("endpoints-notice").filter(has_text="Test event sent").wait_for()
    row.get_by_test_id("endpoint-test").filter(has_text="delivered").wait_for(timeout=30_000)
    assert "HTTP 200 — accepted" in row.get_by_test_id("endpoint-attempts").inner_text()
    shot(a, "endpoint-test-event")
