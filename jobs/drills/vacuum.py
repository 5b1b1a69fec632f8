"""VACUUM held back (issue 19, item 4): `outbox vacuum-drill` keeps the delivery path saturated (a backlog of
approved orders kept topped up: each a webhook on the high lane and an email on the normal lane, two workers per
lane, the relay, the receiver and the API for receipts), measures how many ledger rows it settles per second, then
opens ONE transaction that holds a snapshot for `--hold` seconds (three minutes by default) — every row version
that dies meanwhile stays, in the table and in the partial index of owed rows — and measures again, then once more
after the transaction ends. A-B-A: the figure compares the held window with the mean of the windows before and
after it, so a machine whose load drifts (two cores shared with other work) does not pass drift off as the effect.

Keys merged into evidence/bench.json (and a section of evidence/bench.md) only with `--evidence`:
`vacuum_held_drop_pct` (target <= 10), the rates of each window, the held window's last minute, and dead tuples.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.ledger.metering import top_up
from domain.orders.commands import execute_order_command
from jobs.drills.bench.report import replace_section
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, stop_on_sigterm, wait_until, wait_worker_ready

_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
DB_NAME, REDIS_DB = "outbox_vacuum", 7
RECEIVER_PORT, API_PORT = 8084 + 100 * _SLOT, 8085 + 100 * _SLOT
BACKLOG = 400  # owed rows the producer keeps in front of the workers: they never wait for work
SAMPLE_EVERY = 1.0
SETTLED_SQL = "SELECT count(*) FROM notifications WHERE status <> 'QUEUED'"
# notification_attempts is partitioned by month (its parent has no tuples of its own): its partitions are summed.
DEAD_SQL = """SELECT CASE WHEN relname LIKE 'notification\\_attempts\\_%' THEN 'notification_attempts' ELSE relname END,
                     sum(n_live_tup), sum(n_dead_tup) FROM pg_stat_user_tables
              WHERE relname IN ('notifications', 'outbox_events', 'orders')
                 OR relname LIKE 'notification\\_attempts\\_%'
              GROUP BY 1 ORDER BY 1"""
OWED_INDEX_SQL = "SELECT pg_relation_size('notifications_owed') + pg_relation_size('notifications_owed_by_lane')"


@dataclass
class Window:
    name: str
    start: float
    end: float = 0.0
    settled: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.settled / max(1e-9, self.end - self.start)

    def rate_last(self, seconds: float) -> float:
        """Settled per second over the window's last `seconds` (the held window is worst at its end)."""
        tail = [s for s in self.samples if s[0] >= self.end - seconds]
        if len(tail) < 2:
            return self.rate
        return (tail[-1][1] - tail[0][1]) / max(1e-9, tail[-1][0] - tail[0][0])


def _url() -> str:
    return os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")


class Producer:
    """Keeps about BACKLOG rows owed: new authorized orders in one statement, each approved by the real command
    (order, envelope and ledger rows in one commit, NOTIFY to the relay)."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.approved = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="producer")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            with UnitOfWork() as uow:
                owed = int(uow.execute(sa.text("SELECT count(*) FROM notifications WHERE status = 'QUEUED'"))
                           .scalar_one())
                need = max(0, (BACKLOG - owed) // 2)  # each approval owes two rows
                ids = list(uow.execute(sa.text(
                    "INSERT INTO orders (tenant_id, status, revision, base_revision, customer_ref, amount_cents, "
                    "currency) SELECT 42, 'authorized', 1, 1, 'cust-001', 100, 'EUR' FROM generate_series(1, :n) "
                    "RETURNING id"), {"n": min(need, 100)}).scalars())
                uow.commit()
            for oid in ids:
                execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                                      actor_ref="vacuum-drill", request_id=f"vacuum-{oid}")
                self.approved += 1
            if not ids:
                self.stop_event.wait(0.05)  # the backlog is full: look again shortly


class Sampler:
    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)

    def _run(self) -> None:
        with psycopg.connect(_url(), autocommit=True) as c:
            while not self.stop_event.is_set():
                row = c.execute(SETTLED_SQL).fetchone()
                assert row is not None
                self.samples.append((time.monotonic() - self.t0, int(row[0])))
                self.stop_event.wait(SAMPLE_EVERY)  # the sampling period

    def window(self, w: Window) -> Window:
        inside = [s for s in self.samples if w.start <= s[0] <= w.end]
        if len(inside) >= 2:
            w.samples, w.start, w.end, w.settled = inside, inside[0][0], inside[-1][0], inside[-1][1] - inside[0][1]
        return w


def _session_ticks(sid: int) -> int:
    """CPU ticks (user + system) of every process in one session: a Proc and the children it started."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:
            total += int(fields[11]) + int(fields[12])
    return total


