"""The critical lane's worker is rung by the commit itself (jobs/wake.py `LaneWorker._listen_pg`): its drain loops
wake on the ledger's NOTIFY, read on the worker's own LISTEN connection, not on a Redis hop or a poll.

Invariants protected:
- a one-time code committed with no Redis wake-up at all (none published after commit, no relay running) and no
  poll due for a minute is claimed and sent, and the ring that woke its claim came from PostgreSQL;
- a wake-up lost (the NOTIFY arrives while the worker is not listening) loses nothing: the code stays owed in
  PostgreSQL, and the relay's recovery scan wakes the lane through Redis, which gets it claimed and sent;
- a LISTEN connection that drops (its backend terminated) is listened again, and the next commit rings through it;
- the after-commit Redis wake-up of a code its NOTIFY already got claimed starts no second claim (it names the
  code, which was claimed here: dropped), while a Redis ring no NOTIFY came before — a lane resumed — still rings
  a claim, with the worker listening, and the row it was for is sent;
- a claim that failed (its connection dropped) is not a claim that saw the commit: the code whose Redis ring it
  made the worker drop is claimed again at once, not at the idle poll;
- a loop that recorded a retry and could not read when the lane's next row comes due does not forget it worked:
  the retry is claimed at its backoff, not at the idle poll.

The worker runs in this process (the real `settings_for("critical")`: its pool, drain loops and HTTP client against
the session's receiver) so the test can read where each ring came from (`LaneWorker.rung_by`). No fixed sleeps:
every wait is for a condition, with a deadline far below the minute-long idle poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import wakeups
from domain.delivery.queue import wake_channel
from domain.ledger import otp
from domain.ledger.recipients import find_by_ref
from domain.ledger.write import Ledgered
from domain.settings import get_settings, reload_settings
from jobs import relay, wake
from jobs.worker import settings_for
from tests.integration.conftest import rows

DEADLINE = 20.0  # seconds for what must happen now, on a loaded machine; the idle poll is 60 s away
IDLE_POLL = "60"


async def _until(pred: Callable[[], Any], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        await asyncio.sleep(0.005)


def _settled(w: wake.LaneWorker) -> bool:
    """Every drain loop asleep on the doorbell and no ring pending: only a new ring can bring a claim now."""
    _, loops = get_settings().batch_shape("critical")
    return len(w.batch_wake._waiters) == loops and not w.batch_wake.is_set()


def _sent(nid: int) -> bool:
    with get_engine().connect() as c:
        return bool(c.execute(sa.text("SELECT sent_at IS NOT NULL FROM notifications WHERE id = :i"),
                              {"i": nid}).scalar())


def _code() -> int:
    return _ledgered_code().notification_id


def _ledgered_code() -> Ledgered:
    ((_, rid),) = find_by_ref(42, "cust-002")
    row = otp.request(42, rid, "sms", datetime.now(UTC))
    assert row is not None and row.lane == "critical"
    return row


@pytest.fixture
async def critical(sys_, relay_stopped, batched_lanes, monkeypatch) -> AsyncIterator[wake.LaneWorker]:  # type: ignore[no-untyped-def]
    """The critical lane's worker, batched, in this process; nothing wakes it but what the test does: no relay,
    no after-commit wake-up, the idle poll a minute away. Yields once it LISTENs and every loop sleeps."""
    monkeypatch.setenv("OUTBOX_BATCH_IDLE_POLL", IDLE_POLL)
    monkeypatch.setenv("OUTBOX_WAKE_AFTER_COMMIT", "0")
    reload_settings()
    w = wake.LaneWorker("critical", **{**settings_for("critical"), "handle_signals": False})
    task = asyncio.create_task(w.async_run())
    try:
        await _until(lambda: w.listening_pg, "the worker LISTENs on PostgreSQL", 60)
        await _until(lambda: _settled(w), "every drain loop asleep", 60)
        yield w
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(asyncio.CancelledError):
            await w.close()
        monkeypatch.delenv("OUTBOX_BATCH_IDLE_POLL")
        monkeypatch.delenv("OUTBOX_WAKE_AFTER_COMMIT")
        reload_settings()


@pytest.fixture
async def wake_messages() -> AsyncIterator[Callable[[], int]]:
    """Counts the PUBLISHes on the critical lane's Redis wake channel while the test runs."""
    pool = await wakeups.arq_pool()
    pubsub = pool.pubsub()
    got = [0]
    await pubsub.subscribe(wake_channel("critical", wakeups.redis_db(pool)))

    async def read() -> None:
        async for m in pubsub.listen():
            if m.get("type") == "message":
                got[0] += 1

    reader = asyncio.create_task(read())
    try:
        yield lambda: got[0]
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await pool.aclose()


async def test_a_code_commit_rings_its_claim_through_postgres_with_no_redis_hop(critical, wake_messages) -> None:  # type: ignore[no-untyped-def]
    w = critical
    before = dict(w.rung_by)
    nid = _code()
    await _until(lambda: _sent(nid), "the code sent with no Redis wake-up and no poll due")
    assert w.rung_by["postgres"] > before["postgres"], "its claim was rung by the commit's NOTIFY"
    assert w.rung_by["redis"] == before["redis"] and wake_messages() == 0, "nothing came through Redis"


