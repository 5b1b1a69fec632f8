"""A replica promotion (issue 19, item 5): `outbox replica-drill` runs the system against a primary and its streaming
standby (jobs/drills/replica_pg.py) through ONE database URL naming both hosts with
`target_session_attrs=read-write`, drives steady approvals (each a webhook on the high lane and an email on the
normal lane), stops the primary hard (`pg_ctl stop -m immediate`), promotes the standby and measures:

* `replica_rto_s`: seconds from the primary's stop until a webhook approved after it is delivered and marked sent
  through the promoted standby (nobody restarts or reconfigures a process: every connection finds the new primary);
* `replica_rpo_events`: approvals the primary acknowledged before its stop that the promoted standby does not have
  (asynchronous streaming: whatever was not yet replayed); a second pass with a synchronous standby (`_sync` keys);
* `replica_invariants_ok`: `outbox check` on the promoted database after the drain, and no effect doubled at the
  receiver (its database is on a third cluster: the outside world does not fail over with ours).

Keys merged into evidence/bench.json (and a section of evidence/bench.md) only with `--evidence`."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.ledger.metering import top_up
from domain.orders.commands import Committed, execute_order_command
from domain.settings import reload_settings
from jobs.drills.chaos.owned import free_port
from jobs.drills.replica_pg import Cluster, Clusters, owned_clusters
from jobs.drills.replica_report import write_evidence
from jobs.ops.checks import RECEIVER_INVARIANT, all_invariants
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, stop_on_sigterm, wait_until, wait_worker_ready

_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
DB_NAME, REDIS_DB, TENANT = "outbox_replica", 8, 42
DRILL_ENV = {"OUTBOX_SCAN_INTERVAL": "0.5", "OUTBOX_LEASE_SECONDS": "5", "OUTBOX_BACKOFF_BASE": "0.2",
             "OUTBOX_BACKOFF_CAP": "2.0", "OUTBOX_MAX_ATTEMPTS": "50"}
FLOWED_SQL = ("SELECT count(*) FROM notifications WHERE channel = 'webhook' AND status IN ('SENT', 'DELIVERED') "
              "AND created_at > to_timestamp(%s)")


def say(line: str) -> None:
    print(f"replica drill: {line}", flush=True)


class Producer:
    """`rate` approvals a second through the real command, each with its event id minted here; it keeps the ones
    PostgreSQL acknowledged (the recovery point is counted among them) and goes on through the failover."""

    def __init__(self, rate: float) -> None:
        self.rate, self.errors = rate, 0
        self.acked: list[tuple[float, str]] = []  # (monotonic time of the answer, event id)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="producer")

    def _run(self) -> None:
        while not self.stop_event.is_set():
            t = time.monotonic()
            try:
                with UnitOfWork() as uow:
                    oid = int(uow.execute(sa.text(
                        "INSERT INTO orders (tenant_id, status, revision, base_revision, customer_ref, amount_cents, "
                        "currency) VALUES (:t, 'authorized', 1, 1, 'cust-001', 100, 'EUR') RETURNING id"),
                        {"t": TENANT}).scalar_one())
                    uow.commit()
                event_id = uuid.uuid4()
                res = execute_order_command(tenant_id=TENANT, order_id=oid, command="approve", expected_revision=1,
                                            actor_ref="replica-drill", request_id=f"replica-{event_id}",
                                            event_id=event_id)
                if isinstance(res, Committed):
                    self.acked.append((time.monotonic(), str(event_id)))
            except Exception:  # PostgreSQL is down or read-only for a moment: that is the drill
                self.errors += 1
            self.stop_event.wait(max(0.0, 1 / self.rate - (time.monotonic() - t)))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)


def _flowed(standby: Cluster, db: str, since_wall: float) -> bool:
    try:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{standby.port}/{db}", connect_timeout=1) as c:
            row = c.execute(FLOWED_SQL, (since_wall,)).fetchone()
            return bool(row and row[0])
    except psycopg.Error:
        return False


def _owed() -> int:
    with UnitOfWork() as uow:
        return int(uow.execute(sa.text("SELECT count(*) FROM notifications WHERE status = 'QUEUED'")).scalar_one())


def run_pass(sync: bool, load: float, after: float, rate: float) -> dict[str, Any]:
    """One primary, one standby, one failover; everything it started is stopped and removed on the way out."""
    k = "_sync" if sync else ""
    res: dict[str, Any] = {}
    with owned_clusters(_SLOT, sync) as cs:
        receiver_port, api_port = free_port(), free_port()
        receiver_url = f"http://127.0.0.1:{receiver_port}"
        os.environ["OUTBOX_DATABASE_URL"] = f"postgresql+psycopg://postgres@127.0.0.1:{cs.primary.port}/postgres"
        isolated_environment(DB_NAME, REDIS_DB, OUTBOX_RECEIVER_URL=receiver_url,
                             OUTBOX_APP_URL=f"http://127.0.0.1:{api_port}", **DRILL_ENV)
        os.environ["OUTBOX_DATABASE_URL"] = cs.url(DB_NAME)  # from here on, both hosts
        os.environ["RECEIVER_DATABASE_URL"] = \
            f"postgresql+psycopg://postgres@127.0.0.1:{cs.outside.port}/{DB_NAME}_receiver"
        reload_settings()
        top_up(TENANT, 100_000_000, f"replica-drill{k}", "replica-drill")  # the emails must never stop for money
        system = System(dict(os.environ), ROOT / ".run" / "replica-logs")
        producer = Producer(rate)
        try:
            system.receiver(receiver_port, reset=True)
            system.api(api_port)
            system.relay()
            r = redis_lib.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
            for lane in ("high", "normal"):
                system.worker(lane)
                wait_worker_ready(r, lane, 90)
            r.close()
            say(f"system up on {cs.url(DB_NAME)}; {rate:g} approvals/s for {load:g} s")
            producer.thread.start()
            time.sleep(load)  # the steady load before the failure, as long as asked
            res.update(_failover(cs, producer, k))
            time.sleep(after)  # load goes on through the promoted standby
            producer.stop()
            wait_until(lambda: _owed() == 0, 120, "nothing owed on the promoted standby")
            res.update(_afterwards(cs, producer, receiver_url, res.pop("_acked_before"), k))
        finally:
            producer.stop()
            system.stop_all()
    return res


def _failover(cs: Clusters, producer: Producer, k: str) -> dict[str, Any]:
    lag = cs.lag_bytes()
    kill_wall, t_kill = time.time(), time.monotonic()
    cs.primary.stop("immediate")
    acked_before = [e for _, e in producer.acked]  # every answer so far came before the stop returned
    t_stopped = time.monotonic()
    say(f"primary stopped hard after {len(acked_before)} approvals (replay lag {lag} bytes); promoting the standby")
    cs.standby.promote()
    t_promoted = time.monotonic()
    wait_until(lambda: _flowed(cs.standby, DB_NAME, kill_wall), 120, "deliveries through the promoted standby")
    rto = time.monotonic() - t_kill
    say(f"promoted in {t_promoted - t_stopped:.2f} s; a webhook approved after the stop delivered {rto:.2f} s "
        f"after it ({producer.errors} failed attempts to approve meanwhile)")
    return {f"replica_rto_s{k}": round(rto, 2), f"replica_promote_s{k}": round(t_promoted - t_stopped, 2),
            f"replica_lag_bytes_at_stop{k}": lag, "_acked_before": acked_before}


def _afterwards(cs: Clusters, producer: Producer, receiver_url: str, acked_before: list[str],
                k: str) -> dict[str, Any]:
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{cs.standby.port}/{DB_NAME}") as c:
        present = {str(r[0]) for r in c.execute("SELECT event_id FROM outbox_events WHERE event_id::text = ANY(%s)",
                                                (acked_before,))}
        webhooks = [str(r[0]) for r in c.execute("SELECT event_id FROM notifications WHERE channel = 'webhook' "
                                                 "AND event_id IS NOT NULL")]
    lost = [e for e in acked_before if e not in present]
    with httpx.Client(base_url=receiver_url, timeout=10) as h:
        effects = {e: int(h.get(f"/effects/{e}").json()["effects"]) for e in [*webhooks, *lost]}
    invariants = all_invariants(receiver_url)
    doubled = max(sum(max(0, n - 1) for n in effects.values()), invariants.get(RECEIVER_INVARIANT) or 0)
    missing = sum(1 for e in webhooks if effects[e] == 0)
    ok = all(v == 0 for v in invariants.values()) and doubled == 0 and missing == 0
    say(f"{len(lost)} of {len(acked_before)} acknowledged approvals missing on the promoted standby "
        f"({sum(1 for e in lost if effects[e])} of them delivered before the stop); invariants "
        f"{'hold' if ok else 'BROKEN'}: doubled {doubled}, webhooks never delivered {missing}"
        + ("" if ok else f"; {json.dumps(invariants)}"))
    return {f"replica_rpo_events{k}": len(lost), f"replica_acked_before_stop{k}": len(acked_before),
            f"replica_lost_but_delivered{k}": sum(1 for e in lost if effects[e]),
            f"replica_approvals{k}": len(producer.acked), f"replica_webhooks_delivered{k}": len(webhooks) - missing,
            f"replica_doubled_effects{k}": doubled, f"replica_invariants_ok{k}": ok}


def run_replica_drill(load: float = 20.0, after: float = 5.0, rate: float = 20.0, sync: bool = True,
                      evidence: bool = False) -> dict[str, Any]:
    stop_on_sigterm()  # SIGTERM stops every process and cluster this drill started, like Ctrl-C
    res: dict[str, Any] = {"measured_at": datetime.now(UTC).isoformat(), "load_s": load, "rate_per_s": rate,
                           "load_avg_1m_start": os.getloadavg()[0]}
    res.update(run_pass(False, load, after, rate))
    if sync:
        res.update(run_pass(True, load, after, rate))
    res["replica_invariants_ok"] = all(v for key, v in res.items() if key.startswith("replica_invariants_ok"))
    res["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(res, indent=2))
    if evidence:
        write_evidence(res)
    ok = res["replica_invariants_ok"]
    print(f"replica result={'PASS' if ok else 'FAIL'} rto_s={res['replica_rto_s']} "
          f"rpo_events={res['replica_rpo_events']} doubled={res['replica_doubled_effects']} "
          f"delivered_after={res['replica_webhooks_delivered']}", flush=True)
    return res
