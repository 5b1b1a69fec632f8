"""Fair bulk lane (issue 19 item 1, measured): tenant 7's small campaign alone, then started while tenant 42's big
campaign is in flight — its completion time both ways — and the big campaign's sent/s over equal windows without
and with the small one (one bulk worker, the relay, the channel's bucket at its default pace)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.settings import get_settings
from jobs.drills.bench.common import API_PORT, RECEIVER_PORT, say, worker_ready
from jobs.ops.procs import System, wait_until

BIG, SMALL = 42, 7


def _one(q: str, **p: object) -> object:
    with UnitOfWork() as uow:
        return uow.execute(sa.text(q), p).scalar()


def _int(q: str, **p: object) -> int:
    v = _one(q, **p)
    assert isinstance(v, int)
    return v


def _db_now() -> datetime:
    now = _one("SELECT now()")
    assert isinstance(now, datetime)
    return now


def _start(tenant_id: int, name: str) -> int:
    """A campaign started the way the API starts one: created, then its fan-out woken on the bulk lane."""
    from domain.campaigns import fan_out as campaign_fan_out
    from domain.delivery.wakeups import arq_pool, enqueue_fan_out

    cid = campaign_fan_out.create(tenant_id=tenant_id, name=name, segment="all_reachable", template="offer",
                                  channel="email", actor_ref="bench")

    async def wake() -> None:
        pool = await arq_pool()
        try:
            await enqueue_fan_out(pool, cid)
        finally:
            await pool.aclose()

    asyncio.run(wake())
    return cid


def _due_owed(cid: int) -> int:
    return _int("SELECT count(*) FROM notifications WHERE campaign_id = :c AND status = 'QUEUED' "
                "AND next_attempt_at <= now()", c=cid)


def _done_seconds(cid: int, timeout: float) -> float:
    """From the campaign's start to its last send, once everything due of it went (fan-out finished, nothing due
    left: people in quiet hours wait for their morning either way)."""
    wait_until(lambda: _one("SELECT status FROM campaigns WHERE id = :c", c=cid) == "running"
               and _due_owed(cid) == 0, timeout, f"campaign {cid} to send what is due")
    s = _one("SELECT extract(epoch FROM max(n.sent_at) - min(c.started_at)) FROM notifications n "
             "JOIN campaigns c ON c.id = n.campaign_id WHERE c.id = :c", c=cid)
    assert s is not None
    return float(s)  # type: ignore[arg-type]


def _sent_between(cid: int, a: datetime, b: datetime) -> int:
    return _int("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at > :a AND sent_at <= :b",
                c=cid, a=a, b=b)


def _window(seconds: float) -> tuple[datetime, datetime]:
    a, w0 = _db_now(), time.perf_counter()
    wait_until(lambda: time.perf_counter() - w0 >= seconds, seconds + 5, "the measuring window")
    return a, _db_now()


def bench_fair(system: System, r: redis_lib.Redis, recipients: int, small: int = 50,
               window: float = 20.0) -> dict[str, float]:
    from domain.campaigns import fan_out as campaign_fan_out
    from jobs.ops.seed import seed_recipients

    seed_recipients(recipients, tenant_id=BIG)
    seed_recipients(small, tenant_id=SMALL)
    def down(name: str) -> bool:  # a step before may have stopped it
        return name not in system.procs or not system.procs[name].alive()

    if down("receiver"):
        system.receiver(RECEIVER_PORT)
    if down("api"):
        system.api(API_PORT)
    if down("relay"):
        system.relay()
    system.worker("bulk")
    worker_ready(r, "bulk")
    _done_seconds(_start(SMALL, "warm-up"), 120)  # connections and plans warm, as a running system has them
    alone = _done_seconds(_start(SMALL, "small alone"), 120)
    say(f"tenant {SMALL}'s campaign alone: {alone:.2f}s; tenant {BIG}'s campaign of {recipients} starting")
    big = _start(BIG, "big")
    wait_until(lambda: _int("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at IS NOT NULL",
                            c=big) >= 500, 300, "the big campaign to be sending")
    a, b = _window(window)
    big_alone = _sent_between(big, a, b) / (b - a).total_seconds()
    ahead = _int("SELECT count(*) FROM notifications WHERE campaign_id = :c AND status = 'QUEUED'", c=big)
    say(f"big campaign alone: {big_alone:.0f} sent/s, {ahead} still owed; tenant {SMALL}'s campaign again")
    w0, t0 = _db_now(), time.perf_counter()
    with_big = _done_seconds(_start(SMALL, "small beside big"), 300)
    wait_until(lambda: time.perf_counter() - t0 >= window, window + 5, "the measuring window")
    w1 = _db_now()
    big_with = _sent_between(big, w0, w1) / (w1 - w0).total_seconds()
    total = _int("SELECT count(*) FROM notifications WHERE campaign_id = :c", c=big)
    campaign_fan_out.cancel(BIG, big)
    say(f"small beside big: {with_big:.2f}s; big campaign meanwhile {big_with:.0f} sent/s")
    return {
        "fair_small_campaign_messages": float(small),
        "fair_small_campaign_alone_s": alone, "fair_small_campaign_with_big_s": with_big,
        "fair_small_campaign_ratio": with_big / alone,
        "fair_big_campaign_recipients": float(total),
        "fair_big_campaign_sent_per_s_alone": big_alone, "fair_big_campaign_sent_per_s_with_small": big_with,
        "fair_big_campaign_loss_pct": 100.0 * (big_alone - big_with) / big_alone,
        "fair_measuring_window_s": window, "fair_bulk_rate_setting_per_s": get_settings().bulk_rate_per_second,
        # First come, first served (before): the small campaign would have waited behind what the big one still
        # owed when it started, at the big one's own pace.
        "fair_small_fcfs_wait_estimate_s": ahead / big_alone,
    }