async def test_a_lost_wake_up_is_found_by_the_relays_scan(critical, wake_messages) -> None:  # type: ignore[no-untyped-def]
    w = critical
    assert w._pg_listener is not None
    w._pg_listener.cancel()  # the NOTIFY of the next commit reaches no one here: a lost wake-up
    with contextlib.suppress(asyncio.CancelledError):
        await w._pg_listener
    await _until(lambda: _settled(w), "every drain loop asleep")
    before = dict(w.rung_by)
    nid = _code()
    (r,) = rows("id = :i", i=nid)
    assert r.status == "QUEUED" and r.claimed_at is None, "nothing woke a claim: the code waits in PostgreSQL"
    pool = await wakeups.arq_pool()
    try:
        seen, woken = await relay.scan_once(pool, lanes=["critical"])
    finally:
        await pool.aclose()
    assert (seen, woken) == (1, 1), "the scan found the owed code and woke its lane"
    await _until(lambda: _sent(nid), "the code sent after the scan's wake-up")
    assert w.rung_by["redis"] > before["redis"] and wake_messages() >= 1, "the scan's PUBLISH rang the claim"
    assert w.rung_by["postgres"] == before["postgres"]


async def test_a_dropped_listen_connection_is_listened_again(critical) -> None:  # type: ignore[no-untyped-def]
    w = critical
    with get_engine().connect() as c:
        killed = c.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'outbox-worker-critical-listen' AND datname = current_database()")).scalar()
    assert killed == 1
    await _until(lambda: w.pg_listens == 2 and w.listening_pg, "the listener LISTENs again, on a new connection")
    await _until(lambda: _settled(w), "every drain loop asleep")
    before = w.rung_by["postgres"]
    nid = _code()
    await _until(lambda: _sent(nid), "the code sent through the new LISTEN connection")
    assert w.rung_by["postgres"] > before


async def test_the_after_commit_wake_up_of_a_code_already_claimed_rings_no_second_claim(  # type: ignore[no-untyped-def]
        critical, wake_messages, monkeypatch):
    w = critical
    # The late ring is decided after the code's claim is noted, however loaded the machine (a claim took 479 ms at
    # load 11): what is under test is the drop of a ring whose rows were claimed, not how soon a claim commits.
    monkeypatch.setattr(wake, "SECOND_RING_DELAY_S", 2.0)
    before = dict(w.rung_by)
    code = _ledgered_code()  # its NOTIFY rings the claim
    pool = await wakeups.arq_pool()
    try:  # the producer's after-commit wake-up, naming the code (the fixture turned the automatic one off)
        assert await wakeups.enqueue(pool, [code.owed()], name_rows=True) == 1
    finally:
        await pool.aclose()
    await _until(lambda: _sent(code.notification_id), "the code sent")
    await _until(lambda: wake_messages() >= 1 and w.rung_by["redis"] > before["redis"], "the Redis ring arrived")
    await _until(lambda: w.rung_by["redis_after_a_claim"] > before["redis_after_a_claim"],
                 "the late Redis ring dropped: its code was claimed here already")
    assert w.rung_by["postgres"] > before["postgres"], "the NOTIFY rang the claim"
    await _until(lambda: _settled(w), "every drain loop asleep, no ring pending: no second claim was rung")


async def test_a_redis_ring_no_notify_came_before_still_rings_a_claim_while_listening(critical):  # type: ignore[no-untyped-def]
    w = critical
    with get_engine().begin() as c:
        c.execute(sa.text("INSERT INTO lane_controls (lane, paused) VALUES ('critical', true) "
                          "ON CONFLICT (lane) DO UPDATE SET paused = true"))
    try:
        rung = w.rung_by["postgres"]
        nid = _code()  # its NOTIFY rings a claim, which skips the paused lane's row
        await _until(lambda: w.rung_by["postgres"] > rung, "the code's NOTIFY rang")
        await _until(lambda: _settled(w), "every drain loop asleep again")
        (r,) = rows("id = :i", i=nid)
        assert r.status == "QUEUED" and r.claimed_at is None, "a paused lane's code is not claimed"
        with get_engine().begin() as c:  # resumed with no NOTIFY: only the Redis ring below can bring its claim
            c.execute(sa.text("UPDATE lane_controls SET paused = false WHERE lane = 'critical'"))
        assert w.listening_pg
        before = dict(w.rung_by)
        pool = await wakeups.arq_pool()
        try:
            await wakeups.wake_lanes(pool, ["critical"])
        finally:
            await pool.aclose()
        await _until(lambda: _sent(nid), "the code sent after the late Redis ring")
        assert w.rung_by["redis"] > before["redis"] and w.rung_by["postgres"] == before["postgres"]
        assert w.rung_by["redis_after_a_claim"] == before["redis_after_a_claim"], "the ring was not dropped"
    finally:
        with get_engine().begin() as c:
            c.execute(sa.text("UPDATE lane_controls SET paused = false WHERE lane = 'critical'"))


