"""`outbox bench`: what the outbox costs, as ratios against raw baselines measured in the same run.

1. commit: `execute_order_command` (revision + envelope + 2 ledger rows + NOTIFY, one txn) vs a bare
   `UPDATE orders SET revision = revision + 1` per transaction.
2. delivery: webhook deliveries/s through ledger → arq → worker → receiver (claim, sign, send, record) vs the same
   number of signed POSTs sent straight to the receiver by one client, sequentially and 10 at a time.
3. recovery: seconds from a Redis FLUSHDB with a backlog owed until every row is delivered (relay scan only).
4. lanes: one-time codes idle and with a campaign in flight; 5. scan: the relay's claim draining a backlog.
0. wake (run first, on a system at rest): commit to the critical worker starting a code's attempt beside a bare
   commit → PUBLISH → other process's UPDATE, then the CPU every process burns at rest (issue 17 item 3);
   the commit step also runs the order command at 1/4/16 clients beside the same statements by raw psycopg.
`outbox bench --only wake,commit` runs some steps and replaces their figures in the last run's evidence.

Runs in its own database `outbox_bench` and Redis db 4; writes evidence/bench.md and evidence/bench.json.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import psycopg
import redis as redis_lib
import sqlalchemy as sa
from arq.constants import health_check_key_suffix
from psycopg.types.json import Jsonb

from domain.db import UnitOfWork, get_engine
from domain.delivery.lanes import set_lane_paused
from domain.delivery.queue import LANES, queue_name
from domain.delivery.signing import signed_headers
from domain.orders.commands import Committed, execute_order_command
from domain.settings import get_settings, reload_settings
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, receiver_database_url, wait_until, wait_worker_ready

BENCH_DB, BENCH_REDIS_DB, RECEIVER_PORT, API_PORT = "outbox_bench", 4, 8096, 8093


def _orders(n: int) -> list[int]:
    with UnitOfWork() as uow:
        ids = uow.execute(sa.text(
            "INSERT INTO orders (tenant_id, status, revision, base_revision, customer_ref, amount_cents, currency) "
            "SELECT 42, 'authorized', 1, 1, 'cust-001', 100, 'EUR' FROM generate_series(1, :n) RETURNING id"),
            {"n": n}).scalars().all()
        uow.commit()
    return list(ids)


def bench_commit(n: int) -> dict[str, float]:
    ids = _orders(n)
    t0 = time.perf_counter()
    for oid in ids:
        r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                                  actor_ref="bench", request_id="bench")
        assert isinstance(r, Committed)
    outbox = n / (time.perf_counter() - t0)
    raw_ids = _orders(n)
    eng = get_engine()
    t0 = time.perf_counter()
    for oid in raw_ids:
        with eng.begin() as c:
            c.execute(sa.text("UPDATE orders SET revision = revision + 1 WHERE id = :o"), {"o": oid})
    raw = n / (time.perf_counter() - t0)
    return {"outbox_commits_per_s": outbox, "raw_updates_per_s": raw, "ratio": outbox / raw}


_RAW_COMMIT = (
    "UPDATE orders SET status = 'approved', revision = revision + 1, updated_at = now() "
    "WHERE tenant_id = 42 AND id = %(o)s AND revision = 1 RETURNING revision",
    "INSERT INTO outbox_events (event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
    "schema_version, occurred_at, request_id, actor_ref, payload, digest) VALUES (%(e)s, 42, 'order', %(o)s::text, 2, "
    "'order.approved', 1, now(), 'bench', 'bench', %(p)s, 'bench')",
    "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
    "cost_cents, next_attempt_at, event_id, order_id, attempts, max_attempts, reserved_cents) "
    "SELECT 42, 'cust-001', c, l, 'order.approved', %(p)s, 'raw-' || c || %(e)s::text, 'QUEUED', "
    "coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = 42 AND channel = c), 0), now(), %(e)s, "
    "%(o)s, 0, 8, 0 FROM (VALUES ('webhook', 'high'), ('email', 'normal')) v(c, l) "
    "ON CONFLICT (dedupe_key) DO NOTHING RETURNING id, lane",
    "SELECT pg_notify('outbox_owed', 'high')",
)


def _in_clients(clients: int, ids: list[int], one: Callable[[Any, int], None], connect: Callable[[], Any]) -> float:
    """Commands per second with `clients` threads, each on its own connection, over disjoint orders."""
    def run(chunk: list[int]) -> None:
        conn = connect()
        try:
            for oid in chunk:
                one(conn, oid)
        finally:
            if conn is not None:
                conn.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, [ids[i::clients] for i in range(clients)]))
    return len(ids) / (time.perf_counter() - t0)


def _outbox_approve(_: object, oid: int) -> None:
    r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench", request_id="bench")
    assert isinstance(r, Committed)


def _raw_approve(conn: psycopg.Connection[Any], oid: int) -> None:
    params = {"o": oid, "e": uuid.uuid4(), "p": Jsonb({"order_id": oid, "status": "approved", "revision": 2})}
    with conn.transaction():
        for stmt in _RAW_COMMIT:
            cur = conn.execute(stmt, params)
            if cur.description is not None:
                cur.fetchall()


def bench_commit_clients(n: int, clients: tuple[int, ...] = (1, 4, 16)) -> dict[str, float]:
    """The order command (through the app's engine, its pool and to_thread-free sync calls) vs the same statements
    — order update, envelope, two ledger rows, NOTIFY — by raw psycopg, at 1, 4 and 16 concurrent clients."""
    url = os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    out: dict[str, float] = {}
    for k in clients:
        out[f"commit_per_s_{k}"] = _in_clients(k, _orders(n), _outbox_approve, lambda: None)
        out[f"commit_raw_per_s_{k}"] = _in_clients(k, _orders(n), _raw_approve, lambda: psycopg.connect(url))
        print(f"      {k:>2} clients: outbox {out[f'commit_per_s_{k}']:.0f}/s, "
              f"raw {out[f'commit_raw_per_s_{k}']:.0f}/s", flush=True)
    if 4 in clients:
        out["commit_ratio_4_clients"] = out["commit_per_s_4"] / out["commit_raw_per_s_4"]
    return out


async def _raw_posts(n: int, concurrency: int) -> float:
    s = get_settings()
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=10) as client:
        async def one() -> None:
            eid = str(uuid.uuid4())
            body = json.dumps({"event_id": eid, "schema_version": 1, "payload": {}})
            h = {**signed_headers(s.webhook_secret, eid, body), "Idempotency-Key": eid}
            async with sem:
                r = await client.post(f"{s.receiver_url}/webhooks/orders", content=body, headers=h)
                assert r.status_code == 200, r.text

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0)


def _owed() -> int:
    with UnitOfWork() as uow:
        return int(uow.execute(sa.text("SELECT count(*) FROM notifications WHERE status = 'QUEUED' "
                                       "AND channel = 'webhook'")).scalar_one())


def _wait_drained(timeout: float = 300) -> float:
    t0 = time.perf_counter()
    wait_until(lambda: _owed() == 0, timeout, "the webhook backlog to drain")
    return time.perf_counter() - t0


def _worker_ready(r: redis_lib.Redis, lane: str) -> None:
    """arq writes its health-check key as soon as the worker polls: process start-up is not part of the run."""
    r.delete(queue_name(lane) + health_check_key_suffix)
    wait_worker_ready(r, lane, 60)


def bench_delivery(system: System, n: int, r: redis_lib.Redis) -> dict[str, float]:
    set_lane_paused("high", True)
    set_lane_paused("normal", True)  # emails stay parked: we measure the webhook lane alone
    for oid in _orders(n):
        execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench", request_id="bench")
    backlog = _owed()  # the commit step's approvals are owed too: count what is drained, not what this step added
    system.relay()
    workers = ("worker-high", "worker-high-b")  # two worker processes on the lane, as issue 17 measures it
    for name in workers:
        system.worker("high", name=name)
    _worker_ready(r, "high")
    set_lane_paused("high", False)  # NOTIFY wakes the relay, which enqueues the backlog
    took = _wait_drained()
    for name in (*workers, "relay"):
        system.procs[name].stop()
    raw_seq = asyncio.run(_raw_posts(n, 1))
    raw_par = asyncio.run(_raw_posts(n, 10))
    return {"backlog": backlog, "outbox_deliveries_per_s": backlog / took, "raw_sequential_posts_per_s": raw_seq,
            "raw_10_concurrent_posts_per_s": raw_par, "ratio_vs_sequential": (backlog / took) / raw_seq,
            "ratio_vs_10_concurrent": (backlog / took) / raw_par}


def e2e_keys(delivery: dict[str, float]) -> dict[str, float]:
    """The delivery step as issue 17's flat keys: committed backlog to receiver effects, beside the receiver's own
    capacity (signed POSTs straight to it, 10 at a time) measured in the same run."""
    return {"e2e_events_per_s": delivery["outbox_deliveries_per_s"],
            "receiver_raw_posts_per_s": delivery["raw_10_concurrent_posts_per_s"],
            "e2e_ratio_vs_receiver_raw": delivery["ratio_vs_10_concurrent"]}


def bench_recovery(system: System, n: int, r: redis_lib.Redis) -> dict[str, float]:
    set_lane_paused("high", True)
    for oid in _orders(n):
        execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench", request_id="bench")
    system.worker("high", name="worker-high-2")
    _worker_ready(r, "high")
    r.flushdb()  # every wake-up is gone
    set_lane_paused("high", False)
    t0 = time.perf_counter()
    system.relay()
    _wait_drained()
    took = time.perf_counter() - t0
    return {"backlog": n, "seconds_to_drain_after_flush": took, "deliveries_per_s": n / took}


def _fill_ledger(owed: int, done: int) -> None:
    with UnitOfWork() as uow:
        uow.execute(sa.text("TRUNCATE notifications, notification_attempts, balance_entries, delivery_receipts, "
                            "lead_notification_intents CASCADE"))
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


STEPS = ("wake", "commit", "delivery", "recovery", "lanes", "scan")


def run_bench(n: int = 300, scan_owed: int = 20_000, scan_done: int = 200_000, recipients: int = 40_000,
              codes: int = 30, window: float = 30.0, only: tuple[str, ...] = ()) -> dict[str, object]:
    """Every step in STEPS, or `only` some of them (their figures replace those of the last run in the evidence).
    Flat keys (`wake_p50_ms`, `commit_per_s_4` …) sit at the top of bench.json, each beside its raw baseline."""
    redis_url = isolated_environment(BENCH_DB, BENCH_REDIS_DB, OUTBOX_SCAN_INTERVAL="0.5",
                                     OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{RECEIVER_PORT}",
                                     OUTBOX_APP_URL=f"http://127.0.0.1:{API_PORT}")
    r = redis_lib.Redis.from_url(redis_url)
    system = System(dict(os.environ), ROOT / ".run" / "bench-logs")
    evidence = ROOT / "evidence" / "bench.json"
    results: dict[str, object] = json.loads(evidence.read_text()) if only and evidence.exists() else {}
    results.update({"measured_at": datetime.now(UTC).isoformat(), "n": n, "cpu_count": os.cpu_count(),
                    "load_avg_1m_start": os.getloadavg()[0], "steps_run": ",".join(only or STEPS)})
    steps = [step for step in STEPS if not only or step in only]
    what = {"wake": f"wake-ups: {codes} one-time codes at rest, then the idle CPU of every process",
            "commit": f"commit path, {n} commands at 1 client, then at 1/4/16 clients beside raw psycopg",
            "delivery": f"delivery path, {n} webhooks, 2 workers on the lane", "recovery": f"recovery after Redis flush, {n} owed",
            "lanes": f"lanes: {codes} one-time codes idle, then with a {recipients}-recipient campaign in flight",
            "scan": f"relay claim draining {scan_owed} owed among {scan_done} settled rows"}
    try:
        system.receiver(RECEIVER_PORT, reset=True)
        system.api(API_PORT)  # delivery receipts land here
        for i, step in enumerate(steps, 1):
            print(f"[{i}/{len(steps)}] {what[step]} …", flush=True)
            if step == "wake":
                results.update(bench_wake(system, r, codes))
                for name in [k for k in system.procs if k.startswith("worker-") or k == "relay"]:
                    system.procs.pop(name).stop()
            elif step == "commit":
                results["commit"] = bench_commit(n)
                results.update(bench_commit_clients(n))
            elif step == "delivery":
                delivery = bench_delivery(system, n, r)
                results.update({"delivery": delivery, **e2e_keys(delivery)})
            elif step == "recovery":
                results["recovery"] = bench_recovery(system, n, r)
            elif step == "lanes":
                if "relay" not in system.procs or not system.procs["relay"].alive():
                    system.relay()
                results["lanes"] = bench_lanes(system, r, recipients, codes, window)
                system.stop_all()
            elif step == "scan":
                system.stop_all()
                results["scan"] = bench_scan(scan_owed, scan_done)
    finally:
        system.stop_all()
        r.close()
    results["load_avg_1m_end"] = os.getloadavg()[0]
    _write(results)
    return results


def _fmt(d: object, prefix: str = "") -> str:
    assert isinstance(d, dict)
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(_fmt(v, f"{prefix}{k}."))
        else:
            lines.append(f"| {prefix}{k} | {v:.2f} |" if isinstance(v, float) else f"| {prefix}{k} | {v} |")
    return "\n".join(lines)


def _write(res: dict[str, object]) -> None:
    out = ROOT / "evidence"
    out.mkdir(exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=2))
    flat = {k: v for k, v in res.items() if not isinstance(v, dict) and k not in ("measured_at", "n", "cpu_count")}
    md = [f"# Benchmarks — {res['measured_at']}", "", f"`outbox bench`, n={res['n']}, {res['cpu_count']} cores. "
          "Ratios compare against raw baselines measured in the same run on the same machine. Load average (1 min) "
          f"{res.get('load_avg_1m_start', 0):.2f} at the start, {res.get('load_avg_1m_end', 0):.2f} at the end: "
          "other engineers' tests share these cores.", "",
          "## Issue 17: each figure beside its raw baseline (flat keys of bench.json)", "",
          "`wake_*`: commit of a one-time code to its critical worker starting the attempt, the system at rest. "
          "`wake_via_relay_*`: the same with no wake-up after commit (the commit's NOTIFY wakes the relay, whose scan enqueues it; with neither, the scan every `OUTBOX_SCAN_INTERVAL` finds it). `wake_raw_*`: the same hop done bare — a row committed by raw psycopg, its id PUBLISHed, another process UPDATEs it. `idle_cpu_pct`: % of one core burnt at rest by every process `outbox bench` runs (4 lane workers, relay, "
          "receiver, API; PostgreSQL and Redis are shared with other work on this machine and left out), per "
          "process beside it. `commit_per_s_K` vs `commit_raw_per_s_K`: the order command vs the same statements "
          "(order update, envelope, two ledger rows, NOTIFY) by raw psycopg, K concurrent clients. `e2e_events_per_s`: a "
          "committed webhook backlog to receiver effects, 2 workers on the lane, beside `receiver_raw_posts_per_s`.", "",
          "| metric | value |", "|---|---|", _fmt(flat), "",
          "## Commit: outbox command vs bare UPDATE", "", "| metric | value |", "|---|---|", _fmt(res.get("commit", {})), "",
          "## Delivery: ledger → arq → 2 workers → receiver vs direct signed POSTs", "", "| metric | value |", "|---|---|",
          _fmt(res.get("delivery", {})), "", "## Recovery after Redis FLUSHDB (relay scan only)", "", "| metric | value |",
          "|---|---|", _fmt(res.get("recovery", {})), "",
          "## Lanes: one-time codes (critical) idle and with a campaign in flight (bulk)", "",
          "| metric | value |", "|---|---|", _fmt(res.get("lanes", {})), "",
          "## Relay claim draining a backlog: partial index of owed rows vs index on (status, next_attempt_at)", "",
          "| metric | value |", "|---|---|", _fmt(res.get("scan", {})), ""]
    (out / "bench.md").write_text("\n".join(md))
    print("\n".join(md))
    print(f"evidence written to {out / 'bench.md'} and {out / 'bench.json'}")




def _provider_latency_ms(notification_ids: list[int]) -> list[float]:
    """Enqueue-to-provider: from the ledger row's commit to the provider's own receipt of the request (both
    clocks are the one PostgreSQL server's)."""
    with UnitOfWork() as uow:
        keys: dict[str, datetime] = {r.dedupe_key: r.created_at for r in uow.execute(sa.text(
            "SELECT dedupe_key, created_at FROM notifications WHERE id = ANY(:i)"), {"i": notification_ids})}
    eng = sa.create_engine(receiver_database_url(os.environ["OUTBOX_DATABASE_URL"]))
    try:
        with eng.connect() as c:
            got: dict[str, datetime] = {r.idempotency_key: r.received_at for r in c.execute(sa.text(
                "SELECT idempotency_key, received_at FROM provider_messages WHERE idempotency_key = ANY(:k)"),
                {"k": list(keys)})}
    finally:
        eng.dispose()
    return sorted((got[k] - keys[k]).total_seconds() * 1000 for k in keys)


def _codes(n: int, recipient_id: int, committed: dict[int, float] | None = None) -> list[int]:
    """One code at a time, as people ask for them: ask, wait until the provider has it, ask the next. `committed`
    gets each code's commit time (this process's wall clock, right after the ledger commit returned)."""
    from domain.delivery.wakeups import arq_pool, enqueue_after_commit
    from domain.ledger import otp
    from domain.orders.commands import OwedRow

    async def run() -> list[int]:
        pool = await arq_pool()
        ids = []
        try:
            for _ in range(n):
                row = otp.request(42, recipient_id, "sms", datetime.now(UTC))
                assert row is not None
                if committed is not None:
                    committed[row.notification_id] = time.time()
                await enqueue_after_commit(pool, [OwedRow(row.notification_id, row.lane, row.job_id)])
                await asyncio.to_thread(wait_until, lambda nid=row.notification_id: _sent(nid), 30, "a code")
                ids.append(row.notification_id)
        finally:
            await pool.aclose()
        return ids

    return asyncio.run(run())


def _sent(nid: int) -> bool:
    with UnitOfWork() as uow:
        return bool(uow.execute(sa.text("SELECT sent_at IS NOT NULL FROM notifications WHERE id = :i"),
                                {"i": nid}).scalar())


def _breakdown(notification_ids: list[int]) -> tuple[list[float], list[float]]:
    with UnitOfWork() as uow:
        rows = uow.execute(sa.text(
            "SELECT extract(epoch FROM a.started_at - n.created_at) * 1000 AS wait, a.latency_ms AS send "
            "FROM notifications n JOIN notification_attempts a ON a.notification_id = n.id "
            "WHERE n.id = ANY(:i) AND a.outcome IN ('sent', 'already_processed')"), {"i": notification_ids}).all()
    return sorted(float(r.wait) for r in rows), sorted(float(r.send) for r in rows)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))]