def _pid_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


def _cpu(system: System) -> dict[str, int]:
    """Ticks per role (every worker together, the relay, the API, the receiver) and the PostgreSQL backends serving
    this database (by pid; a backend that comes or goes between two readings is left out)."""
    roles: dict[str, int] = {}
    for name, p in system.procs.items():
        if p.popen is not None:
            role = name.split("-")[0]
            roles[role] = roles.get(role, 0) + _session_ticks(p.popen.pid)
    with psycopg.connect(_url(), autocommit=True) as c:
        pids = [int(r[0]) for r in c.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                              "AND pid <> pg_backend_pid()")]
    for pid in pids:
        t = _pid_ticks(pid)
        if t is not None:
            roles[f"pg:{pid}"] = t
    return roles


def _cpu_ms_per_row(start: dict[str, int], end: dict[str, int], rows: int) -> dict[str, float]:
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for k, v in end.items():
        if k in start:
            role = "postgres" if k.startswith("pg:") else k
            out[role] = out.get(role, 0.0) + (v - start[k]) * tick_ms
    return {k: round(v / max(1, rows), 3) for k, v in sorted(out.items())}


def _dead_tuples() -> dict[str, int]:
    with psycopg.connect(_url(), autocommit=True) as c:
        out = {f"{r[0]}_dead_tup": int(r[2]) for r in c.execute(DEAD_SQL)}
        row = c.execute(OWED_INDEX_SQL).fetchone()
        assert row is not None
        out["owed_indexes_bytes"] = int(row[0])
    return out


