"""Push step: operator A's click to operator B's screen, timed inside the pages, and what an open tab costs.

One Chromium (Debian's), two logged-in operators on the same order. A's click and B's render are both stamped with
`performance.timeOrigin + performance.now()` — one browser on one machine, one clock. B's stamp comes from a
MutationObserver that fires when B's revision text turns to the new value; A's own render of its answer is stamped
the same way (`push_self_*`: the command's round trip, the part of the push A pays too). Beside them, from the same
run: the server's share (publish → B's state reloaded, the dashboard's own `refresh_metrics` of kind `push`) and the
raw hop (a Redis PUBLISH to another connection's receipt). And the browser's share: `push_longtask_b_*` / `_a_*`, the
main-thread long tasks (PerformanceObserver 'longtask', each over 50 ms) per push in B and in A, summed from the click
until both pages have shown the new revision and run two more tasks; `push_longtask_b_share`, the pushes that cost B
any long task at all; `push_longtask_p50_ms` / `push_longtask_max_ms`, B's median and worst push.

Then 50 tabs are opened on 50 orders, each with its live view subscribed, and the dashboard's resident memory is
read before and after: `rss_per_tab_kb`; `rss_total_mb_tabs` is every process of the system with those tabs open
(Chromium itself left out).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.delivery.queue import LIVE_VIEWS_KEY, order_channel
from domain.orders.commands import create_order
from jobs.drills.bench.common import _SLOT, SUFFIX, pct, rss_kb, rss_total_mb, say, system_pids
from jobs.ops.browser import open_order, operator_page
from jobs.ops.procs import ROOT, Proc, System, app_dir, wait_until

DASH_PORT = 3098 + 100 * _SLOT
APP = f"http://127.0.0.1:{DASH_PORT}"
# Built for DASH_PORT in directories of its own: a demo running from this checkout (its `.web/`) keeps its pages.
APP_DIR = app_dir(f"bench-push{SUFFIX}")
CHROMIUM = "/usr/bin/chromium"

# Stamps the moment the element `testid` shows `want`, in window.__stamp[key] (page clock, ms since the epoch).
_WATCH = """([testid, want, key]) => {
  window.__stamp = window.__stamp || {};
  window.__stamp[key] = null;
  const done = () => {
    const e = document.querySelector(`[data-testid="${testid}"]`);
    if (e && e.innerText.trim() === want && window.__stamp[key] === null) {
      window.__stamp[key] = performance.timeOrigin + performance.now();
      obs.disconnect();
    }
  };
  const obs = new MutationObserver(done);
  obs.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""
# Every long task (a main-thread task over 50 ms: here, React rendering a delta) from now on, in window.__lt.
_LONGTASKS = """() => {
  window.__lt = [];
  if (!window.__ltObs) {
    window.__ltObs = new PerformanceObserver((l) => {
      for (const e of l.getEntries()) (window.__lt || []).push(e.duration);
    });
    window.__ltObs.observe({type: 'longtask'});
  }
}"""
# The long tasks since _LONGTASKS, read once the page has run two more tasks (an entry is queued after its task).
_LONGTASKS_READ = """() => new Promise((done) => setTimeout(() => setTimeout(() => done(window.__lt || []), 20), 20))"""
_CLICK = """(testid) => {
  const t = performance.timeOrigin + performance.now();
  document.querySelector(`[data-testid="${testid}"]`).click();
  return t;
}"""


def _listeners(r: redis_lib.Redis, channel: str) -> int:
    counts = [r.hget(k, channel) for k in r.scan_iter(f"{LIVE_VIEWS_KEY}:*")]
    return sum(int(c) for c in counts if isinstance(c, (bytes, str)))


def _subscribed(r: redis_lib.Redis, oid: int, at_least: int) -> None:
    def ok() -> bool:
        return _listeners(r, order_channel(42, oid)) >= at_least

    wait_until(ok, 30, f"{at_least} live view(s) of order {oid} subscribed")


def _log_in(browser: Any, user: str) -> Any:
    return operator_page(browser, APP, user)


def _open(page: Any, oid: int) -> None:
    open_order(page, APP, oid)
    page.get_by_test_id("order-revision").wait_for()


def _stamp(page: Any, key: str) -> float:
    page.wait_for_function(f"() => window.__stamp && window.__stamp['{key}'] !== null", timeout=30_000)
    return float(page.evaluate(f"() => window.__stamp['{key}']"))


def _raw_publish_ms(r: redis_lib.Redis, runs: int) -> list[float]:
    """The bare hop: PUBLISH on one connection, its receipt on another (Redis's own round trip, same run)."""
    sub = r.pubsub()  # type: ignore[no-untyped-call]  # redis-py's pubsub() carries no annotations
    sub.subscribe("bench:raw-push")
    sub.get_message(timeout=2)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r.publish("bench:raw-push", "x")
        while sub.get_message(timeout=2) is None:
            pass
        out.append((time.perf_counter() - t0) * 1000)
    sub.close()
    return out


def _server_push_ms(since: float) -> list[float]:
    with UnitOfWork() as uow:
        return [float(x) for x in uow.execute(sa.text(
            "SELECT latency_ms FROM refresh_metrics WHERE kind = 'push' AND created_at >= to_timestamp(:s)"),
            {"s": since}).scalars()]


def bench_push(system: System, r: redis_lib.Redis, runs: int = 50, tabs: int = 50) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    if "relay" not in system.procs:
        system.relay()
        system.workers()
    say(f"building and starting the dashboard (prod) in {APP_DIR.web.relative_to(ROOT)} …")
    start_dashboard(system)
    res: dict[str, float] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"])
        try:
            a, b = _log_in(browser, "alice"), _log_in(browser, "bob")
            push, self_ms, since = [], [], time.time() - 1
            long_b: list[float] = []
            long_a: list[float] = []
            for i in range(runs):
                oid = create_order(tenant_id=42, customer_ref="cust-001", amount_cents=2500, currency="EUR")
                _open(a, oid)
                _open(b, oid)
                _subscribed(r, oid, 2)
                b.evaluate(_LONGTASKS)
                a.evaluate(_LONGTASKS)
                b.evaluate(_WATCH, ["order-revision", "2", "b"])
                a.evaluate(_WATCH, ["order-revision", "2", "a"])
                t_click = float(a.evaluate(_CLICK, "approve"))
                push.append(_stamp(b, "b") - t_click)
                self_ms.append(_stamp(a, "a") - t_click)
                long_b.append(sum(b.evaluate(_LONGTASKS_READ)))
                long_a.append(sum(a.evaluate(_LONGTASKS_READ)))
                if (i + 1) % 10 == 0:
                    say(f"{i + 1}/{runs} pushes: p50 {statistics.median(push):.1f} ms")
            server = _server_push_ms(since)
            raw = _raw_publish_ms(r, runs)
            res.update({
                "push_p50_ms": round(pct(push, 0.5), 1), "push_p99_ms": round(pct(push, 0.99), 1),
                "push_self_p50_ms": round(pct(self_ms, 0.5), 1), "push_self_p99_ms": round(pct(self_ms, 0.99), 1),
                "push_server_p50_ms": round(pct(server, 0.5), 1) if server else -1.0,
                "push_server_p99_ms": round(pct(server, 0.99), 1) if server else -1.0,
                "push_raw_publish_p50_ms": round(pct(raw, 0.5), 2),
                "push_raw_publish_p99_ms": round(pct(raw, 0.99), 2),
                # Main-thread long tasks (> 50 ms each) per push, summed: B's render of the delta, A's of its answer.
                "push_longtask_b_p50_ms": round(pct(long_b, 0.5), 1),
                "push_longtask_b_p99_ms": round(pct(long_b, 0.99), 1),
                "push_longtask_a_p50_ms": round(pct(long_a, 0.5), 1),
                "push_longtask_a_p99_ms": round(pct(long_a, 0.99), 1),
                "push_longtask_b_share": round(sum(1 for x in long_b if x > 0) / len(long_b), 2),
                # The same in B under the names issue 26 asks for: the median push's long tasks and the worst one's.
                "push_longtask_p50_ms": round(pct(long_b, 0.5), 1), "push_longtask_max_ms": round(max(long_b), 1)})
            res.update(_tabs(system, browser, r, tabs))
        finally:
            browser.close()
    return res


def start_dashboard(system: System) -> Proc:
    """The bench's dashboard on DASH_PORT, built and run in its own directories (APP_DIR)."""
    # The dashboard accepts its own origin only (rxconfig.py); the other processes keep posting receipts to the API.
    api_url = system.env.get("OUTBOX_APP_URL", "")
    system.env["OUTBOX_APP_URL"] = APP
    try:
        return system.dashboard(DASH_PORT, APP_DIR, timeout=600)
    finally:
        system.env["OUTBOX_APP_URL"] = api_url


def _dashboard_kb(system: System) -> int:
    return sum(rss_kb(pid) for pid in system_pids(system).get("dashboard", []))


def _tabs(system: System, browser: Any, r: redis_lib.Redis, tabs: int) -> dict[str, float]:
    """Open `tabs` tabs of one logged-in operator, each on its own order with its live view subscribed."""
    ctx = _log_in(browser, "alice").context
    before = _dashboard_kb(system)
    pages = []
    for i in range(tabs):
        oid = create_order(tenant_id=42, customer_ref="cust-001", amount_cents=2500, currency="EUR")
        tab = ctx.new_page()
        tab.set_default_timeout(60_000)
        _open(tab, oid)
        _subscribed(r, oid, 1)
        pages.append(tab)
        if (i + 1) % 10 == 0:
            say(f"{i + 1}/{tabs} tabs open")
    after = _dashboard_kb(system)
    total = rss_total_mb(system)
    ctx.close()
    return {"rss_per_tab_kb": round(max(0, after - before) / tabs, 1), "rss_dashboard_mb_tabs": round(after / 1024, 1),
            "rss_dashboard_mb_no_tabs": round(before / 1024, 1), "rss_total_mb_tabs": round(total, 1),
            "tabs_open": float(tabs)}
