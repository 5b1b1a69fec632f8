"""The relay's claim: draining a backlog over the partial index of owed rows beside an index on (status,
next_attempt_at); and `scan_ms_1m`, one relay scan of a lane with 1,000 owed rows among 1,000,000 settled ones, in
a database built once and kept between runs (`outbox_bench_scan`)."""

from __future__ import annotations

import statistics
import time

import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.delivery import wakeups
from jobs.drills.bench.common import SCAN_DB, pct, say
from jobs.ops.dbadmin import ensure_database, migrate
from jobs.ops.seed import seed


def _fill_ledger(owed: int, done: int) -> None:
    """A ledger of `owed` rows among `done` settled ones in the bench database, which is emptied whole and seeded
    again first: emptying only the ledger (as before) left the earlier steps' orders without their events, daily
    counts without their messages and no balances, and `outbox check` on the bench database failed 1, 7 and 11."""
    with UnitOfWork() as uow:
        uow.execute(sa.text("TRUNCATE tenants, notifications, ledger_keys, notification_attempts, delivery_receipts, "
                            "delivery_receipt_keys, ops_series_points RESTART IDENTITY CASCADE"))
        uow.commit()
    seed()
    with UnitOfWork() as uow:
        uow.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at) "
            "SELECT 42, 'cust-001', 'webhook', 'high', 'bench', '{}', 'bench-' || g, "
            "CASE WHEN g % :every = 0 THEN 'QUEUED' ELSE 'DELIVERED' END, 0, 1, 8, "
            "now() - interval '1 hour', now() - interval '1 minute', now() "
            "FROM generate_series(1, :total) g"), {"every": max(1, (owed + done) // owed), "total": owed + done})
        uow.execute(sa.text("ANALYZE notifications"))
        uow.commit()


def _drain(batch: int = 500) -> dict[str, float]:
    """Claim a page of owed rows exactly as the relay does, then settle them as workers would: a draining
    backlog leaves dead index entries behind, which is what separates the two index designs."""
    from jobs.relay import claim_owed

    rates: list[float] = []
    total = 0
    t_all = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        rows = claim_owed(0, batch, 1.0)
        if not rows:
            break
        with UnitOfWork() as uow:
            uow.execute(sa.text("UPDATE notifications SET status = 'DELIVERED' WHERE id = ANY(:ids)"),
                        {"ids": [r.row.notification_id for r in rows]})
            uow.commit()
        rates.append(len(rows) / (time.perf_counter() - t0))
        total += len(rows)
    tenth = max(1, len(rates) // 10)
    return {"rows": total, "rows_per_s": total / (time.perf_counter() - t_all),
            "first_tenth_rows_per_s": statistics.mean(rates[:tenth]),
            "last_tenth_rows_per_s": statistics.mean(rates[-tenth:])}


def bench_scan(owed: int, done: int) -> dict[str, object]:
    """The relay's claim over the partial index of owed rows vs the same claim over an index on
    (status, next_attempt_at), each draining the same backlog; raw baseline: reading the owed ids once."""
    _fill_ledger(owed, done)
    t0 = time.perf_counter()
    with UnitOfWork() as uow:
        n = len(uow.execute(sa.text("SELECT id FROM notifications WHERE status = 'QUEUED'")).all())
    raw = n / (time.perf_counter() - t0)
    partial = _drain()
    _fill_ledger(owed, done)
    with UnitOfWork() as uow:
        uow.execute(sa.text("DROP INDEX notifications_owed"))
        uow.execute(sa.text("CREATE INDEX bench_status_available ON notifications (status, next_attempt_at)"))
        uow.execute(sa.text("ANALYZE notifications"))
        uow.commit()
    try:
        full = _drain()
    finally:
        with UnitOfWork() as uow:
            uow.execute(sa.text("DROP INDEX bench_status_available"))
            uow.execute(sa.text(
                "CREATE INDEX notifications_owed ON notifications (id, next_attempt_at) WHERE status = 'QUEUED'"))
            uow.commit()
    return {"owed": owed, "settled_rows_beside_them": done, "raw_read_owed_ids_per_s": raw,
            "partial_index": partial, "status_available_index": full,
            "ratio_partial_vs_status_index": partial["rows_per_s"] / full["rows_per_s"],
            "ratio_partial_vs_raw_read": partial["rows_per_s"] / raw}




SETTLED, OWED = 1_000_000, 1_000


def _scan_db_url() -> str:
    import os

    return os.environ["OUTBOX_DATABASE_URL"].rsplit("/", 1)[0] + "/" + SCAN_DB


def _scan_db() -> sa.Engine:
    """The cached database: migrated to head every run, filled only when its rows are not the expected ones."""
    url = _scan_db_url()
    ensure_database(url)
    migrate(url)
    eng = sa.create_engine(url)
    with eng.begin() as c:
        have = c.execute(sa.text(
            "SELECT count(*) FILTER (WHERE status = 'QUEUED'), count(*) FILTER (WHERE status = 'DELIVERED') "
            "FROM notifications")).one()
        if tuple(have) != (OWED, SETTLED):
            say(f"building the scan database once: {SETTLED:,} settled and {OWED:,} owed rows")
            c.execute(sa.text("TRUNCATE notifications, ledger_keys CASCADE"))
            c.execute(sa.text(
                "INSERT INTO tenants (id, name) VALUES (42, 'bench') ON CONFLICT DO NOTHING"))
            c.execute(sa.text(
                "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                "status, cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at) "
                "SELECT 42, 'cust-001', 'webhook', 'high', 'bench', '{}', 'scan-' || g, "
                "CASE WHEN g % :every = 0 THEN 'QUEUED' ELSE 'DELIVERED' END, 0, 1, 8, now() - interval '1 hour', "
                "now() - interval '1 minute', now() FROM generate_series(1, :total) g"),
                {"every": (SETTLED + OWED) // OWED, "total": SETTLED + OWED})
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text("VACUUM ANALYZE notifications"))
    return eng


def bench_scan_1m(runs: int = 20) -> dict[str, object]:
    """One relay scan of the lane (`wakeups.scan_owed`, its pages of 500 up to the 1,000 owed) timed `runs` times;
    raw baseline: the same 1,000 owed ids read without a lock, through the same partial index. The plan is kept."""
    eng = _scan_db()
    page = 500
    times, raw = [], []
    try:
        with eng.connect() as c:
            plan = wakeups.explain_scan_owed(c, limit=page, horizon_seconds=1.0, lease_seconds=30.0, lane="high")
            for _ in range(runs):
                t0 = time.perf_counter()
                after, seen = 0, 0
                while True:
                    rows = wakeups.scan_owed(c, after=after, limit=page, horizon_seconds=1.0, lease_seconds=30.0,
                                             lane="high")
                    seen += len(rows)
                    if len(rows) < page:
                        break
                    after = rows[-1].id
                c.commit()
                times.append((time.perf_counter() - t0) * 1000)
                assert seen == OWED, seen
                t0 = time.perf_counter()
                n = len(c.execute(sa.text("SELECT id FROM notifications WHERE status = 'QUEUED' AND lane = 'high' "
                                          "ORDER BY id")).all())
                c.commit()
                raw.append((time.perf_counter() - t0) * 1000)
                assert n == OWED
    finally:
        eng.dispose()
    return {"scan_ms_1m": statistics.median(times), "scan_ms_1m_p99": pct(times, 0.99),
            "scan_raw_read_ms_1m": statistics.median(raw),
            "scan_1m_uses_partial_index": float("notifications_owed_by_lane" in plan),
            "scan_1m_plan": plan}



def bench_ops_series_1m(runs: int = 5) -> dict[str, float]:
    """/ops' 1 h chart for every tenant over the same 1,000,000 settled rows: the first load (every finished point
    computed once and kept), then refreshes (only the points still moving), beside the raw baseline — the oracle
    (brute force over the whole ledger at every instant where a point's worst can be, no index)."""
    from domain.delivery import views
    from domain.delivery.views import OPS_SERIES_WHOLE_LEDGER

    eng = _scan_db()
    minutes, step, label = views.SERIES_WINDOWS["1h"]
    try:
        with eng.begin() as c:
            c.execute(sa.text("DELETE FROM ops_series_points"))
        t0 = time.perf_counter()
        views.ops_series(None, "1h", engine=eng)
        first = (time.perf_counter() - t0) * 1000
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            views.ops_series(None, "1h", engine=eng)
            times.append((time.perf_counter() - t0) * 1000)
        say("timing the chart's whole-ledger oracle once (tens of seconds or more at this size) …")
        with eng.connect() as c:
            t0 = time.perf_counter()
            c.execute(OPS_SERIES_WHOLE_LEDGER, {"window": minutes, "step": step, "label_format": label,
                                                "tenant_id": None, "now": None}).all()
            direct = (time.perf_counter() - t0) * 1000
    finally:
        eng.dispose()
    return {"ops_series_ms_1m": round(statistics.median(times), 1), "ops_series_first_ms_1m": round(first, 1),
            "ops_series_whole_ledger_ms_1m": round(direct, 1)}
