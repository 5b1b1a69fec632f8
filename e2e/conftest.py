"""Browser tests: real Chromium (Debian's /usr/bin/chromium) against the real app in prod mode, started here with
its own database (outbox_e2e), Redis db 10, receiver, relay and lane workers, its frontend built in `.run/e2e/web`
(never the checkout's `.web/`, which a demo may be serving)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import parallel  # first: a parallel worker's own slot and Redis server (tests/parallel.py)

os.environ["OUTBOX_ENV"] = "development"  # demo secrets and the /ops fault switches the browser tests use
_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)  # see tests/conftest.py
_SUFFIX = f"_s{_SLOT}" if _SLOT else ""
E2E_DB_NAME, E2E_REDIS_DB = f"outbox_e2e{_SUFFIX}", 10
APP_PORT, RECEIVER_PORT = 3117 + 100 * _SLOT, 8117 + 100 * _SLOT
APP = f"http://127.0.0.1:{APP_PORT}"
CHROMIUM = "/usr/bin/chromium"
EVIDENCE = Path(__file__).resolve().parent.parent / "evidence"
RECEIVER = f"http://127.0.0.1:{RECEIVER_PORT}"
# Screenshots and latency samples are evidence: written to evidence/ only by the explicit browser evidence run
# (`bash .ci/test e2e --evidence`); an ordinary test run keeps them under .run/ so the checkout stays clean.
SCRATCH = Path(__file__).resolve().parent.parent / ".run" / "e2e-evidence"
_EVIDENCE_RUN = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--evidence", action="store_true",
                     help="write screenshots and push latency to evidence/ (the browser evidence run)")


def pytest_configure(config: pytest.Config) -> None:
    parallel.register(config)
    global _EVIDENCE_RUN
    _EVIDENCE_RUN = bool(config.getoption("--evidence", default=False))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The first browser test of a run pays for the system it needs (the frontend's build, ≈ 2 min alone, more with
    a second build beside it): a browser test without a limit of its own gets 900 s instead of pytest's 300."""
    for item in items:
        if item.nodeid.startswith("e2e/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(900))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    where = EVIDENCE if _EVIDENCE_RUN else SCRATCH
    terminalreporter.write_line(f"browser evidence (screenshots, push latency) written under {where}")


def evidence_file(name: str) -> Path:
    base = EVIDENCE if _EVIDENCE_RUN else SCRATCH
    path = base / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def redis_client():  # type: ignore[no-untyped-def]
    """The e2e system's Redis db (set by the app_system fixture)."""
    import redis

    return redis.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])


def listeners(channel: str) -> int:
    """Live views registered on `channel` in the dashboard (its one subscription fans out to them)."""
    from domain.delivery.queue import LIVE_VIEWS_KEY

    r = redis_client()
    try:
        return sum(int(r.hget(k, channel) or 0) for k in r.scan_iter(f"{LIVE_VIEWS_KEY}:*"))
    finally:
        r.close()


def pubsub_connections() -> int:
    """The dashboard hub's subscriber connections in the e2e system's Redis db (lane workers subscribe to their
    wake-up channel too: they are not the hub)."""
    from dashboard.live import HUB_CLIENT_NAME

    r = redis_client()
    try:
        db = r.connection_pool.connection_kwargs.get("db", 0)
        return sum(1 for c in r.client_list(_type="pubsub")
                   if int(c.get("db", -1)) == db and c.get("name") == HUB_CLIENT_NAME)
    finally:
        r.close()


def wait_listeners(channel: str, at_least: int | None = None, at_most: int | None = None,
                   timeout: float = 20) -> None:
    """Wait until the number of live views subscribed to `channel` is within bounds (their live task runs)."""
    from jobs.ops.procs import wait_until

    wait_until(lambda: (at_least is None or listeners(channel) >= at_least)
               and (at_most is None or listeners(channel) <= at_most), timeout,
               f"subscribers of {channel} within [{at_least}, {at_most}]")


@contextmanager
def nothing_published_on(channel: str, timeout: float = 10) -> Iterator[None]:
    """Assert that nothing was published on `channel` while the block ran. Redis delivers one connection's
    messages in the order the server took them, so after the block we publish a fence on a private channel
    and read up to it: anything published on `channel` before the fence would arrive first."""
    import time
    import uuid

    r = redis_client()
    probe = r.pubsub()
    fence = f"e2e:fence:{uuid.uuid4().hex}"
    probe.subscribe(channel, fence)
    try:
        for _ in range(2):  # the two subscribe confirmations
            assert probe.get_message(timeout=timeout) is not None
        yield
        r.publish(fence, "fence")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = probe.get_message(timeout=1)
            if msg is None:
                continue
            assert msg["channel"].decode() != channel, f"something was published on {channel}: {msg['data']!r}"
            if msg["channel"].decode() == fence:
                return
        raise TimeoutError("the fence message never came back")
    finally:
        probe.close()
        r.close()


