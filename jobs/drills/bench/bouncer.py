"""The commit path and the delivery path through PgBouncer in transaction mode (issue 29), beside the same figures
direct, measured back to back in this step (the machine's load moves between steps; a ratio across them would
measure that).

`commit_ratio_4_clients_pgbouncer`: the order command at 4 clients with the engine through PgBouncer (unprepared),
over the same statements by raw psycopg straight to PostgreSQL (the direct step's baseline, measured beside it).
`e2e_events_per_s_pgbouncer`: a committed webhook backlog drained by 2 workers whose pools go through PgBouncer (the
relay's LISTEN direct). The server and client connections PgBouncer held for the bench database during that drain come
with them.
"""

from __future__ import annotations

import os
import signal
import threading

import redis as redis_lib

from domain.settings import reload_settings
from jobs.drills.bench import commit, delivery
from jobs.drills.bench.common import BENCH_DB, say
from jobs.ops import pgbouncer
from jobs.ops.procs import ROOT, System, wait_until

_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
PGBOUNCER_PORT = 6441 + 100 * _SLOT


class _Watch(threading.Thread):
    def __init__(self, b: pgbouncer.Bouncer) -> None:
        super().__init__(daemon=True)
        self.b, self.servers, self.clients = b, 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                rows = pgbouncer.pools(self.b, BENCH_DB)
                self.servers = max(self.servers, sum(pgbouncer.server_connections(r) for r in rows))
                self.clients = max(self.clients, sum(pgbouncer.client_connections(r) for r in rows))
            except Exception:  # a lost sample is only a lost sample
                pass
            self.done.wait(0.25)


def _stop_workers(system: System) -> None:
    for name in [k for k in system.procs if k.startswith("worker-") or k == "relay"]:
        system.procs.pop(name).stop()


def bench_pgbouncer(system: System, n: int, r: redis_lib.Redis) -> dict[str, float]:
    out: dict[str, float] = {}
    direct = commit.bench_commit_clients(n, clients=(4,))
    d = delivery.bench_delivery(system, n, r)
    _stop_workers(system)
    out.update({"pgbouncer_direct_commit_ratio_4_clients": direct["commit_ratio_4_clients"],
                "pgbouncer_direct_e2e_events_per_s": d["outbox_deliveries_per_s"]})
    say(f"direct: commit ratio {direct['commit_ratio_4_clients']:.2f}, {d['outbox_deliveries_per_s']:.0f} events/s")

    b = pgbouncer.for_database(os.environ["OUTBOX_DATABASE_URL"], PGBOUNCER_PORT,
                               ROOT / ".run" / f"bench-pgbouncer{'_s' + str(_SLOT) if _SLOT else ''}")
    pgbouncer.write(b)
    proc = system._proc("pgbouncer", pgbouncer.argv(b))
    saved = {k: v for k, v in system.env.items() if k == "OUTBOX_PGBOUNCER_URL"}
    try:
        wait_until(lambda: _answers(b), 30, "pgbouncer to answer")
        url = b.url(os.environ["OUTBOX_DATABASE_URL"])
        os.environ["OUTBOX_PGBOUNCER_URL"] = system.env["OUTBOX_PGBOUNCER_URL"] = url
        reload_settings()
        through = commit.bench_commit_clients(n, clients=(4,))
        watch = _Watch(b)
        watch.start()
        try:
            d = delivery.bench_delivery(system, n, r)
        finally:
            watch.done.set()
            watch.join(5)
            _stop_workers(system)
    finally:
        os.environ.pop("OUTBOX_PGBOUNCER_URL", None)
        system.env.pop("OUTBOX_PGBOUNCER_URL", None)
        system.env.update(saved)
        reload_settings()
        system.procs.pop("pgbouncer", None)
        proc.stop(signal.SIGTERM)
    out.update({
        # The outbox through PgBouncer over raw psycopg straight to PostgreSQL, measured right beside it (the
        # baseline as in the direct step).
        "commit_ratio_4_clients_pgbouncer": through["commit_per_s_4"] / through["commit_raw_per_s_4"],
        "commit_per_s_4_pgbouncer": through["commit_per_s_4"],
        "e2e_events_per_s_pgbouncer": d["outbox_deliveries_per_s"],
        "e2e_ratio_pgbouncer_vs_direct": d["outbox_deliveries_per_s"] / out["pgbouncer_direct_e2e_events_per_s"],
        "pgbouncer_server_connections_max": float(watch.servers),
        "pgbouncer_client_connections_max": float(watch.clients),
        "pgbouncer_pool_size": float(b.pool_size)})
    say(f"through PgBouncer: commit ratio {out['commit_ratio_4_clients_pgbouncer']:.2f}, "
        f"{out['e2e_events_per_s_pgbouncer']:.0f} events/s, {watch.clients} clients on {watch.servers} servers")
    return out


def _answers(b: pgbouncer.Bouncer) -> bool:
    try:
        pgbouncer.pools(b, BENCH_DB)
        return True
    except Exception:
        return False
