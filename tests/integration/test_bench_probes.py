"""The bench's own instruments, in small (jobs/drills/bench/lean.py, common.py's CPU readers), against the real
receiver and database.

Invariants: the lean probe delivers every due webhook of the lane exactly once in effect (each row DELIVERED, its
fence token moved by its claim and its record, one `sent` attempt line, one effect at the receiver, counts agreeing)
and leaves a row leased by someone else alone; the /proc readers count CPU a process really burns (this one, and the
receiver's over a few POSTs), never less than nothing.
"""

from __future__ import annotations

import asyncio
import os
import time

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.lanes import set_lane_paused
from jobs.drills.bench import lean
from jobs.drills.bench.common import CpuWindow, PgCpu, cpu_ticks, orders
from jobs.drills.bench.delivery import _approve, raw_posts
from tests.integration.conftest import effects, rows


def test_lean_probe_delivers_each_due_webhook_once_and_skips_a_leased_row(sys_, relay_stopped):
    """The probe claims in batches (SKIP LOCKED, lease + token), posts, records each batch in one statement: every
    due row ends DELIVERED with one effect; a row another claimer holds is not touched."""
    set_lane_paused("high", True)  # the probe ignores pauses; nothing of ours may claim beside it
    try:
        events = [_approve(oid).event_id for oid in orders(7)]
        held = rows("event_id = :e AND channel = 'webhook'", e=events[-1])[0]
        with get_engine().begin() as c:
            c.execute(sa.text("UPDATE notifications SET leased_until = now() + interval '1 hour' WHERE id = :i"),
                      {"i": held.id})
        before = {r.id: r.claim_token for r in rows("channel = 'webhook'")}
        got = lean.run_probe(lane="high", batch=4, loops=2)
    finally:
        set_lane_paused("high", False)
    assert got["delivered"] == got["claimed"] == 6
    assert got["batches"] >= 2 and got["per_s"] > 0 and got["cpu_s"] >= 0
    for eid in events[:-1]:
        (r,) = rows("event_id = :e AND channel = 'webhook'", e=eid)
        assert r.status == "DELIVERED" and r.claim_token == before[r.id] + 2 and r.attempts == 1, r
        assert r.provider_reference and effects(eid)["effects"] == 1
    with get_engine().connect() as c:
        lines = c.execute(sa.text("SELECT outcome, count(*) FROM notification_attempts WHERE worker = 'lean-probe' "
                                  "GROUP BY outcome")).all()
    assert dict(lines) == {"sent": 6}
    (h,) = rows("id = :i", i=held.id)
    assert h.status == "QUEUED" and h.claim_token == before[held.id] and effects(events[-1])["effects"] == 0


def test_proc_cpu_readers_count_real_work(services):
    """cpu_ticks grows while this process burns CPU (waited for by its own reading, no sleep); CpuWindow gives the
    receiver CPU for requests it served and nothing negative to anyone."""
    tick0, deadline = cpu_ticks(os.getpid(), children=True), time.monotonic() + 30
    x = sum(i * i for i in range(20_000))  # burnt at least once: a child reaped meanwhile may move the ticks first
    while cpu_ticks(os.getpid(), children=True) <= tick0 and time.monotonic() < deadline:
        x += sum(i * i for i in range(20_000))
    assert cpu_ticks(os.getpid(), children=True) > tick0 and x > 0
    with CpuWindow(services) as cpu:
        asyncio.run(raw_posts(200, 8))
    assert "receiver" in cpu.used and cpu.receiver() > 0
    assert all(v >= 0 for v in cpu.used.values()) and cpu.ours() >= 0


def test_pg_cpu_counts_a_backend_that_works_and_leaves_inside_the_window(db):
    """`pg_cpu_ms_per_delivery` sizes PostgreSQL in docs/scaling.md: PgCpu must count the CPU of a backend that
    connected, worked and disconnected inside its window (the lean probe's connections do exactly that), and must
    not count a backend that only sat idle."""
    engine = sa.create_engine(get_engine().url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as c:
            c.execute(sa.text("SELECT 1"))
            with PgCpu() as idle:
                idle._sample()  # the open, idle connection seen twice: nothing to count
        with PgCpu() as busy, engine.connect() as c:
            c.execute(sa.text("SELECT count(*) FROM generate_series(1, 4000000)"))
            busy._sample()  # its last sample before it leaves (the thread's may come first)
    finally:
        engine.dispose()
    assert busy.used > 0.05, busy.used
    assert idle.used < busy.used / 4, (idle.used, busy.used)


def test_long_way_bench_times_a_suppressed_claim_beside_a_claim_that_goes(db):
    """`outbox bench --only longway` times what it names: every long-way claim it counts was SUPPRESSED `daily_cap`
    by the long way and every common one is Ready (the step asserts each), in a database of its own — the test's
    own database is left as it was, and the process's settings point back at it."""
    from domain.settings import get_settings
    from jobs.drills.bench.longway import bench_long_way

    url = get_settings().database_url
    with get_engine().connect() as c:
        before = c.execute(sa.text("SELECT count(*) FROM notifications")).scalar_one()
    got = bench_long_way(url, runs=20)
    assert set(got) == {"claim_ms_long_way", "claim_ms_long_way_p90", "claim_ms_common", "claim_ms_common_p90",
                        "claim_long_way_ratio"}
    assert got["claim_ms_long_way"] > 0 and got["claim_ms_common"] > 0
    assert get_settings().database_url == url
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM notifications")).scalar_one() == before
