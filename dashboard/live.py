"""Live pages: ONE Redis subscription per backend process, fanned out to the open tabs that want each channel.

A tab's live task (a Reflex background event) registers a small queue for one channel and reads hints from it; the
hub holds a single pattern subscription (`outbox:refresh:*`) for the whole process and hands each message to the
queues registered for its channel. 200 page loads therefore leave one Redis subscription, not 200, and a tab that
disconnects (Reflex cancels its background tasks) or logs out (`end_watch`) unregisters at once.

The message carries identity and revision only; the page reloads authorized state from PostgreSQL. If the hub loses
Redis it reconnects with a backoff and tells every view to reload (`{"kind": "resync"}`): a push missed while Redis
was away is never silently lost. Views per process are capped (`OUTBOX_LIVE_VIEWS_MAX`): beyond the cap a page
still works, it just is not live until a view closes.

Hints are a fast path, so they can be lost without a disconnect (a publisher that crashed after its commit, a
publish that failed, publishing switched off). Under them, the hub checks: each view registers a probe (one small
indexed read of what it shows, e.g. `order_views.order_version`) and `seen`, the version it last rendered; every
`OUTBOX_VIEW_CHECK_INTERVAL` seconds the hub runs ONE probe per watched channel, however many tabs show it, and
sends `{"kind": "check"}` to each view whose `seen` differs. A view that fell behind reloads within one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

import redis.asyncio as aioredis
from arq import ArqRedis
from redis.exceptions import RedisError

from dashboard.pool import redis_pool
from domain.delivery.queue import LIVE_VIEWS_KEY, REFRESH_PREFIX
from domain.delivery.wakeups import switched_off
from domain.settings import get_settings

log = logging.getLogger("outbox.live")
HUB_CLIENT_NAME = "outbox-live-hub"  # CLIENT LIST shows the hub's one subscription by this name
QUEUE_SIZE = 64  # hints per view (see _fan_out)
Probe = Callable[[], object]  # a cheap read of the version of what a view shows; runs in a worker thread


async def arq() -> ArqRedis:
    """The backend process's one arq pool (shared with the HTTP API) for after-commit publish and enqueue."""
    return await redis_pool()


_WATCHERS: dict[str, str] = {}  # client token -> the one watch that should keep running for that tab


def take_over_watch(client_token: str) -> Callable[[], bool]:
    """A newer page load (or reconnect) of the same tab supersedes its older watch; returns `still_wanted`."""
    me = uuid.uuid4().hex
    _WATCHERS[client_token] = me
    return lambda: _WATCHERS.get(client_token) == me


def end_watch(client_token: str) -> None:
    """Logout: the tab's live task stops at its next check, before it could push anything more."""
    _WATCHERS.pop(client_token, None)


class View:
    """One open tab's registration on a channel: the hints queued for it, the probe of what it shows, and `seen`,
    the version it last rendered. The page sets `seen` after every reload, from the version it read BEFORE the
    data (so the data is at least that new)."""

    def __init__(self, channel: str, still_wanted: Callable[[], bool], probe: Probe, seen: object) -> None:
        self.channel, self.still_wanted, self.probe, self.seen = channel, still_wanted, probe, seen
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_SIZE)

    def hints(self) -> AsyncGenerator[dict[str, Any], None]:
        """Hints while the view is wanted; ends when the tab's watch is superseded or ended."""
        return HUB.hints(self)