async def _raw_provider_posts(n: int, concurrency: int) -> tuple[float, list[float]]:
    """The mock provider alone: signed-less provider POSTs straight from one client (its capacity, and a code's
    bare round trip)."""
    s = get_settings()
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    async with httpx.AsyncClient(timeout=10) as client:
        async def one() -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(f"{s.receiver_url}/providers/sms/messages", json={
                    "to": "+15550000000", "template": "raw", "idempotency_key": f"raw-{uuid.uuid4().hex}"})
                lat.append((time.perf_counter() - t) * 1000)
                assert r.status_code in (200, 201), r.text

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0), sorted(lat)


def _cpu_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(fields[11]) + int(fields[12])


def _session_pids(sid: int) -> list[int]:
    """Every process of one of our sessions (the supervisor starts each process in its own; children included)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == sid:
                pids.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return pids


def idle_cpu(system: System, seconds: float = 10.0) -> dict[str, float]:
    """% of one core each running process of the system (and its children) burns over `seconds` of rest."""
    procs = {name: _session_pids(p.popen.pid) for name, p in system.procs.items() if p.alive() and p.popen}
    before = {name: sum(map(_cpu_ticks, pids)) for name, pids in procs.items()}
    time.sleep(seconds)
    tick = os.sysconf("SC_CLK_TCK")
    out = {f"idle_cpu_pct.{name}": (sum(map(_cpu_ticks, pids)) - before[name]) / tick / seconds * 100
           for name, pids in procs.items()}
    return {"idle_cpu_pct": sum(out.values()), **out}


def _wake_ms(committed: dict[int, float]) -> tuple[list[float], list[float]]:
    """Commit to the worker's claim transaction starting (`claimed_at`, PostgreSQL's now() on the same machine),
    and commit to the worker starting the attempt (after the claim's one transaction)."""
    with UnitOfWork() as uow:
        rows = uow.execute(sa.text(
            "SELECT n.id, n.claimed_at, min(a.started_at) AS started FROM notifications n "
            "JOIN notification_attempts a ON a.notification_id = n.id WHERE n.id = ANY(:i) GROUP BY n.id"),
            {"i": list(committed)}).all()
    return (sorted((r.claimed_at.timestamp() - committed[r.id]) * 1000 for r in rows),
            sorted((r.started.timestamp() - committed[r.id]) * 1000 for r in rows))


def _raw_waker(redis_url: str, db_url: str, channel: str) -> None:
    """The raw baseline's other process: on each pub/sub message, one UPDATE of the row it names (autocommit)."""
    r = redis_lib.Redis.from_url(redis_url)
    pubsub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(channel)
    with psycopg.connect(db_url, autocommit=True) as conn:
        for message in pubsub.listen():
            conn.execute("UPDATE bench_wake SET claimed_at = clock_timestamp() WHERE id = %s", (int(message["data"]),))


def _claimed_at(conn: psycopg.Connection[Any], row_id: int) -> datetime | None:
    row = conn.execute("SELECT claimed_at FROM bench_wake WHERE id = %s", (row_id,)).fetchone()
    return row[0] if row else None


def _raw_wake_ms(r: redis_lib.Redis, n: int) -> list[float]:
    """Raw baseline of a wake-up: commit a row by raw psycopg, PUBLISH its id, another process UPDATEs it."""
    url = os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    channel = f"bench:raw_wake:{uuid.uuid4().hex}"
    proc = multiprocessing.get_context("spawn").Process(
        target=_raw_waker, args=(os.environ["OUTBOX_REDIS_URL"], url, channel), daemon=True)
    proc.start()
    out = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_wake (id serial PRIMARY KEY, claimed_at timestamptz)")
            wait_until(lambda: cast(list[tuple[bytes, int]], r.pubsub_numsub(channel))[0][1] > 0, 30,
                       "the raw waker to subscribe")
            for _ in range(n + 3):  # the first three warm the connections
                row = conn.execute("INSERT INTO bench_wake DEFAULT VALUES RETURNING id").fetchone()
                assert row is not None
                committed = time.time()
                r.publish(channel, row[0])
                got = wait_until(partial(_claimed_at, conn, row[0]), 10, "the raw wake-up")
                assert got is not None
                out.append((got.timestamp() - committed) * 1000)
    finally:
        proc.kill()
    return sorted(out[3:])


def bench_wake(system: System, r: redis_lib.Redis, codes: int, seconds: float = 10.0) -> dict[str, float]:
    """The whole system at rest (4 lane workers, relay, receiver, API): commit-to-attempt of one-time codes on the
    critical lane, one at a time, then the CPU every process burns doing nothing."""
    from domain.ledger.recipients import find_by_ref

    ((_, rid),) = find_by_ref(42, "cust-002")
    for lane in LANES:
        if f"worker-{lane}" not in system.procs or not system.procs[f"worker-{lane}"].alive():
            system.worker(lane)
            _worker_ready(r, lane)
    if "relay" not in system.procs or not system.procs["relay"].alive():
        system.relay()
    _codes(3, rid)  # warm connections and plans
    committed: dict[int, float] = {}
    _codes(codes, rid, committed)
    to_claim, wake = _wake_ms(committed)
    # The same codes with no wake-up after commit: the commit's NOTIFY wakes the relay, whose scan enqueues them.
    os.environ["OUTBOX_WAKE_AFTER_COMMIT"] = "0"
    reload_settings()
    try:
        via_relay: dict[int, float] = {}
        _codes(codes, rid, via_relay)
    finally:
        del os.environ["OUTBOX_WAKE_AFTER_COMMIT"]
        reload_settings()
    _, relay_wake = _wake_ms(via_relay)
    raw = _raw_wake_ms(r, codes)
    time.sleep(2)  # the relay's and the workers' last wake-ups settle
    return {"wake_p50_ms": statistics.median(wake), "wake_p99_ms": _pct(wake, 0.99), "wake_max_ms": wake[-1],
            "wake_raw_p50_ms": statistics.median(raw), "wake_raw_p99_ms": _pct(raw, 0.99),
            # of which: until the worker's claim began (enqueue, wake-up, arq's pick-up); the rest is the claim
            "wake_until_claim_p50_ms": statistics.median(to_claim), "wake_until_claim_p99_ms": _pct(to_claim, 0.99),
            "wake_via_relay_p50_ms": statistics.median(relay_wake), "wake_via_relay_p99_ms": _pct(relay_wake, 0.99),
            **idle_cpu(system, seconds)}


def bench_lanes(system: System, r: redis_lib.Redis, recipients: int, codes: int, window: float) -> dict[str, float]:
    """Seed 002's promise, measured: one-time codes idle and with a campaign of `recipients` in flight."""
    from domain.campaigns import fan_out as campaign_fan_out
    from domain.campaigns import views as campaign_views
    from domain.delivery.wakeups import arq_pool, enqueue_fan_out
    from domain.ledger.recipients import find_by_ref
    from jobs.ops.seed import seed_recipients

    ((_, rid),) = find_by_ref(42, "cust-002")
    raw_rate, raw_lat = asyncio.run(_raw_provider_posts(500, 16))
    system.worker("critical")
    system.worker("bulk")
    for lane in ("critical", "bulk"):  # process start-up is not part of a code's latency
        wait_worker_ready(r, lane, 60)
    _codes(3, rid)  # warm connections and plans, as a running system has them
    idle = _provider_latency_ms(_codes(codes, rid))
    seed_recipients(recipients)
    t0 = time.perf_counter()
    with UnitOfWork() as uow:  # raw baseline: the same rows selected and written by one bare INSERT … SELECT
        uow.execute(sa.text("CREATE TEMP TABLE raw_copy AS SELECT * FROM notifications WHERE false"))
        uow.execute(sa.text(
            "INSERT INTO raw_copy (id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, reserved_cents, next_attempt_at, created_at) "
            "SELECT r.id, 42, r.ref, 'email', 'bulk', 'offer', '{}', 'raw:' || r.ref, 'QUEUED', 1, 0, 8, 0, now(), "
            "now() FROM recipients r WHERE r.tenant_id = 42 AND r.email IS NOT NULL"))
    raw_insert = recipients / (time.perf_counter() - t0)
    cid = campaign_fan_out.create(tenant_id=42, name="bench", segment="all_reachable", template="offer", channel="email",
                           actor_ref="bench")
    t0 = time.perf_counter()

    async def start() -> None:
        pool = await arq_pool()
        try:
            await enqueue_fan_out(pool, cid)
        finally:
            await pool.aclose()

    asyncio.run(start())
    total = campaign_views.status(42, cid)["total"]  # type: ignore[index]
    wait_until(lambda: campaign_views.status(42, cid)["ledgered"] >= total, 600, "the fan-out")  # type: ignore[index]
    ledgered_per_s = total / (time.perf_counter() - t0)
    wait_until(lambda: campaign_views.status(42, cid)["sent"] >= 200, 120, "the campaign to be sending")  # type: ignore[index]
    s0, w0 = campaign_views.status(42, cid)["sent"], time.perf_counter()  # type: ignore[index]
    busy_ids = _codes(codes, rid)
    busy = _provider_latency_ms(busy_ids)
    waits, sends = _breakdown(busy_ids)
    rest = window - (time.perf_counter() - w0)
    if rest > 0:
        wait_until(lambda: time.perf_counter() - w0 >= window, rest + 5, "the measuring window")
    sent_per_s = (campaign_views.status(42, cid)["sent"] - s0) / (time.perf_counter() - w0)  # type: ignore[index]
    campaign_fan_out.cancel(42, cid)
    return {
        "raw_provider_p50_ms": statistics.median(raw_lat), "raw_provider_posts_per_s_16_concurrent": raw_rate,
        "otp_p50_ms_idle": statistics.median(idle), "otp_p99_ms_idle": _pct(idle, 0.99),
        "otp_p50_ms_bulk": statistics.median(busy), "otp_p99_ms_bulk": _pct(busy, 0.99),
        "ratio_otp_p99_bulk_vs_idle": _pct(busy, 0.99) / max(0.001, _pct(idle, 0.99)),
        # Where a code's time goes with the campaign in flight: waiting for a critical worker to claim it (our
        # side), and the provider's round trip (the mock provider shares this machine's two cores).
        "otp_p50_ms_bulk_until_claimed": statistics.median(waits), "otp_p99_ms_bulk_until_claimed": _pct(waits, 0.99),
        "otp_p50_ms_bulk_provider_round_trip": statistics.median(sends),
        "otp_p99_ms_bulk_provider_round_trip": _pct(sends, 0.99),
        "campaign_recipients": total, "campaign_ledgered_per_s": ledgered_per_s,
        "raw_insert_select_rows_per_s": raw_insert, "ratio_ledgered_vs_raw_insert": ledgered_per_s / raw_insert,
        "campaign_sent_per_s": sent_per_s, "bulk_rate_setting_per_s": get_settings().bulk_rate_per_second,
        "ratio_sent_vs_raw_provider_capacity": sent_per_s / raw_rate,
    }
