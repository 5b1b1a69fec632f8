"""The hot path's cost as the ledger's months accumulate (issue 29, item 2), in a database of its own.

`claim_ms_partitions_{1,16,48}`: one batched lane's claim of one due webhook (`CLAIM_BATCH`, n = 1) through the
workers' own store (domain/delivery/store.py: its pool, its prepared statements), p50 over RUNS, with the ledger
holding messages in 1, 16 and 48 months (one partition each, ROWS_PER_MONTH settled messages in each, plus the
months kept ahead and `DEFAULT`); `record_ms_partitions_K` the same row's `RECORD_SENT_BATCH`. Beside each, in the
same run on the same ledger, `…_id_only`: the same two statements naming the row by its id alone, as they did
before they carried its month (every month's primary key probed). `…_unprepared`: the same rounds on a pool that
prepares nothing, as every pool through PgBouncer runs (each statement planned afresh: a plan that cannot prune
plans every partition). `claim_ratio_partitions_48_to_1` and
`record_ratio_partitions_48_to_1` say whether the cost stays flat as months accumulate.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from domain.delivery import sql, sql_record, store, store_batch
from domain.delivery.retry import Succeeded
from domain.retention.partitions import ensure_partitions
from jobs.drills.bench.common import SUFFIX, say, settings_on
from jobs.ops.dbadmin import ensure_database, migrate

PARTS_DB = f"outbox_bench_parts{SUFFIX}"
MONTHS = (1, 16, 48)
ROWS_PER_MONTH = 2_000
RUNS = 200

# The batch claim's and record's statements as the store runs them (psycopg's form), and as they were before they
# named the row's month: the same text with the month's condition taken out. A round swaps the text the store's
# statement runs (`_running`), nothing else.
_CLAIM, _RECORD = sql.CLAIM_BATCH, sql_record.RECORD_SENT_BATCH
_CLAIM_WITH_MONTH, _RECORD_WITH_MONTH = _CLAIM.pg, _RECORD.pg
_CLAIM_BY_ID = _CLAIM_WITH_MONTH.replace(
    "WHERE (id, created_at) IN (SELECT id, created_at FROM picked)", "WHERE id IN (SELECT id FROM picked)")
_RECORD_BY_ID = _RECORD_WITH_MONTH.replace(
    " AND notifications.created_at = v.vca\n"
    "    AND notifications.created_at = ANY(CAST(%(created_ats)s AS timestamptz[]))", "")
assert _CLAIM_BY_ID != _CLAIM_WITH_MONTH and _RECORD_BY_ID != _RECORD_WITH_MONTH


@contextlib.contextmanager
def _running(claim_stmt: str, record_stmt: str) -> Iterator[None]:
    before = (_CLAIM.pg, _RECORD.pg)
    _CLAIM.pg, _RECORD.pg = claim_stmt, record_stmt
    try:
        yield
    finally:
        _CLAIM.pg, _RECORD.pg = before


def _url(base_url: str) -> str:
    return base_url.rsplit("/", 1)[0] + "/" + PARTS_DB


def _months_back(eng: sa.Engine, months: int) -> None:
    """Settled messages in each of the `months` months up to this one (ROWS_PER_MONTH each), their partitions
    created by the same `ensure` the relay runs (rows of a month with no partition wait in DEFAULT, then move)."""
    with eng.begin() as c:
        have = c.execute(sa.text("SELECT count(DISTINCT date_trunc('month', created_at)) FROM notifications")).scalar()
        for back in range(int(have or 0), months):
            c.execute(sa.text(
                "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                "status, cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at, settled_at) "
                "SELECT 42, 'receiver', 'webhook', 'high', 'order.approved', '{}', 'parts-' || :b || '-' || g, "
                "'DELIVERED', 0, 1, 8, t, t, t, t FROM generate_series(1, :rows) g, "
                "LATERAL (SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
                "                - make_interval(months => :b) "
                "                + make_interval(secs => g) AS t) x"), {"b": back, "rows": ROWS_PER_MONTH})
    ensure_partitions(engine=eng)
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text("VACUUM ANALYZE notifications"))


def _partitions(eng: sa.Engine) -> int:
    with eng.connect() as c:
        return int(c.execute(sa.text(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'notifications'::regclass")).scalar_one())


async def _rounds(url: str, eng: sa.Engine, claim_stmt: str, record_stmt: str,
                  prepared: bool = True) -> tuple[float, float]:
    """p50 ms of the claim and of the record of one owed webhook, RUNS times (a fresh owed row each).
    `prepared=False`: the pool as it runs through PgBouncer (no statement prepared: each one planned afresh)."""
    pool = await store.open_pool(url, "bench-partitions", max_size=1, prepared=prepared)
    claims_ms: list[float] = []
    records_ms: list[float] = []
    try:
        for i in range(RUNS):
            with eng.begin() as c:
                c.execute(sa.text(
                    "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                    "status, cost_cents, attempts, max_attempts) VALUES (42, 'receiver', 'webhook', 'high', "
                    "'order.approved', '{}', :k, 'QUEUED', 0, 0, 8)"), {"k": f"parts-run-{time.time_ns()}-{i}"})
            t0 = time.perf_counter()
            with _running(claim_stmt, record_stmt):
                batch = await store_batch.claim_batch(pool, "high", 1, 30.0, datetime.now(UTC))
            t1 = time.perf_counter()
            assert len(batch.ready) == 1, "the owed row was claimed and may go"
            (ready,) = batch.ready
            with _running(claim_stmt, record_stmt):
                got = await store_batch.record_batch(pool, [store_batch.Attempted(
                    ready.claim, Succeeded(False), datetime.now(UTC), 200, 1.0, f"bench-{ready.claim.id}")],
                    "bench-partitions")
            t2 = time.perf_counter()
            assert got == {ready.claim.id: "sent"}, got
            if i >= 10:  # past psycopg's first preparations and the plan cache's first custom plans
                claims_ms.append((t1 - t0) * 1000)
                records_ms.append((t2 - t1) * 1000)
    finally:
        await pool.close()
    return statistics.median(claims_ms), statistics.median(records_ms)


def bench_partitions(base_url: str) -> dict[str, Any]:
    url = _url(base_url)
    ensure_database(url, reset=True)
    migrate(url)
    eng = sa.create_engine(url)
    out: dict[str, Any] = {}
    # The process's own engine on this database too: a row a round sends the long way (on the process's engine in a
    # sync caller) must land here, never in the bench's main database.
    try:
        with settings_on(url):
            with eng.begin() as c:
                c.execute(sa.text("INSERT INTO tenants (id, name) VALUES (42, 'bench') ON CONFLICT DO NOTHING"))
            for months in MONTHS:
                _months_back(eng, months)
                parts = _partitions(eng)
                claim_ms, record_ms = asyncio.run(_rounds(url, eng, _CLAIM_WITH_MONTH, _RECORD_WITH_MONTH))
                claim_id, record_id = asyncio.run(_rounds(url, eng, _CLAIM_BY_ID, _RECORD_BY_ID))
                claim_u, record_u = asyncio.run(_rounds(url, eng, _CLAIM_WITH_MONTH, _RECORD_WITH_MONTH, False))
                claim_uid, record_uid = asyncio.run(_rounds(url, eng, _CLAIM_BY_ID, _RECORD_BY_ID, False))
                out.update({f"claim_ms_partitions_{months}_unprepared": round(claim_u, 3),
                            f"claim_ms_partitions_{months}_unprepared_id_only": round(claim_uid, 3),
                            f"record_ms_partitions_{months}_unprepared": round(record_u, 3),
                            f"record_ms_partitions_{months}_unprepared_id_only": round(record_uid, 3)})
                out.update({f"claim_ms_partitions_{months}": round(claim_ms, 3),
                            f"claim_ms_partitions_{months}_id_only": round(claim_id, 3),
                            f"record_ms_partitions_{months}": round(record_ms, 3),
                            f"record_ms_partitions_{months}_id_only": round(record_id, 3),
                            f"ledger_partitions_{months}": parts})
                say(f"{months} months ({parts} partitions): claim {claim_ms:.2f} ms (by id alone {claim_id:.2f}), "
                    f"record {record_ms:.2f} ms (by id alone {record_id:.2f}); unprepared: claim {claim_u:.2f} "
                    f"({claim_uid:.2f}), record {record_u:.2f} ({record_uid:.2f})")
            last = MONTHS[-1]
            out[f"claim_ratio_partitions_{last}_to_1"] = round(out[f"claim_ms_partitions_{last}"]
                                                               / out["claim_ms_partitions_1"], 2)
            out[f"record_ratio_partitions_{last}_to_1"] = round(out[f"record_ms_partitions_{last}"]
                                                                / out["record_ms_partitions_1"], 2)
    finally:
        eng.dispose()
    return out