class Hub:
    """The process's one subscription and the views registered on it (all on the backend's event loop)."""

    def __init__(self) -> None:
        self._views: dict[str, set[View]] = {}
        self._task: asyncio.Task[None] | None = None
        self._counter: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._dirty = asyncio.Event()
        self.where = f"{socket.gethostname()}:{os.getpid()}"

    @property
    def view_count(self) -> int:
        return sum(len(v) for v in self._views.values())

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="outbox-live-hub")
        if self._counter is None or self._counter.done():
            self._counter = loop.create_task(self._publish_counts(), name="outbox-live-counts")
        if self._checker is None or self._checker.done():
            self._checker = loop.create_task(self._check_views(), name="outbox-live-checks")

    async def _run(self) -> None:
        delay, first = 0.5, True
        while True:
            # Named, so on-call (and the tests) can tell the hub's subscription from the lane workers' wake-ups.
            client = aioredis.Redis.from_url(get_settings().redis_url, client_name=HUB_CLIENT_NAME)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(f"{REFRESH_PREFIX}*")
                if not first:  # anything published while we were away was missed: every view reloads
                    for views in self._views.values():
                        _fan_out(views, {"kind": "resync"})
                first, delay = False, 0.5
                while True:
                    msg = await pubsub.get_message(timeout=5.0)
                    if msg is not None and msg.get("type") == "pmessage":
                        self._dispatch(msg["channel"], msg["data"])
            except (RedisError, OSError) as e:
                log.warning("live hub lost Redis (%s); reconnecting in %.1f s", type(e).__name__, delay)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py left PubSub.aclose unannotated
                    await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _dispatch(self, channel: bytes | str, raw: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        views = self._views.get(name)
        if not views:
            return
        try:
            data = json.loads(raw)
        except (ValueError, TypeError):
            return
        if not isinstance(data, dict):
            return
        data["received_at"] = time.time()
        _fan_out(views, data)

    async def _check_views(self) -> None:
        """The safety net under the hints: each interval, one probe per watched channel (in a worker thread, never
        under a state lock) and a "check" hint to every view of it whose `seen` differs. A view with a hint already
        queued is skipped: it reloads anyway, after this read."""
        while True:
            await asyncio.sleep(get_settings().view_check_interval)  # a period, not a wait for something
            probes = {channel: next(iter(views)).probe for channel, views in self._views.items() if views}
            if not probes:
                continue
            versions = await asyncio.to_thread(_read_versions, probes)
            # Asked AFTER the read: a read that saw a change obeys any switch set before that change.
            if await _checks_switched_off():
                continue
            for channel, version in versions.items():
                for view in list(self._views.get(channel, ())):
                    if view.seen != version and view.queue.empty():
                        view.queue.put_nowait({"kind": "check", "version": version, "received_at": time.time()})

    async def _publish_counts(self) -> None:
        """This process's views per channel, written whole to `outbox:live:views:<host>:<pid>` whenever they change
        (and every 20 s, with a 60 s expiry, so a dead process's figures vanish). Absolute figures written by the
        hub, never increments from the views: a view cancelled mid-registration cannot leave a count behind."""
        key = f"{LIVE_VIEWS_KEY}:{self.where}"
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), timeout=20.0)
            self._dirty.clear()
            counts = {c: len(q) for c, q in self._views.items() if q}
            try:
                pipe = (await arq()).pipeline(transaction=True)
                pipe.delete(key)
                if counts:
                    pipe.hset(key, mapping=counts)
                    pipe.expire(key, 60)
                await pipe.execute()
            except Exception as e:  # best effort: figures for readiness checks, not for delivery
                log.warning("live view counts not written (%s)", type(e).__name__)
                await asyncio.sleep(1.0)
                self._dirty.set()

    async def hints(self, view: View) -> AsyncGenerator[dict[str, Any], None]:
        if self.view_count >= get_settings().live_views_max:
            log.warning("live views cap reached (%d): %s opens without live updates", self.view_count, view.channel)
            return
        self._start()
        self._views.setdefault(view.channel, set()).add(view)  # no await between registering and `try`: a
        self._dirty.set()  # cancelled view always unregisters
        try:
            while view.still_wanted():
                try:
                    data = await asyncio.wait_for(view.queue.get(), timeout=1.0)
                except TimeoutError:
                    continue
                if view.still_wanted():
                    yield data
        finally:
            views = self._views.get(view.channel)
            if views is not None:
                views.discard(view)
                if not views:
                    del self._views[view.channel]
            self._dirty.set()


def _fan_out(views: set[View], data: dict[str, Any]) -> None:
    """A copy of the hint to each view; a full queue drops its oldest hint (each one only says "reload")."""
    for view in list(views):
        if view.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                view.queue.get_nowait()
        view.queue.put_nowait(dict(data))


def _read_versions(probes: dict[str, Probe]) -> dict[str, object]:
    """One probe per channel; a failed read skips that channel this round (the next round tries again)."""
    out: dict[str, object] = {}
    for channel, probe in probes.items():
        try:
            out[channel] = probe()
        except Exception as e:
            log.warning("view check of %s failed (%s)", channel, type(e).__name__)
    return out


async def _checks_switched_off() -> bool:
    """Development drills may switch the checks off at runtime (the stale-view test does); Redis away: they run."""
    try:
        return await switched_off(await arq(), "view_check")
    except Exception:
        return False


HUB = Hub()


def view(channel: str, still_wanted: Callable[[], bool], probe: Probe, seen: object) -> View:
    """A live view of `channel`: iterate `view(...).hints()` (inside `contextlib.aclosing`), reload on each hint
    outside the state lock, then set `.seen` to the version read with that reload."""
    return View(channel, still_wanted, probe, seen)
