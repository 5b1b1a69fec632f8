"""A build never turns another dashboard's pages (issue 25, item 1). Reflex bakes the backend's port into the frontend
it builds, in its web directory, and a running dashboard serves its pages from there: the bench's push step rebuilt
the checkout's `.web/` for its port 3098, so a demo running from the same checkout (`outbox up`, port 3000) went on
serving pages that open their websocket to port 3098 — "Cannot connect to server", nobody could log in.

Invariant: a dashboard already serving (the e2e system's, standing in for the demo) still serves pages whose event
URL names its own port, and logs people in, after the bench's push step has built and served its dashboard for its
own port and gone; no test or bench dashboard touches the checkout's `.web/` or `.states/` (the demo's: `outbox up`;
every `reflex run` empties its sessions directory as it starts).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from e2e.conftest import _SUFFIX, APP, APP_PORT
from jobs.drills.bench import push
from jobs.ops.procs import DEMO_APP, ROOT, AppDir, System

pytestmark = pytest.mark.e2e
ENV_MODULE = re.compile(r"/assets/reflex-env-[\w-]+\.js")  # Reflex's env.json, as the bundle carries it
EVENT = re.compile(r"EVENT:`([^`]+)`")


def event_url(base: str) -> str:
    """The websocket address the login page served at `base` connects to."""
    page = httpx.get(f"{base}/login", timeout=10, follow_redirects=True)
    page.raise_for_status()
    module = ENV_MODULE.search(page.text)
    assert module is not None, f"no reflex-env module on {base}/login"
    found = EVENT.search(httpx.get(base + module.group(0), timeout=10).text)
    assert found is not None, f"no event URL in {module.group(0)}"
    return found.group(1)


def fingerprint(app: AppDir) -> dict[str, int | str]:
    """What a dashboard's build and start rewrite in its directories: env.json (the backend's address), the bundle's
    files and the sessions on disk (their modification times)."""
    files = [*(app.web / "build" / "client").rglob("*"), *app.states.glob("*")]
    out: dict[str, int | str] = {str(f): f.stat().st_mtime_ns for f in files if f.is_file()}
    if (app.web / "env.json").is_file():
        out["env.json"] = (app.web / "env.json").read_text()
    return out


@pytest.mark.timeout(900)
def test_a_build_for_another_port_leaves_a_serving_dashboard_alone(app_system: System, new_operator: Any) -> None:
    demo = fingerprint(DEMO_APP)
    assert event_url(APP).endswith(f":{APP_PORT}/_event")
    bench = System(dict(app_system.env), ROOT / ".run" / f"e2e-logs{_SUFFIX}" / "bench-push")
    try:
        push.start_dashboard(bench)
        assert event_url(push.APP).endswith(f":{push.DASH_PORT}/_event"), "the bench's dashboard is built for its port"
    finally:
        bench.stop_all()
    served = event_url(APP)
    assert served.endswith(f":{APP_PORT}/_event"), f"the serving dashboard's pages now connect to {served}"
    page = new_operator("alice")  # the login goes through the websocket: it lands on /orders
    assert page.url.endswith("/orders")
    assert fingerprint(DEMO_APP) == demo, "a test or bench dashboard wrote into the checkout's .web/ or .states/"