@contextmanager
def switched_off(name: str) -> Iterator[None]:
    """Switch a fast path (or the views' periodic check) off in every process of the e2e system while the block
    runs: the development-only runtime switch `SWITCHED_OFF` (see domain/delivery/wakeups.py), always switched back
    on."""
    from domain.delivery.queue import SWITCHED_OFF

    r = redis_client()
    r.sadd(SWITCHED_OFF, name)
    try:
        yield
    finally:
        r.srem(SWITCHED_OFF, name)
        r.close()


@pytest.fixture(scope="session")
def app_system():
    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is required: sudo apt-get install -y chromium (the test command does this)")
    from jobs.ops.dbadmin import isolated_environment
    from jobs.ops.procs import ROOT, System, app_dir

    # This process points at the e2e system only while a browser test runs (`_e2e_environment`): in a parallel run
    # the same worker goes on with integration tests, which must find their own database and Redis db again.
    before = dict(os.environ)
    # Short leases and scans: a crashed worker's message is back within seconds (the default is 30 s / 5 s).
    isolated_environment(E2E_DB_NAME, E2E_REDIS_DB, OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{RECEIVER_PORT}",
                         OUTBOX_APP_URL=APP, OUTBOX_LEASE_SECONDS="2", OUTBOX_SCAN_INTERVAL="0.5")
    # A silent drop must be noticed in seconds, not minutes, for the reconnect test.
    env = {**os.environ, "REFLEX_SOCKET_INTERVAL": "2", "REFLEX_SOCKET_TIMEOUT": "3"}
    system = System(env, ROOT / ".run" / f"e2e-logs{_SUFFIX}")
    try:
        system.receiver(RECEIVER_PORT, reset=True)
        system.relay()
        system.workers()
        system.dashboard(APP_PORT, app_dir(f"e2e{_SUFFIX}"), timeout=420)  # never the checkout's .web/
        _use_environment(before)
        yield system
    finally:
        _use_environment(before)
        system.stop_all()


def _use_environment(env: dict[str, str]) -> None:
    from domain.settings import reload_settings

    os.environ.clear()
    os.environ.update(env)
    reload_settings()


@pytest.fixture(autouse=True)
def _e2e_environment(request: pytest.FixtureRequest) -> Iterator[None]:
    """A browser test reads and writes the e2e system's database and Redis db from this process too (its
    helpers, its assertions): the system's environment for the test, the worker's own again afterwards."""
    if "app_system" not in request.fixturenames:
        yield
        return
    system = request.getfixturevalue("app_system")
    before = dict(os.environ)
    _use_environment(system.env)
    try:
        yield
    finally:
        _use_environment(before)


@pytest.fixture(scope="package")
def playwright_session():  # type: ignore[no-untyped-def]
    """The browser tests' one Playwright: a second sync_playwright() in the same thread, while this one runs, fails
    ("Sync API inside the asyncio loop"), so every browser is launched from this one. It lives while the tests of
    this package run and stops when they are done: while it runs, its loop is this thread's running loop, and an
    async test that a parallel worker runs after the browser tests could not start its own ("Runner.run() cannot
    be called from a running event loop")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def launch_chromium(p):  # type: ignore[no-untyped-def]
    return p.chromium.launch(executable_path=CHROMIUM, args=[
        "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--disable-quic"])


@pytest.fixture(scope="package")
def browser(app_system, playwright_session):
    b = launch_chromium(playwright_session)
    yield b
    b.close()


def log_in(page, user: str) -> None:  # type: ignore[no-untyped-def]
    """Log in on the login page; platform on-call lands on /ops, everyone else on /orders."""
    page.goto(f"{APP}/login")
    page.get_by_test_id("login-user").fill(user)
    page.get_by_test_id("login-password").fill("outbox-demo")
    page.get_by_test_id("login-submit").click()
    page.wait_for_url("**/ops" if user == "pat" else "**/orders")


@pytest.fixture
def new_operator(browser) -> Iterator:
    contexts = []

    def login(user: str = "alice", width: int = 1280, height: int = 860):  # type: ignore[no-untyped-def]
        ctx = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        log_in(page, user)
        return page

    yield login
    for c in contexts:
        c.close()


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(evidence_file(f"screens/{name}.png")), full_page=True)
