"""`outbox bench`: what the outbox costs, as ratios against raw baselines measured in the same run.

Steps (issue 17), in order; `outbox bench --only wake,commit` runs some and replaces their figures in the last
run's evidence:
- wake (on a system at rest): commit to the critical worker starting a code's attempt — woken after commit, through
  the relay's NOTIFY, and by the scan alone — beside a bare commit → PUBLISH → other process's UPDATE; then the CPU
  and memory every process holds at rest (wake.py);
- commit: the order command at 1/4/16 clients beside the same statements by raw psycopg (commit.py);
- delivery: a webhook backlog through ledger → arq → 2 workers → receiver beside the receiver's own capacity, with
  the CPU our processes and the receiver spent on it (/proc); then commit-to-effect latency at half that rate; then
  the lean probe (lean.py) on a backlog of the same size (delivery.py);
- pgbouncer: the commit path at 4 clients and the delivery path, direct and then with every pool through a
  PgBouncer in transaction mode (unprepared), back to back; the connections it held (bouncer.py);
- recovery: seconds from a Redis FLUSHDB with a backlog owed until every row is delivered (delivery.py);
- lanes: one-time codes idle and with a campaign in flight, the fan-out beside a bare INSERT … SELECT, the
  campaign's rate with the bucket set high beside the provider's capacity (lanes.py);
- fair: tenant 7's 50-message campaign alone, then started while tenant 42's big campaign is in flight (its
  completion time both ways), and the big campaign's sent/s without and with it (fair_queue.py);
- scan: the relay's claim draining a backlog over two index designs, then one scan among 1,000,000 settled rows
  in a database kept between runs (scan.py);
- relays: the four ways an approval leaves PostgreSQL for another service — after-commit enqueue, NOTIFY-woken
  scan, scan alone (each to the receiver's webhook effect), CDC → Redis Stream → the fulfilment inbox — on a
  wal_level = logical cluster of its own: commit → consumer p50/p99, a burst's events/s, database CPU and WAL per
  event; then the CDC relay stopped a while: the WAL its slot retains and its catch-up (relays.py);
- partitions: a batched claim and record as the ledger's months accumulate (partitions.py);
- longway: a claim the long way settles beside one of the common case, through the workers' store (longway.py);
- push: operator A's click to operator B's render in one Chromium, timed inside the pages, then the dashboard's
  memory per open tab with 50 tabs live (push.py; builds and starts the dashboard in prod mode).

Runs in its own database `outbox_bench` and Redis db 4; writes evidence/bench.md and evidence/bench.json
(report.py). Progress is printed as it goes, with the seconds since the start.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime

import redis as redis_lib

from jobs.drills.bench import (
    bouncer,
    commit,
    delivery,
    fair,
    lanes,
    longway,
    partitions,
    push,
    relays,
    report,
    scan,
    wake,
)
from jobs.drills.bench.common import API_PORT, BENCH_DB, BENCH_REDIS_DB, RECEIVER_PORT, RECEIVER_PROCS, say
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System

STEPS = ("wake", "commit", "delivery", "pgbouncer", "recovery", "lanes", "fair", "scan", "partitions", "longway",
         "push", "relays")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def run_bench(n: int = 300, scan_owed: int = 20_000, scan_done: int = 200_000, recipients: int = 40_000,
              codes: int = 30, window: float = 30.0, only: tuple[str, ...] = (), relay_outage: float = 60.0,
              relay_samples: int = 100) -> dict[str, object]:
    """Every step in STEPS, or `only` some of them (their figures replace those of the last run in the evidence).
    Flat keys (`wake_p50_ms`, `commit_per_s_4` …) sit at the top of bench.json, each beside its raw baseline."""
    unknown = set(only) - set(STEPS)
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(sorted(unknown))}; steps are {', '.join(STEPS)}")
    steps = [step for step in STEPS if not only or step in only]
    shared = any(step != "relays" for step in steps)  # `relays` owns its cluster: `--only relays` needs no more
    redis_url = isolated_environment(BENCH_DB, BENCH_REDIS_DB, OUTBOX_SCAN_INTERVAL="0.5",
                                     OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{RECEIVER_PORT}",
                                     OUTBOX_APP_URL=f"http://127.0.0.1:{API_PORT}") if shared else \
        os.environ.get("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0")
    r = redis_lib.Redis.from_url(redis_url)
    system = System(dict(os.environ), ROOT / ".run" / "bench-logs")
    evidence = ROOT / "evidence" / "bench.json"
    last: dict[str, object] = json.loads(evidence.read_text()) if evidence.exists() else {}
    # `--only` replaces its steps' figures; a full run keeps only what another command merged in (vacuum-drill).
    results = last if only else {k: v for k, v in last.items() if k.startswith("vacuum")}
    results.update({"measured_at": datetime.now(UTC).isoformat(), "n": n, "cpu_count": os.cpu_count(),
                    "uptime_start": _uptime(), "load_avg_1m_start": os.getloadavg()[0],
                    "steps_run": ",".join(only or STEPS)})
    what = {"wake": f"wake-ups: {codes} one-time codes at rest, three ways, then idle CPU and memory",
            "commit": f"commit path, {n} commands at 1 client, then at 1/4/16 clients beside raw psycopg",
            "delivery": f"delivery path, {n} webhooks, 2 workers on the lane, then commit-to-effect at half rate",
            "pgbouncer": f"through PgBouncer: {n} commands at 4 clients and {n} webhooks, direct then through it",
            "recovery": f"recovery after Redis flush, {n} owed",
            "lanes": f"lanes: {codes} one-time codes idle, then with a {recipients}-recipient campaign in flight",
            "fair": f"fair bulk lane: tenant 7's 50-message campaign alone, then beside tenant 42's {recipients}",
            "scan": f"relay claim draining {scan_owed} owed among {scan_done} settled rows, then among 1,000,000",
            "partitions": "a batched claim and record of one row with the ledger's messages in 1, 16 and 48 months",
            "longway": "a claim the long way settles (a recipient over the cap) beside a claim of the common case",
            "push": "pushes: A's click to B's render over 50 runs in one Chromium, then 50 tabs open",
            "relays": f"relays compared: {relay_samples} paced approvals and a burst of {n} through each of four "
                      f"paths, then the CDC relay down {relay_outage:g}s"}
    try:
        if shared:
            system.receiver(RECEIVER_PORT, reset=True, workers=RECEIVER_PROCS)
            system.api(API_PORT)  # delivery receipts land here
        for i, step in enumerate(steps, 1):
            print(f"[{i}/{len(steps)}] {what[step]} …", flush=True)
            if step == "wake":
                results.update(wake.bench_wake(system, r, codes))
                _stop(system, lambda name: name.startswith("worker-") or name == "relay")
            elif step == "commit":
                results["commit"] = commit.bench_commit(n)
                results.update(commit.bench_commit_clients(n))
            elif step == "delivery":
                d = delivery.bench_delivery(system, n, r)
                results.update({"delivery": d, **delivery.e2e_keys(d)})
                results.update(delivery.bench_e2e_latency(max(1.0, d["outbox_deliveries_per_s"] / 2)))
                _stop(system, lambda name: name.startswith("worker-") or name == "relay")
                probe = delivery.bench_lean(int(d["backlog"]))
                d.update(probe)
                results.update(delivery.lean_keys(d, probe))
            elif step == "pgbouncer":
                results.update(bouncer.bench_pgbouncer(system, n, r))
            elif step == "recovery":
                results["recovery"] = delivery.bench_recovery(system, n, r)
            elif step == "lanes":
                if "relay" not in system.procs or not system.procs["relay"].alive():
                    system.relay()
                ln = lanes.bench_lanes(system, r, recipients, codes, window)
                results.update({"lanes": ln, **lanes.lanes_keys(ln)})
                system.stop_all()
            elif step == "fair":
                # Its own time and load: `--only fair` leaves the other steps' run figures as they were.
                started = {"fair_measured_at": datetime.now(UTC).isoformat(), "fair_uptime_start": _uptime()}
                results.update({**started, **fair.bench_fair(system, r, recipients), "fair_uptime_end": _uptime()})
                system.stop_all()
            elif step == "partitions":
                system.stop_all()
                results.update(partitions.bench_partitions(os.environ["OUTBOX_DATABASE_URL"]))
            elif step == "longway":
                system.stop_all()
                results.update(longway.bench_long_way(os.environ["OUTBOX_DATABASE_URL"]))
            elif step == "scan":
                system.stop_all()
                results["scan"] = scan.bench_scan(scan_owed, scan_done)
                s1m = scan.bench_scan_1m()
                results["scan_1m"] = {"plan": s1m.pop("scan_1m_plan")}
                results.update(s1m)
                results.update(scan.bench_ops_series_1m())
            elif step == "push":
                results.update(push.bench_push(system, r))
                system.stop_all()
            elif step == "relays":
                system.stop_all()  # its own cluster, Redis and processes; the shared machine's cores to itself
                started = {"relays_measured_at": datetime.now(UTC).isoformat(), "relays_uptime_start": _uptime()}
                results.update({**started, **relays.bench_relays(relay_samples, burst=n, outage_s=relay_outage),
                                "relays_uptime_end": _uptime()})
            say(f"{step} done")
    finally:
        system.stop_all()
        r.close()
    results.update({"load_avg_1m_end": os.getloadavg()[0], "uptime_end": _uptime()})
    report.write(results)
    return results


def _stop(system: System, which: object) -> None:
    assert callable(which)
    for name in [k for k in system.procs if which(k)]:
        system.procs.pop(name).stop()
