"""Behind the nginx `outbox up --scale` starts (jobs/ops/scaled.py), what is counted per client address counts each
client, not the proxy (issue 25, item 6): the API process trusts the proxy exactly as the scaled supervisor sets it
up (`scaled.trusting_proxy`), and nginx is started from `scaled.nginx_conf`.

Invariants: two clients behind the proxy fill two buckets, so one throttled client never throttles the other; an
`X-Forwarded-For` written by the caller is never believed — through the proxy only the address the proxy itself
appended counts (the right-most untrusted, never the left-most), and straight from an untrusted peer the header is
ignored altogether. The clients are told apart by their real source address (127.0.0.2, 127.0.0.3: every loopback
address reaches the proxy on 127.0.0.1), so nothing here forges what it then asserts.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dashboard.api.deps import UNKNOWN_KEY_BURST, UNKNOWN_KEY_KEY
from jobs.ops import scaled
from jobs.ops.procs import ROOT, System
from tests.conftest import PORT_OFFSET, SLOT_SUFFIX

pytestmark = pytest.mark.services
PROXY_PORT, BACKEND_PORT = 8082 + PORT_OFFSET, 8083 + PORT_OFFSET
PROXY, BACKEND = f"http://127.0.0.1:{PROXY_PORT}", f"http://127.0.0.1:{BACKEND_PORT}"


@pytest.fixture(scope="module")
def behind_proxy(migrated_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    env = dict(os.environ)
    system = System({**env, "OUTBOX_TRUSTED_PROXIES": scaled.trusting_proxy(env)},
                    ROOT / ".run" / f"test-logs{SLOT_SUFFIX}" / "proxied")
    run_dir: Path = tmp_path_factory.mktemp("proxy")
    t = scaled.Topology(PROXY_PORT, (BACKEND_PORT,), "", run_dir)
    t.static_dir.mkdir(parents=True)
    for page in ("index.html", "404.html"):  # the bundle's place: only the API is behind the proxy here
        (t.static_dir / page).write_text("<!doctype html><title>outbox</title>")
    try:
        system.api(BACKEND_PORT)
        scaled.proxy(system, t)
        yield system
    finally:
        system.stop_all()


def client_from(address: str, base: str) -> httpx.Client:
    """A client whose connections leave from `address` (a loopback address of its own)."""
    return httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=address), timeout=30)


def until_throttled(c: httpx.Client, headers: Any = None) -> int:
    """Unknown keys until the address's bucket answers 429 (at most twice the burst: refills are slow, 1 per 3 s);
    returns how many requests that took."""
    for n in range(1, 2 * int(UNKNOWN_KEY_BURST) + 1):
        h = {"Authorization": f"Bearer nope-{uuid.uuid4().hex}", **(headers(n) if headers else {})}
        r = c.get("/api/v1/orders", headers=h)
        assert r.status_code in (401, 429), r.text
        if r.status_code == 429:
            return n
    raise AssertionError(f"never throttled after {2 * int(UNKNOWN_KEY_BURST)} unknown keys")


def buckets(redis_db: Any) -> set[str]:
    return {k.decode()[len(UNKNOWN_KEY_KEY):] for k in redis_db.scan_iter(UNKNOWN_KEY_KEY + "*")}


def test_two_clients_behind_the_proxy_are_throttled_apart(behind_proxy: System, redis_db: Any) -> None:
    """One client flooding unknown keys through the proxy is throttled; another client behind the same proxy is
    not (before: both were 127.0.0.1, the proxy, and the second was refused with 429 at its first request)."""
    with client_from("127.0.0.2", PROXY) as a, client_from("127.0.0.3", PROXY) as b:
        until_throttled(a)
        r = b.get("/api/v1/orders", headers={"Authorization": "Bearer nope-b"})
        assert r.status_code == 401, f"the second client paid for the first one's flood: {r.status_code} {r.text}"
        assert a.get("/api/v1/orders", headers={"Authorization": "Bearer nope-a"}).status_code == 429
    assert buckets(redis_db) == {"127.0.0.2", "127.0.0.3"}, "each client's own bucket, none for the proxy"


def test_a_forged_forwarded_for_buys_no_fresh_bucket(behind_proxy: System, redis_db: Any) -> None:
    """A caller who writes its own X-Forwarded-For — a new address on every request — is still one client: through
    the proxy the proxy's own right-most entry counts (the left-most would be a fresh bucket per request), and
    straight at the backend, from a peer nobody trusts, the header is ignored."""
    def forged(n: int) -> dict[str, str]:
        return {"X-Forwarded-For": f"198.51.100.{n}"}

    with client_from("127.0.0.2", PROXY) as via_proxy:
        until_throttled(via_proxy, forged)
    with client_from("127.0.0.3", BACKEND) as direct:
        until_throttled(direct, forged)
    assert buckets(redis_db) == {"127.0.0.2", "127.0.0.3"}, "a forged address got a bucket of its own"
