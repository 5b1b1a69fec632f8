"""A lane worker that sleeps until it is woken, instead of polling Redis every few milliseconds.

arq polls its queue every `poll_delay`. Here the worker polls once, then waits on an event set by
- a Redis pub/sub message on its lane's wake channel (`queue.wake_channel`), published by every enqueue
  (`wakeups.enqueue`: the after-commit wake-up and the relay's scan alike);
- one of its own jobs finishing (a slot is free: take the next due job now);
- the earliest job in its queue falling due (a retry deferred by arq, a paused lane's 1 s defer);
- at most `IDLE_WAIT` seconds passing, whatever happened (a hint lost with a Redis restart costs at most that).
The same wake-ups set `batch_wake`, which a batched lane's drain loops wait on (jobs/batches.py `drain`).
While due jobs sit in the queue that it cannot start (another worker runs them) it waits `poll_delay`, as arq would.
Nothing is lost if the hint is: the job is in the queue, and the relay's scan rebuilds any lost job from PostgreSQL.

A batched lane of `LISTEN_LANES` (the critical lane) is also rung by PostgreSQL itself: its worker LISTENs on the
ledger's NOTIFY (`NOTIFY_CHANNEL`, the lane as payload), which the very transaction that made a row owed sends, and
which PostgreSQL delivers once that commit is durable and visible. One hop (commit → this worker) instead of three
(commit → the producer's PUBLISH → Redis → this worker), and no producer has to remember to publish: a code
ledgered by any process, the relay's NOTIFY path included, wakes its claim within a few milliseconds. Redis stays
the wake-up it was (the after-commit PUBLISH, the relay's scan); a NOTIFY lost (the LISTEN connection down) costs
the next of those, loop 0's idle poll, or the ring this listener gives on every (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, Final

import psycopg
from arq.worker import Worker

from domain.db import libpq_url
from domain.delivery.queue import LANES, NOTIFY_CHANNEL, wake_channel
from domain.delivery.wakeups import named_rows, redis_db
from domain.settings import get_settings

# Bulk jobs started from one read of the queue at most (then it is read again: a fairer-scored job enqueued
# meanwhile goes first). One read is one ZRANGEBYSCORE; one start is four round trips, so this adds a fifth of one.
BULK_STARTS_PER_READ = 4
# Bulk jobs started and not yet past the channel's token bucket, at most (`BeforeTheBucket`).
BULK_BEFORE_THE_BUCKET = 8
IDLE_WAIT = 1.0  # seconds between polls of an idle lane whose wake-ups all got lost
# Batched lanes whose worker LISTENs on PostgreSQL for its commits (module docstring). Only the critical lane: every
# ledger commit of any lane NOTIFYs the one channel, so each listener reads (and drops) the other lanes' NOTIFYs —
# a few microseconds each, worth it where a code waits on it, not on the high and normal lanes (Redis wakes them).
LISTEN_LANES: Final[frozenset[str]] = frozenset({"critical"})
LISTEN_BACKOFF_CAP = 2.0  # seconds between tries to LISTEN again while PostgreSQL is away, at most
# A Redis ring on a lane that LISTENs on PostgreSQL waits this long, then rings only if no drain loop began a claim
# since it arrived (`Doorbell.ring_unless_claimed_since`). The commit it is about rang the lane through its NOTIFY
# already (one hop, first), so on the common path it is the second ring of one commit: rung at once, it started a
# second claim beside the first, an empty statement competing for the cores with the code's own take, commit and
# send (evidence/bench.md, wake-ups). The after-commit wake-up names its rows
# (domain/delivery/wakeups.py `wake_payload`): one whose rows were all claimed here meanwhile rings nothing either.
# A ring no NOTIFY came before (the relay's scan, a lost NOTIFY) still rings, this much later.
SECOND_RING_DELAY_S: Final = 0.02
CLAIMED_KEPT: Final = 4096  # ids of rows claimed lately a doorbell remembers (a few seconds of a busy critical lane)
log = logging.getLogger("outbox.wake")


class BeforeTheBucket:
    """The bulk jobs this worker started that have not yet passed the channel's token bucket (jobs/worker.py counts
    them in and out, through arq's per-job copy of the worker's ctx). While `BULK_BEFORE_THE_BUCKET` are, the worker
    starts no more: the queue of jobs waiting for a token stays a few jobs long, and what waits beyond it waits in
    Redis, in fair order — not in worker slots, where 32 jobs woke for tokens in no order at all and a small
    tenant's first job, started at once, still waited behind 32 of the big one's (0.5 s at 100/s)."""

    def __init__(self, wake: Any) -> None:
        self.n = 0
        self._wake = wake

    def enter(self) -> None:
        self.n += 1

    def leave(self) -> None:
        self.n -= 1
        self._wake()  # room before the bucket: read the queue again


class Doorbell:
    """A batched lane's wake-up for its K drain loops: each ring wakes ONE waiting loop (or, none waiting, stays rung
    for the next loop that goes idle), not all K — woken all at once, K claims would race for one row, K - 1 of them
    empty statements competing for the cores. A loop that fills its batch rings again for another.
    `clear` takes a pending ring: the loop is about to claim anyway. `ring_all` is for stopping."""

    def __init__(self) -> None:
        self._rung = False
        self._waiters: list[asyncio.Future[None]] = []
        self.cleared_at = 0.0  # monotonic time of the last `clear`: a drain loop began a claim then
        self._claimed: dict[int, None] = {}  # the ids this lane's loops claimed lately, oldest first

    def is_set(self) -> bool:
        return self._rung

    def set(self) -> None:
        while self._waiters:
            w = self._waiters.pop(0)
            if not w.done():
                w.set_result(None)
                return
        self._rung = True

    def ring_all(self) -> None:
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()
        self._rung = True

    def clear(self) -> None:
        self._rung = False
        self.cleared_at = time.monotonic()

    def note_claimed(self, ids: Iterable[int]) -> None:
        """Rows a loop just claimed (`ring_unless_claimed_since` drops a wake-up naming only these)."""
        for i in ids:
            self._claimed[i] = None
        while len(self._claimed) > CLAIMED_KEPT:
            del self._claimed[next(iter(self._claimed))]

    def ring_unless_claimed_since(self, arrived: float, rows: frozenset[int] = frozenset()) -> bool:
        """Ring, unless a loop cleared (began a claim) after `arrived` — a claim whose statement started after a
        wake-up arrived sees the commit it was about, which committed before it was published — or the wake-up
        names its rows and every one was claimed here already. False: not rung."""
        if self.cleared_at > arrived or (rows and all(i in self._claimed for i in rows)):
            return False
        self.set()
        return True

    async def wait(self) -> None:
        if self._rung:
            self._rung = False
            return
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        try:
            await w
        except BaseException:  # timed out or cancelled
            if w in self._waiters:
                self._waiters.remove(w)
            elif w.done() and not w.cancelled():
                self.set()  # rung just as it was cancelled: pass the ring on, never lose it
            raise


class LaneWorker(Worker):
    def __init__(self, lane: str, **settings: Any) -> None:
        self.busy_wait = float(settings.pop("poll_delay", 0.05))
        super().__init__(**settings, poll_delay=0)  # arq's own sleep is gone: `_poll_iteration` waits instead
        self.lane = lane
        self._wake = asyncio.Event()
        # A batched lane's drain loops (jobs/batches.py `drain`) wait on this one: rung by every wake-up of the lane.
        self.batch_wake = Doorbell()
        self.ctx["batch_wake"] = self.batch_wake
        self.before_the_bucket = BeforeTheBucket(self._wake.set)
        self.ctx["before_the_bucket"] = self.before_the_bucket
        self._listener: asyncio.Task[None] | None = None
        self._pg_listener: asyncio.Task[None] | None = None
        self._second_rings: set[asyncio.Task[None]] = set()
        self.waiting = False  # between polls, asleep until woken (what the tests and a debugger look at)
        # The drain loops' rings, by where they came from ("redis": a PUBLISH on the lane's wake channel,
        # "postgres": a commit's NOTIFY; "redis_after_a_claim": of the Redis rings, those a claim begun after them
        # made needless, `SECOND_RING_DELAY_S`): what the tests and a debugger look at.
        self.rung_by = {"redis": 0, "postgres": 0, "redis_after_a_claim": 0}
        self.listening_pg = False  # LISTENing on PostgreSQL now (a lane of `LISTEN_LANES`, batched)
        # A wake-up reads arq's queue at once only where it may hold this lane's jobs: a lane delivered row by row,
        # or the bulk lane (its campaigns' fan-outs). A batched lane's wake-up names the lane, never a job: its
        # drain loops answer it, and a poll of the empty queue beside their claim (four Redis round trips and
        # arq's bookkeeping on the same event loop) only delayed the claim. A job left from before the lane was
        # batched is read by the next idle poll (`IDLE_WAIT`).
        self.polls_on_rings = lane == "bulk" or lane not in get_settings().batched_lanes
        self.pg_listens = 0  # connections it has LISTENed on so far (1 + its reconnects)

    async def _poll_iteration(self) -> None:
        self._wake.clear()  # before polling: a hint that lands during the poll makes the next wait return at once
        await super()._poll_iteration()
        if not self.burst:
            await self._wait()

    def running_here(self, job_id: str) -> bool:
        t = self.tasks.get(job_id)
        return t is not None and not t.done()

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        before = set(self.tasks.values())
        # Never a second run of a job id this worker is still running. The relay, which takes a worker whose lease
        # ran out for dead (PostgreSQL says so), drops that job's in-progress mark and wakes the row again; when
        # the worker is alive after all (a slow record on a loaded machine) arq would start the same id beside the
        # first run: it keeps running jobs in dicts keyed by job id (`tasks`, `job_tasks`), so the second run
        # overwrote the first's entries, the first run's Retry then deleted the second's entry and its in-progress
        # mark, and the second run's own `del self.job_tasks[job_id]` raised KeyError — its outcome (a send, a
        # Retry) logged as a failure and its job removed from the queue. The wake-up waits in the queue instead:
        # the first run's end re-schedules it (a Retry) or consumes it (done), and the relay's scan rebuilds
        # whatever is still owed. Another worker may still take the row over: its claim's fence decides.
        job_ids = [j for j in job_ids if not self.running_here(j.decode())]
        if self.lane == "bulk":
            # Fair order (domain/delivery/fair_queue.py): start only what free slots take now, and at most
            # `BULK_STARTS_PER_READ` jobs of one read of the queue, then read it again. arq would wait for a slot on
            # each id of its poll's snapshot, starting them all ahead of any fairer-scored job enqueued meanwhile;
            # and with slots free (jobs starting no faster than they end, as on a loaded machine) walking a whole
            # snapshot takes seconds, each start four Redis round trips — a small tenant's first jobs, scored
            # ahead, would wait behind a big tenant's already read.
            started = 0
            for job_id in job_ids:
                if self.sem.locked() or self.before_the_bucket.n >= BULK_BEFORE_THE_BUCKET:
                    break
                if started >= BULK_STARTS_PER_READ:
                    self._wake.set()  # slots still free: read the queue again at once, not after a poll delay
                    break
                running = self.tasks.get(job_id.decode())
                if running is None or running.done():  # ours and running: no round trip to learn it
                    await super().start_jobs([job_id])
                    # Only a job that started counts: one arq skips (in progress elsewhere, e.g. left marked by a
                    # worker stopped mid-job) must not use up the read — four of them at the queue's head stalled
                    # the lane until their marks ran out (10 min).
                    started += self.tasks.get(job_id.decode()) not in (None, running)
        else:
            await super().start_jobs(job_ids)
        for t in self.tasks.values():
            if t not in before:
                t.add_done_callback(lambda _: self._wake.set())

    async def _wait(self) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen())
        if self._pg_listener is None and self.listens_to_postgres():
            self._pg_listener = asyncio.create_task(self._listen_pg())
        timeout = await self._timeout()
        self.waiting = True
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that lands as the event is set,
            # and a cancelled worker then polls on forever (a test's teardown hung 300 s that way under load).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        finally:
            self.waiting = False

    async def _timeout(self) -> float:
        try:
            first = await self.pool.zrange(self.queue_name, 0, 0, withscores=True)
        except Exception:  # Redis away: the next poll says so
            return self.busy_wait
        if not first:
            return IDLE_WAIT
        due_in = float(first[0][1]) / 1000 - time.time()
        return min(IDLE_WAIT, max(self.busy_wait, due_in))

    async def _listen(self) -> None:
        """Set the event on every wake-up of this lane; resubscribe (and wake, for what was missed) after an error."""
        while True:
            pubsub = self.pool.pubsub()
            try:
                await pubsub.subscribe(wake_channel(self.lane, redis_db(self.pool)))
                self._wake.set()
                self.batch_wake.set()  # what was published while we were not subscribed: claim once more
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        if self.polls_on_rings:
                            self._wake.set()
                        self.rung_by["redis"] += 1
                        if self.listening_pg:
                            t = asyncio.create_task(self._second_ring(time.monotonic(),
                                                                      named_rows(message.get("data"))))
                            self._second_rings.add(t)
                            t.add_done_callback(self._second_rings.discard)
                        else:
                            self.batch_wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("wake channel lost (%s); resubscribing", type(exc).__name__)
                await asyncio.sleep(IDLE_WAIT)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _second_ring(self, arrived: float, rows: frozenset[int]) -> None:
        await asyncio.sleep(SECOND_RING_DELAY_S)
        if not self.batch_wake.ring_unless_claimed_since(arrived, rows):
            self.rung_by["redis_after_a_claim"] += 1

    def listens_to_postgres(self) -> bool:
        """Its drain loops are rung by the commits' NOTIFYs too: a batched lane of `LISTEN_LANES`. (A per-row lane
        gains nothing: its NOTIFY comes before the producer's enqueue, and its arq job is what it must start.)"""
        return self.lane in LISTEN_LANES and self.lane in get_settings().batched_lanes

    async def _listen_pg(self) -> None:
        """Ring the drain loops on every commit that made a row of this lane owed: the ledger's NOTIFY, read on a
        connection of its own (autocommit, LISTEN, then a blocking read of its socket: nothing runs while no
        commit comes). Rings once on every (re)connect, for what committed while it was not listening; after an
        error it tries again with capped backoff, for as long as it takes (Redis and the polls wake the lane
        meanwhile). A NOTIFY naming no lane rings too (the relay reads it as "scan everything")."""
        delay = 0.1
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    libpq_url(get_settings().database_url), autocommit=True, connect_timeout=5,
                    application_name=f"outbox-worker-{self.lane}-listen")
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                self.listening_pg, delay = True, 0.1
                self.pg_listens += 1
                self.batch_wake.set()  # what committed while we were not listening: claim once more
                async for n in conn.notifies():
                    if n.payload == self.lane or n.payload not in LANES:
                        self.batch_wake.set()
                        self.rung_by["postgres"] += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("commit NOTIFYs lost (%s); listening again in %.1fs", type(exc).__name__, delay)
            finally:
                self.listening_pg = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(LISTEN_BACKOFF_CAP, delay * 2)

    async def close(self) -> None:
        for task in (self._listener, self._pg_listener, *self._second_rings):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._pg_listener = None
        await super().close()
