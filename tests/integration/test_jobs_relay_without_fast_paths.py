"""Every owed message is delivered without the after-commit wake-up, by the relay's scan alone.

Invariant: with `OUTBOX_WAKE_AFTER_COMMIT=0` in the API process, order approvals, sends, a one-time code and a
campaign made through the HTTP API leave no wake-up at all in Redis (so nothing but PostgreSQL knows the work is
owed) — and once the relay runs, its scan alone delivers every owed message within a deadline, each webhook
applied once by the receiver. (The code is the exception by design: its lane's worker LISTENs on PostgreSQL and
is rung by the code's commit itself.) Real processes: the API, the relay, one lane worker per lane, the receiver.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from arq.constants import job_key_prefix

from domain.access.auth import create_api_key
from domain.db import get_engine
from domain.delivery.queue import LANES, fan_out_job_id, job_id, queue_name
from jobs.ops.procs import System, wait_worker_ready
from tests.conftest import PORT_OFFSET
from tests.integration.conftest import effects, rows, wait_for

NO_WAKE_API_PORT = 8095 + PORT_OFFSET
NO_WAKE_API = f"http://127.0.0.1:{NO_WAKE_API_PORT}"
DEADLINE_S = 60  # scans every 0.3 s here; the rest is four workers and the receiver on a busy 2-core machine


@pytest.fixture
def no_relay(services):  # type: ignore[no-untyped-def]
    """The session's relay is stopped, so until the test starts it again nothing at all wakes a worker."""
    relay = services.procs.get("relay")
    if relay is not None and relay.alive():
        relay.stop()
    yield services
    if not services.procs["relay"].alive():
        services.relay()


@pytest.fixture
def api_without_wake_ups(sys_):  # type: ignore[no-untyped-def]
    """An API process of its own, started with the after-commit wake-up switched off."""
    api = System({**os.environ, "OUTBOX_WAKE_AFTER_COMMIT": "0"}, sys_.logdir / "without-wake-ups").api(
        NO_WAKE_API_PORT)
    yield api
    api.stop()


def one(sql: str, **params: Any) -> Any:
    with get_engine().connect() as c:
        return c.execute(sa.text(sql), params).scalar()


def authorized_orders(n: int) -> list[tuple[int, int]]:
    with get_engine().connect() as c:
        return [(int(r.id), int(r.revision)) for r in c.execute(sa.text(
            "SELECT id, revision FROM orders WHERE tenant_id = 42 AND status = 'authorized' ORDER BY id LIMIT :n"),
            {"n": n})]


def test_with_after_commit_wake_ups_off_the_scan_alone_delivers_everything(no_relay, sys_, api_without_wake_ups,
                                                                          redis_db):
    for lane in LANES:
        # A batched lane's drain loops claim only when woken (no idle poll): the scan's wake-up alone moves them.
        sys_.start_worker(lane, env={"OUTBOX_BATCH_IDLE_POLL": "0"})
    for lane in LANES:
        wait_worker_ready(redis_db, lane, 60)  # polling: any wake-up in Redis would be taken at once
    auth = {"Authorization": f"Bearer {create_api_key(42, 'drill:no-wake')}"}
    recipient = one("SELECT id FROM recipients WHERE tenant_id = 42 AND ref = 'cust-001'")
    with httpx.Client(base_url=NO_WAKE_API, headers=auth, timeout=30) as api:
        events = []
        for oid, rev in authorized_orders(4):
            r = api.post(f"/api/v1/orders/{oid}/approve",
                         json={"expected_revision": rev, "request_id": f"req-{uuid.uuid4().hex[:8]}"})
            assert r.status_code == 200, r.text
            events.append(r.json()["event_id"])
        for channel in ("sms", "whatsapp", "email"):
            r = api.post("/api/v1/notifications", json={
                "recipient_id": recipient, "channel": channel, "template": "offer",
                "data": {"headline": "10% off"}, "subject_period": f"no-wake-{channel}"})
            assert r.status_code == 201 and r.json()["created"], r.text
        r = api.post("/api/v1/otp", json={"recipient_id": recipient, "channel": "sms"})
        assert r.status_code == 201, r.text
        r = api.post("/api/v1/campaigns", json={"name": "No wake-up", "segment": "all_reachable",
                                                "template": "offer", "channel": "email"})
        assert r.status_code == 202, r.text
        campaign = r.json()["campaign_id"]

    # Each answer came after its after-commit step: no wake-up was enqueued, so nothing moved — but the code: the
    # critical lane's worker is rung by its commit's NOTIFY itself (jobs/wake.py `_listen_pg`), PostgreSQL telling
    # it, not Redis (the relay's scan finding a code whose NOTIFY was lost: tests/integration/test_jobs_wake_listen.py).
    owed = [row for row in rows("status = 'QUEUED'") if row.lane != "critical"]
    assert len(owed) >= 7, f"approvals and sends owe messages: {len(owed)}"
    assert all(row.attempts == 0 for row in owed), "no worker may have been woken"
    assert not any(redis_db.exists(job_key_prefix + job_id(row.id)) for row in owed), "no wake-up per row"
    assert not any(redis_db.zcard(queue_name(lane)) for lane in LANES), "every lane queue empty"
    assert not redis_db.exists(job_key_prefix + fan_out_job_id(campaign)), "no campaign fan-out woken"
    assert one("SELECT count(*) FROM notifications WHERE campaign_id = :c", c=campaign) == 0

    t0 = time.monotonic()
    no_relay.relay()  # LISTEN/NOTIFY heard nothing while it was down: only its scan can find this work
    wait_for(lambda: one("SELECT status FROM campaigns WHERE id = :c", c=campaign) != "ledgering", DEADLINE_S,
             "the scan to resume the campaign's fan-out")
    wait_for(lambda: not rows("status = 'QUEUED' AND next_attempt_at <= now()"), DEADLINE_S,
             "every owed message delivered (quiet hours may schedule some for later, never drop them)")
    print(f"delivered by the relay's scan alone in {time.monotonic() - t0:.2f}s")
    assert one("SELECT count(*) FROM notifications WHERE campaign_id = :c", c=campaign) == one(
        "SELECT total FROM campaigns WHERE id = :c", c=campaign) > 0
    for e in events:
        assert effects(e)["effects"] == 1, "each webhook applied once"