def run_vacuum_drill(hold: float = 180.0, window: float = 60.0, warmup: float = 20.0,
                     evidence: bool = False) -> dict[str, Any]:
    stop_on_sigterm()  # SIGTERM stops every process this drill started, like Ctrl-C
    isolated_environment(DB_NAME, REDIS_DB, OUTBOX_SCAN_INTERVAL="0.5",
                         OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{RECEIVER_PORT}",
                         OUTBOX_APP_URL=f"http://127.0.0.1:{API_PORT}")
    top_up(42, 100_000_000, "vacuum-drill", "vacuum-drill")  # the emails must never stop for money
    system = System(dict(os.environ), ROOT / ".run" / "vacuum-logs")
    producer = Producer()
    t0 = time.monotonic()
    sampler = Sampler(t0)
    holder: psycopg.Connection[Any] | None = None
    res: dict[str, Any] = {"measured_at": datetime.now(UTC).isoformat(), "hold_s": hold, "window_s": window,
                           "backlog": BACKLOG, "load_avg_1m_start": os.getloadavg()[0]}
    try:
        system.receiver(RECEIVER_PORT, reset=True)
        system.api(API_PORT)
        system.relay()
        import redis as redis_lib

        r = redis_lib.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
        for lane in ("high", "normal"):
            for i in (1, 2):
                system.worker(lane, name=f"worker-{lane}-{i}")
            wait_worker_ready(r, lane, 60)
        r.close()
        producer.start()
        sampler.start()
        say = print

        def now() -> float:
            return time.monotonic() - t0

        warm_until = now() + warmup  # from the producer's start, not the processes'
        wait_until(lambda: now() >= warm_until, warmup + 5, "the warm-up")
        say(f"vacuum drill: warm-up done ({producer.approved} approvals); baseline {window:g} s …", flush=True)
        before = Window("before", now())
        cpu_start = _cpu(system)
        time.sleep(window)  # the measuring window itself
        cpu_end = _cpu(system)
        before.end = now()
        res["dead_before_hold"] = _dead_tuples()
        holder = psycopg.connect(_url())
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT txid_current(), count(*) FROM notifications")  # an xid and a snapshot: xmin held
        say(f"vacuum drill: one transaction open for {hold:g} s …", flush=True)
        held = Window("held", now())
        time.sleep(hold)  # the held window itself
        held.end = now()
        res["dead_end_of_hold"] = _dead_tuples()
        holder.rollback()
        holder.close()
        holder = None
        say(f"vacuum drill: released; after {window:g} s …", flush=True)
        after = Window("after", now())
        time.sleep(window)
        after.end = now()
        res["dead_after"] = _dead_tuples()
        for w in (before, held, after):
            sampler.window(w)
        res.update(_figures(before, held, after))
        # What a settled row costs each role in CPU (the baseline window): the capacity model's input.
        res["cpu_ms_per_settled_row"] = _cpu_ms_per_row(cpu_start, cpu_end, before.settled)
    finally:
        if holder is not None:
            holder.close()
        producer.stop()
        sampler.stop()
        system.stop_all()
    res["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(res, indent=2))
    if evidence:
        write_evidence(res)
    return res


def _figures(before: Window, held: Window, after: Window) -> dict[str, Any]:
    reference = (before.rate + after.rate) / 2
    return {"vacuum_settled_per_s_before": round(before.rate, 2), "vacuum_settled_per_s_held": round(held.rate, 2),
            "vacuum_settled_per_s_held_last_60s": round(held.rate_last(60), 2),
            "vacuum_settled_per_s_after": round(after.rate, 2),
            "vacuum_held_drop_pct": round(100 * (1 - held.rate / reference), 1) if reference else None,
            "vacuum_held_last_60s_drop_pct": round(100 * (1 - held.rate_last(60) / reference), 1) if reference
            else None}


def write_evidence(res: dict[str, Any]) -> None:
    """Merge the flat figures into evidence/bench.json under their own keys (plus `vacuum` with the detail), and
    replace the VACUUM section of evidence/bench.md (appended if absent)."""
    out = ROOT / "evidence"
    bench_json = out / "bench.json"
    data: dict[str, Any] = json.loads(bench_json.read_text()) if bench_json.exists() else {}
    data.update({k: v for k, v in res.items() if k.startswith("vacuum_")})
    data["vacuum"] = res
    bench_json.write_text(json.dumps(data, indent=2))
    bench_md = out / "bench.md"
    text = bench_md.read_text() if bench_md.exists() else "# Benchmarks\n"
    head = "## VACUUM held back"
    bench_md.write_text(replace_section(text, head, _section(res, head)))
    print(f"evidence merged into {bench_json} and {bench_md}")


def _section(res: dict[str, Any], head: str) -> str:
    rows = [f"| {k} | {v} |" for k, v in res.items() if k.startswith("vacuum_")]
    rows += [f"| cpu_ms_per_settled_row.{k} | {v} |" for k, v in res.get("cpu_ms_per_settled_row", {}).items()]
    dead = [f"| {when}.{k} | {v} |" for when in ("dead_before_hold", "dead_end_of_hold", "dead_after")
            for k, v in res.get(when, {}).items()]
    return "\n".join([
        head, "",
        f"`outbox vacuum-drill --evidence`, {res['measured_at']}: the delivery path kept saturated "
        f"({res['backlog']} rows owed at all times; approvals → webhook + email, 2 workers per lane, relay, receiver, "
        f"API), settled rows per "
        f"second measured for {res['window_s']:g} s, then with ONE transaction holding its snapshot for "
        f"{res['hold_s']:g} s, then {res['window_s']:g} s after it ended. `vacuum_held_drop_pct` compares the held "
        "window with the mean of the two around it (target <= 10). Load average (1 min) "
        f"{res['load_avg_1m_start']:.2f} at the start, {res['load_avg_1m_end']:.2f} at the end.", "",
        "| metric | value |", "|---|---|", *rows, "", "Dead tuples (pg_stat_user_tables, approximate) and the size of "
        "the two partial indexes of owed rows:", "", "| when.what | value |", "|---|---|", *dead, ""])
