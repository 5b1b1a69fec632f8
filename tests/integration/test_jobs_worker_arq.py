"""A lane worker under arq when one job id is woken again while its first run still goes (issue 25 item 6: arq logged
`KeyError: 'n-1'` in `run_job` after a `Retry`).

How it happens, on real processes: a worker's attempt outlives its lease (a slow record on a loaded machine; here
its record waits on a row lock the test holds). The relay, having read the row as "lease expired", takes the worker
for dead — PostgreSQL is the authority on that (`relay.forget_dead_jobs`) — drops the job's arq keys and wakes the
row again (`relay.wake`). The same worker, alive, polls and starts the same job id a second time beside the first.
arq keeps its running jobs in dicts keyed by job id (`Worker.tasks`, `Worker.job_tasks`): the second run overwrote
the first's entries, the first run's `Retry` then deleted the second's entry and its in-progress mark, and the
second run's own `del self.job_tasks[job_id]` raised KeyError.

Invariant: a worker never runs one job id twice at once (`LaneWorker.start_jobs`); another worker may take the row
over, and then the claim's fence decides — the row is still sent once in effect, every invariant holds, and the
worker's log has no traceback.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.wakeups import arq_pool, enqueue
from domain.ledger.owed import OwedRow
from jobs.ops.procs import job_tries, wait_worker_ready
from jobs.relay import ScannedRow, forget_dead_jobs, wake
from tests.integration.conftest import PER_ROW, RECEIVER, effects, rows, wait_for
from tests.support.orders import authorize_and_approve


async def _as_the_relay_after_a_stale_read(row: OwedRow) -> int:
    """What the relay does with a row its scan read while the lease had run out: forget the "dead" job, wake the row."""
    pool = await arq_pool()
    try:
        scanned = [ScannedRow(row, lease_expired=True, overdue=False)]
        await forget_dead_jobs(pool, scanned)
        return await wake(pool, scanned)
    finally:
        await pool.aclose()


def test_a_job_woken_again_while_its_first_run_retries_runs_once_at_a_time(sys_: Any, relay_stopped: None,
                                                                           redis_db: Any, per_row_lanes: None) -> None:
    """The first run gets a 503 (a `Retry`) and its record waits on a lock past the lease; meanwhile the relay wakes
    the row again. Before: the worker started the job id a second time and its log showed `KeyError: 'n-…'` from
    arq's run_job. Now the second start waits for the first run; the row is delivered, one effect."""
    # A slow 503: the test takes the row's lock while the call is under way, before the run records its Retry
    # (a timeout at the attempt's deadline would be a Retry too).
    httpx.post(f"{RECEIVER}/faults", json={"fail_503": 1, "slow_seconds": 1.2})
    r = authorize_and_approve()
    (hook,) = [o for o in r.owed if o.lane == "high"]
    (marker,) = [o for o in authorize_and_approve(914).owed if o.lane == "high"]
    worker = sys_.start_worker("high", env=PER_ROW)  # the per-row path: one arq job per row
    wait_worker_ready(redis_db, "high", 30)
    asyncio.run(_enqueue(hook))
    lock_held, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        with get_engine().begin() as c:  # the first run has claimed; its record will wait here
            c.execute(sa.text("SELECT 1 FROM notifications WHERE id = :i FOR UPDATE"), {"i": hook.notification_id})
            lock_held.set()
            release.wait(60)

    wait_for(lambda: rows("id = :i AND attempts = 1", i=hook.notification_id), 30, "the first run's claim")
    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert lock_held.wait(30)
        wait_for(lambda: effects(r.event_id)["deliveries"] >= 1, 30, "the first run's call (a 503)")
        httpx.post(f"{RECEIVER}/faults", json={})
        # Past the lease (2 s in the tests), by PostgreSQL's clock: the relay would now take the worker for dead.
        wait_for(lambda: _lease_ran_out(hook.notification_id), 30, "the first run's lease to run out")
        assert asyncio.run(_as_the_relay_after_a_stale_read(hook)) == 1, "the relay's wake-up is enqueued"
        # Another row's wake-up, queued after it: once the worker has started that one, its poll has read (and
        # started, or not) the woken job first — arq starts a poll's jobs in score order.
        asyncio.run(_enqueue(marker))
        # Started: arq counts its tries while it runs, and drops that count when it finishes — a marker already
        # done shows as its row's attempt instead (the check on tries alone timed out once in CI, 2026-12-01).
        wait_for(lambda: job_tries(redis_db, marker.job_id) >= 1
                 or rows("id = :i AND attempts >= 1", i=marker.notification_id), 30,
                 "the worker to poll past the wake-up")
        starts_while_running = job_tries(redis_db, hook.job_id)  # arq counts each start in Redis
    finally:
        release.set()
        holder.join(30)
    wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=hook.notification_id) or not worker.alive()
             or "KeyError" in worker.log.read_text(errors="replace"), 60, "the delivery")
    log = worker.log.read_text(errors="replace")
    assert "KeyError" not in log and "Traceback" not in log, f"arq raised in the worker: {_tail(log)}"
    assert worker.alive(), f"the worker died; see {worker.log}"
    assert starts_while_running == 1, "the same job id was started twice at once in one worker"
    wait_for(lambda: rows("id = :i AND status = 'DELIVERED'", i=marker.notification_id), 60, "the marker's delivery")
    assert effects(r.event_id)["effects"] == 1


def _tail(log: str) -> str:
    return "\n".join(log.splitlines()[-30:])


async def _enqueue(row: OwedRow) -> None:
    pool = await arq_pool()
    try:
        await enqueue(pool, [row])
    finally:
        await pool.aclose()


def _lease_ran_out(notification_id: int) -> bool:
    with get_engine().connect() as c:
        return bool(c.execute(sa.text("SELECT leased_until < now() FROM notifications WHERE id = :i"),
                              {"i": notification_id}).scalar())