async def test_a_claim_that_failed_answers_no_ring_a_code_is_claimed_again_not_at_the_idle_poll(  # type: ignore[no-untyped-def]
        critical, monkeypatch):
    """A late Redis ring is dropped when a drain loop began a claim after it arrived (`ring_unless_claimed_since`):
    that claim saw the commit — unless it failed. Here the code's NOTIFY rings a loop; the event loop reads the
    code's after-commit Redis wake-up before that loop runs (a busy worker reads both in one turn); the loop's claim
    then fails on a dropped connection (store_batch.py `_claim`). The Redis ring is dropped as answered by that claim;
    the code must still be claimed and sent now, not at loop 0's idle poll a minute away (nor the relay's next scan)."""
    w = critical
    bell, pool = w.batch_wake, w.ctx["db"]
    real_wait, real_connection, real_second_ring = bell.wait, pool.connection, w._second_ring
    redis_read = asyncio.Event()
    hold = {"woken": False}  # armed: the next loop woken waits until the Redis wake-up was read
    down = {"on": False}  # armed: every drain loop's use of the pool fails, as on a connection the server dropped
    failed: list[str] = []

    async def wait() -> None:
        await real_wait()
        if hold["woken"]:
            hold["woken"] = False
            await redis_read.wait()

    async def second_ring(arrived: float, named: frozenset[int]) -> None:
        redis_read.set()
        await real_second_ring(arrived, named)

    @contextlib.asynccontextmanager
    async def connection(timeout: float | None = None) -> AsyncIterator[Any]:
        task = asyncio.current_task()
        name = task.get_name() if task is not None else ""
        if down["on"] and name.startswith("drain-critical-"):
            failed.append(name)
            raise psycopg.OperationalError("server closed the connection unexpectedly (the test's)")
        async with real_connection(timeout) as conn:
            yield conn

    monkeypatch.setattr(bell, "wait", wait)
    monkeypatch.setattr(w, "_second_ring", second_ring)
    monkeypatch.setattr(pool, "connection", connection)
    try:
        bell.ring_all()  # every loop goes round once, and waits again through `wait` above
        await _until(lambda: _settled(w), "every drain loop asleep")
        before = dict(w.rung_by)
        hold["woken"] = down["on"] = True
        code = _ledgered_code()  # its NOTIFY rings one loop, held until the Redis wake-up below is read
        await _until(lambda: w.rung_by["postgres"] > before["postgres"], "the code's NOTIFY rang")
        redis = await wakeups.arq_pool()
        try:  # the producer's after-commit wake-up, naming the code
            assert await wakeups.enqueue(redis, [code.owed()], name_rows=True) == 1
        finally:
            await redis.aclose()
        await _until(lambda: w.rung_by["redis_after_a_claim"] > before["redis_after_a_claim"],
                     "the Redis ring dropped: a claim began after it arrived")
        assert failed, "the claim the NOTIFY rang failed on its connection"
        down["on"] = False  # the database is back
        (r,) = rows("id = :i", i=code.notification_id)
        assert r.status == "QUEUED" and r.claimed_at is None, "the failed claim kept nothing"
        await _until(lambda: _sent(code.notification_id), "the code sent after its claim failed, not at the poll")
    finally:
        down["on"] = hold["woken"] = False
        redis_read.set()


async def test_a_retry_is_claimed_at_its_backoff_even_when_the_next_due_read_after_it_failed(  # type: ignore[no-untyped-def]
        critical, monkeypatch):
    """A drain loop that just recorded a retry reads when the lane's next row comes due and sleeps until then: no
    ring comes for a retry, and loop 0 sleeps on a wait it computed before the retry existed (a minute here). When
    that one read fails (a dropped connection), the loop must not forget it worked and sleep on the doorbell (or
    loop 0's whole poll): the code's second attempt comes at its backoff, not at the idle poll."""
    import httpx

    from domain.delivery import store
    from tests.integration.conftest import RECEIVER

    real_next_due_in = store.next_due_in
    armed = {"on": True}
    failed: list[str] = []

    async def next_due_in(pool: Any, lane: str) -> float | None:
        if armed["on"]:
            armed["on"] = False
            task = asyncio.current_task()
            failed.append(task.get_name() if task is not None else "")
            raise psycopg.OperationalError("server closed the connection unexpectedly (the test's)")
        return await real_next_due_in(pool, lane)

    monkeypatch.setattr(store, "next_due_in", next_due_in)
    httpx.post(f"{RECEIVER}/faults", json={"fail_503": 1})  # the code's first attempt answers 503: a retry
    try:
        nid = _code()  # its NOTIFY rings one loop, which claims it, records the retry, then reads the next due row
        await _until(lambda: failed, "the next-due read after the retry failed")
        await _until(lambda: _sent(nid), "the retry sent at its backoff, not at the idle poll a minute away")
        (r,) = rows("id = :i", i=nid)
        assert r.attempts == 2, "the first attempt was the 503's retry, the second sent it"
    finally:
        armed["on"] = False
        httpx.post(f"{RECEIVER}/faults", json={})
