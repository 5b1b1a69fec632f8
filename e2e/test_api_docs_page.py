"""The API docs page in a real browser with no way out of the machine (issue 27, item 7): it used to load Swagger
UI from a public CDN, so behind a firewall it was blank.

Invariant: with every request to a host other than this machine aborted, /api/docs — served by the dashboard,
the API mounted with the Reflex app as in production — renders Swagger UI with the API's operations, and the page
asked for nothing outside the machine; trying an operation without a key shows the 401 and its WWW-Authenticate
challenge.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from dashboard.api.errors import API_KEY
from e2e.conftest import APP, shot

pytestmark = pytest.mark.e2e
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def test_the_docs_page_renders_with_no_network_beyond_the_machine(browser):  # type: ignore[no-untyped-def]
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    left: list[str] = []  # every request that would have left the machine (aborted)
    asked: list[str] = []
    errors: list[str] = []

    def only_local(route: Any) -> None:
        url = route.request.url
        asked.append(url)
        if urlsplit(url).hostname in LOCAL_HOSTS or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            left.append(url)
            route.abort("internetdisconnected")

    try:
        ctx.route("**/*", only_local)
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{APP}/api/docs")
        page.locator(".swagger-ui .info .title").filter(has_text="Outbox API").wait_for()
        orders = page.locator(".opblock-get").filter(has=page.locator('[data-path="/api/v1/orders"]')).first
        orders.wait_for()
        assert page.locator(".opblock").count() > 20, "every operation of the API is listed"
        shot(page, "api-docs-offline")
        # Try it out, without a key: the answer is the 401 and the challenge naming the scheme.
        orders.locator(".opblock-summary").click()
        orders.locator(".try-out__btn").click()
        orders.locator(".execute").click()
        live = orders.locator(".live-responses-table")
        live.locator(".response-col_status").filter(has_text="401").wait_for()
        assert API_KEY.lower() in live.inner_text().lower().replace("\u200b", ""), live.inner_text()
    finally:
        ctx.close()
    assert left == [], f"the docs page asked for something outside the machine: {left}"
    assert any("/api/docs/static/swagger-ui-bundle.js" in u for u in asked), asked
    assert errors == [], errors
