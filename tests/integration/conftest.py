"""Integration fixtures shared by the suites that run real processes: one receiver, one API and one relay for
the whole session (their own ports, the test database and Redis db), and lane workers started per test."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.settings import reload_settings
from jobs.ops.checks import all_invariants
from jobs.ops.procs import ROOT, System, wait_until
from tests.conftest import PORT_OFFSET, SLOT_SUFFIX

RECEIVER_PORT, API_PORT = 8098 + PORT_OFFSET, 8099 + PORT_OFFSET
RECEIVER = f"http://127.0.0.1:{RECEIVER_PORT}"
API = f"http://127.0.0.1:{API_PORT}"


@pytest.fixture(scope="session")
def services(migrated_db):  # type: ignore[no-untyped-def]
    os.environ["OUTBOX_RECEIVER_URL"] = RECEIVER
    os.environ["OUTBOX_APP_URL"] = API
    reload_settings()
    system = System(dict(os.environ), ROOT / ".run" / f"test-logs{SLOT_SUFFIX}")
    system.receiver(RECEIVER_PORT, reset=True)
    system.api(API_PORT)
    system.relay()
    _SESSION["system"] = system
    yield system
    _SESSION.pop("system", None)
    system.stop_all()


_SESSION: dict[str, System] = {}  # the session's `services`, once a test has asked for them


@pytest.fixture(autouse=True)
def _session_relay_only_where_asked(request: pytest.FixtureRequest) -> None:
    """The session's relay runs beside the tests that ask for the session's services, and beside no other: its scan
    locks owed rows (FOR UPDATE SKIP LOCKED) and it keeps /ops' chart points each minute, so a test that claims rows
    itself found them skipped (a batch claimed 4 of its 5 rows) and a test that writes a backdated ledger found zero
    points kept from just before. Stopped here, it is started again for the next test that asks for it."""
    system = _SESSION.get("system")
    if system is None:
        return
    relay = system.procs.get("relay")
    running = relay is not None and relay.alive()
    if "services" in request.fixturenames:
        if not running:
            system.relay()
    elif running:
        assert relay is not None
        relay.stop()


@pytest.fixture
def sys_(services, db, redis_db):  # type: ignore[no-untyped-def]
    """The running services plus `start_worker(lane)`; workers die with the test; every invariant (the
    receiver's too) must hold afterwards."""
    httpx.post(f"{RECEIVER}/faults", json={})
    started: list[str] = []

    def worker(lane: str, fault: str = "", name: str | None = None,  # type: ignore[no-untyped-def]
               env: dict[str, str] | None = None):
        p = services.worker(lane, fault=fault, name=name or f"{lane}-{uuid.uuid4().hex[:6]}", env=env)
        started.append(p.name)
        return p

    services.start_worker = worker
    yield services
    for name in started:
        services.procs[name].stop(signal.SIGKILL)
    counts = all_invariants(RECEIVER)
    assert all(v == 0 for v in counts.values()), f"outbox check after the test: {counts}"


def rows(where: str = "TRUE", **params: Any) -> list[Any]:
    with get_engine().connect() as c:
        return list(c.execute(sa.text(f"SELECT * FROM notifications WHERE {where} ORDER BY id"), params).all())


def wait_for(pred: Any, timeout: float = 30, what: str = "condition") -> Any:
    return wait_until(pred, timeout, what)


def effects(event_id: Any) -> dict[str, Any]:
    return httpx.get(f"{RECEIVER}/effects/{event_id}").json()  # type: ignore[no-any-return]


@pytest.fixture
async def client(db, redis_db):  # type: ignore[no-untyped-def]
    """The real ASGI API in-process, on the test database and Redis db."""
    from dashboard.api import health
    from dashboard.api.app import build_api

    health._cache = None  # each test reads the database it just wrote, not the previous test's scrape
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_api()), base_url="http://app") as c:
        yield c


@pytest.fixture
def key42(db) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Tenant 42's key, acting as support (change logs name this actor)."""
    from domain.access.auth import create_api_key

    return {"Authorization": f"Bearer {create_api_key(42, 'support:dana')}"}


@pytest.fixture
def key7(db) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from domain.access.auth import create_api_key

    return {"Authorization": f"Bearer {create_api_key(7)}"}


@pytest.fixture
def relay_stopped(services):  # type: ignore[no-untyped-def]
    """The test drives the relay's scan (or reads the bulk window) itself: the session's relay process must not
    scan or lock rows beside it; the next test that asks for it starts it again."""
    relay = services.procs.get("relay")
    if relay is not None and relay.alive():
        relay.stop()


# Worker processes on the per-row path (`OUTBOX_BATCH_LANES` empty): `sys_.start_worker(lane, env=PER_ROW)`.
PER_ROW: dict[str, str] = {"OUTBOX_BATCH_LANES": ""}
# ... and on the batched path (jobs/batches.py `drain`): `sys_.start_worker(lane, env=BATCHED)`.
BATCHED: dict[str, str] = {"OUTBOX_BATCH_LANES": "critical,high,normal"}


@contextlib.contextmanager
def batch_lanes_set(value: str):  # type: ignore[no-untyped-def]
    """`OUTBOX_BATCH_LANES` set to `value` in this test's process for the block, then put back."""
    before = os.environ.get("OUTBOX_BATCH_LANES")
    os.environ["OUTBOX_BATCH_LANES"] = value
    reload_settings()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OUTBOX_BATCH_LANES", None)
        else:
            os.environ["OUTBOX_BATCH_LANES"] = before
        reload_settings()


@pytest.fixture
def batched_lanes():  # type: ignore[no-untyped-def]
    """Batched delivery on critical, high and normal in this test's process: its enqueues and relay scans wake the
    lane and make no per-row job. Processes the test starts take `BATCHED` for the same."""
    with batch_lanes_set(BATCHED["OUTBOX_BATCH_LANES"]):
        yield


@pytest.fixture
def per_row_lanes():  # type: ignore[no-untyped-def]
    """The per-row path on every lane in this test's process (`OUTBOX_BATCH_LANES` empty): its enqueues and its
    relay scans make one arq job per row, as before batching — for the tests of that path, which stays supported.
    Processes the test starts take `PER_ROW` for the same."""
    with batch_lanes_set(PER_ROW["OUTBOX_BATCH_LANES"]):
        yield
