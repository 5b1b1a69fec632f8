"""The relay on a Redis that stops answering (issue 25 item 6: under load the relay logged `scan failed: TimeoutError`
and stalled ≈ 18 s).

Every Redis call of ours goes through `wakeups.arq_pool`, and arq builds that pool with redis-py's defaults: no reply
timeout at all, a 1 s connect timeout, and redis-py's retry policy — 3 more tries with jittered exponential backoff
of up to 2, 4 and 8 s. So a call whose connection had to be made again while Redis did not take connections (an
accept queue full on a loaded machine, a restart, a partition) raised `TimeoutError: Timeout connecting to server`
after up to 4 × 1 s + 14 s = 18 s (measured 8.2-14.5 s a call against a socket that never accepts), and the relay's
one loop — NOTIFYs, scans, partitions — waited for it; a connection whose peer went silent (a host or network gone
without a FIN) held the relay for ever. Now a call costs at most two tries of a bounded connect and a bounded reply,
and a failed scan is tried again within a second, not after the interval.

Invariant: the relay never stalls on Redis — with its connection dead and Redis back behind a new one, the owed row
is woken within a bounded time (here: a deadline far above the bound, so the test does not depend on speed). The
Redis here is real, behind a TCP proxy the test can partition: a partitioned connection is never answered again,
a connection made after the heal is.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from arq.constants import job_key_prefix

from domain.settings import reload_settings
from jobs import relay
from jobs.ops.procs import wait_until
from tests.conftest import TEST_REDIS_URL
from tests.support.orders import authorize_and_approve


class Partition:
    """A TCP proxy to Redis. `cut()`: every connection open now is dead for good (its bytes are swallowed, both
    ways, no FIN), and connections made while cut are accepted and never answered. `heal()`: new connections reach
    Redis again; the dead stay dead."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.generation, self.cut_now = 0, False
        self.swallowed = 0  # bytes the dead connections were sent
        self.accepted = 0
        self.loop = asyncio.new_event_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock))
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            pending = asyncio.all_tasks(self.loop)
            for t in pending:
                t.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def _alive(self, generation: int) -> bool:
        return generation == self.generation and not self.cut_now

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        generation = self.generation if not self.cut_now else -1
        if generation < 0:
            await self._swallow(reader)
            return
        up_r, up_w = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if not self._alive(generation):
                    self.swallowed += len(data)
                    continue
                dst.write(data)
                await dst.drain()

        with contextlib.suppress(Exception):
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                self.swallowed += len(data)

    def cut(self) -> None:
        self.generation += 1
        self.cut_now = True

    def heal(self) -> None:
        self.cut_now = False

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture
def partition(monkeypatch: pytest.MonkeyPatch) -> Iterator[Partition]:
    u = urlparse(TEST_REDIS_URL)
    p = Partition(u.hostname or "127.0.0.1", u.port or 6379)
    monkeypatch.setenv("OUTBOX_REDIS_URL", f"redis://127.0.0.1:{p.port}{u.path}")
    reload_settings()
    yield p
    p.close()
    monkeypatch.undo()
    reload_settings()


async def test_a_dead_redis_connection_never_stalls_the_relay(relay_stopped: None, db: str, redis_db: Any,
                                                              partition: Partition, per_row_lanes: None) -> None:
    """The relay's Redis connection dies silently mid-life; Redis is reachable again over a new connection. Before:
    the relay's next Redis call waited on the dead connection for ever (no reply timeout) and the row was never
    woken. Now the call gives up within its bound, the failed scan is tried again at once, and the row is woken.
    On the per-row path (`per_row_lanes`): each owed row's wake-up is a job in Redis, which the test can see."""
    task = asyncio.create_task(relay.run_relay())
    try:
        await _until(lambda: partition.accepted >= 1, "the relay's Redis pool to connect")
        partition.cut()
        # Owed rows and their NOTIFY: the relay scans, calls Redis.
        committed = await asyncio.to_thread(authorize_and_approve)
        await _until(lambda: partition.swallowed > 0, "the relay to call Redis over the dead connection")
        partition.heal()
        owed = [o.job_id for o in committed.owed]
        await _until(lambda: all(redis_db.exists(job_key_prefix + j) for j in owed), "the owed rows' wake-ups",
                     timeout=60)
        assert not task.done(), "the relay ended"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _until(pred: Any, what: str, timeout: float = 30) -> None:
    await asyncio.to_thread(wait_until, pred, timeout, what)
