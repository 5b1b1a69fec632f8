"""Browser tests: real Chromium (Debian's /usr/bin/chromium) against the real app in prod mode, started here with
its own database (outbox_e2e), Redis db 10, receiver, relay and lane workers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

E2E_DB_NAME, E2E_REDIS_DB = "outbox_e2e", 10
APP_PORT, RECEIVER_PORT = 3117, 8117
APP = f"http://127.0.0.1:{APP_PORT}"
CHROMIUM = "/usr/bin/chromium"
SCREENS = Path(__file__).resolve().parent.parent / "evidence" / "screens"


@pytest.fixture(scope="session")
def app_system():
    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is required: sudo apt-get install -y chromium (the test command does this)")
    from jobs.dbadmin import isolated_environment
    from jobs.procs import ROOT, System

    # Short leases and scans: a crashed worker's message is back within seconds (the default is 30 s / 5 s).
    isolated_environment(E2E_DB_NAME, E2E_REDIS_DB, OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{RECEIVER_PORT}",
                         OUTBOX_APP_URL=APP, OUTBOX_LEASE_SECONDS="2", OUTBOX_SCAN_INTERVAL="0.5")
    # A silent drop must be noticed in seconds, not minutes, for the reconnect test.
    env = {**os.environ, "REFLEX_SOCKET_INTERVAL": "2", "REFLEX_SOCKET_TIMEOUT": "3"}
    system = System(env, ROOT / ".run" / "e2e-logs")
    try:
        system.receiver(RECEIVER_PORT)
        system.relay()
        system.workers()
        system.dashboard(APP_PORT, timeout=420)
        yield system
    finally:
        system.stop_all()


@pytest.fixture(scope="session")
def browser(app_system):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--disable-quic"])
        yield b
        b.close()


@pytest.fixture
def new_operator(browser) -> Iterator:
    contexts = []

    def login(user: str = "alice", width: int = 1280, height: int = 860):  # type: ignore[no-untyped-def]
        ctx = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{APP}/login")
        page.get_by_test_id("login-user").fill(user)
        page.get_by_test_id("login-password").fill("outbox-demo")
        page.get_by_test_id("login-submit").click()
        page.wait_for_url("**/orders")
        return page

    yield login
    for c in contexts:
        c.close()


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)
