"""A claim the long way settles, beside a claim of the common case, through the workers' own store (issue 26, item 1:
one store in one driver), in a database of its own.

`claim_ms_long_way`: `store.claim` of an SMS whose recipient already used today's cap (1): the plan leaves it out
and the long way settles it SUPPRESSED `daily_cap` in the claim's own transaction, p50 over RUNS (`…_p90` beside).
`claim_ms_common`: the same call, same pool, same person's channel, for an SMS that goes (the lease, the take) —
the raw baseline of the same run. `claim_long_way_ratio` = the two p50s: what the uncommon case costs over the
common one. Before the long way ran on the workers' connection it was a rolled-back transaction, a thread and a
second transaction on SQLAlchemy's engine (6.5 ms p50 against 2.6 measured the same way at dd2fdaf).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from domain.delivery import plan, store
from domain.ledger.send import send
from jobs.drills.bench.common import SUFFIX, say, settings_on
from jobs.ops.dbadmin import ensure_database, migrate
from jobs.ops.seed import seed

LONG_WAY_DB = f"outbox_bench_longway{SUFFIX}"
RUNS = 200


def _person(eng: sa.Engine, ref: str, cap: int) -> int:
    with eng.begin() as c:
        return int(c.execute(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, daily_cap) "
            "VALUES (42, :r, 'Bench', 'bench@example.test', '+15550003333', 'UTC', :cap) RETURNING id"),
            {"r": ref, "cap": cap}).scalar_one())


def _sms(recipient_id: int, period: str) -> int:
    got = send(tenant_id=42, recipient_id=recipient_id, channel="sms", template="offer", lane="normal",
               data={"headline": "bench"}, subject_period=period)
    assert got is not None
    return int(got.notification_id)


async def _claims(url: str, ids: list[int], expect: type) -> list[float]:
    pool = await store.open_pool(url, "bench-longway", max_size=1)
    try:
        times = []
        for nid in ids:
            started = time.perf_counter()
            got = await store.claim(pool, nid, 30.0, datetime.now(UTC), "bench")
            times.append((time.perf_counter() - started) * 1000)
            assert isinstance(got, expect), got
        return times
    finally:
        await pool.close()


def _p90(times: list[float]) -> float:
    return statistics.quantiles(times, n=10)[8]


def bench_long_way(base_url: str, runs: int = RUNS) -> dict[str, Any]:
    url = base_url.rsplit("/", 1)[0] + "/" + LONG_WAY_DB
    ensure_database(url, reset=True)
    migrate(url)
    eng = sa.create_engine(url)
    try:
        with settings_on(url):  # `send` and the seed write through the process's own engine
            seed()
            capped, free = _person(eng, "bench-capped", 1), _person(eng, "bench-free", runs + 10)
            first = _sms(capped, "lw-first")
            over = [_sms(capped, f"lw-{i}") for i in range(runs)]
            going = [_sms(free, f"common-{i}") for i in range(runs)]
            pg_url = url.replace("postgresql+psycopg://", "postgresql://")
            asyncio.run(_claims(pg_url, [first], plan.Ready))  # the capped person's one slot of the day
            long_way = asyncio.run(_claims(pg_url, over, plan.Suppressed))
            common = asyncio.run(_claims(pg_url, going, plan.Ready))
    finally:
        eng.dispose()
    lw50, c50 = statistics.median(long_way), statistics.median(common)
    out = {"claim_ms_long_way": round(lw50, 3), "claim_ms_long_way_p90": round(_p90(long_way), 3),
           "claim_ms_common": round(c50, 3), "claim_ms_common_p90": round(_p90(common), 3),
           "claim_long_way_ratio": round(lw50 / c50, 2)}
    say(f"a claim the long way settles {lw50:.2f} ms p50, the common case {c50:.2f} ms: {out['claim_long_way_ratio']}x")
    return out
