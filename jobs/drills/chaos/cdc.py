"""`outbox chaos --profile cdc`: the change-data-capture path under steady order commands while seeded faults hit it.

It owns what it runs, like the system profile: a PostgreSQL cluster with `wal_level = logical` (wal2json allowed,
`logical_decoding_options`), a redis-server with its append-only file fsynced at every write (the stream must
survive the engine killed outright), the CDC relay (`outbox cdc-relay`) and the fulfilment service (`python -m
fulfilment consume`, its own database on that cluster). A thread of this process commits order commands (approve,
then fulfil: two revisions per order) through the real command. One fault at a time, at times drawn from
`random.Random(seed)`:

- `kill_relay_after_publish`: the relay restarted with `OUTBOX_FAULT=cdc_after_publish_before_confirm` exits after
  its first XADD and before it confirms the slot: the next relay publishes the same events again (duplicates in the
  stream, none in the projection);
- `kill_consumer_after_commit`: the consumer restarted with `FULFILMENT_FAULT=after_commit_before_ack` exits after
  its inbox's commit and before XACK: the redelivery must change nothing;
- `kill_relay`, `kill_consumer`: SIGKILL anywhere, restarted shortly after;
- `restart_redis`: the stream engine SIGKILLed and started again on its append-only file;
- `restart_postgres`: `pg_ctl stop -m fast`, then started again (the slot is on disk and survives);
- `relay_down`: the relay stopped for a quarter of the run (at most a minute): the WAL the slot retains grows, then
  drains once it is back (measured: retained at the end of the outage, seconds until the slot is confirmed past
  what was written while it was down).

Then the load stops, the stream is drained (deadline) and counted against every event committed in
`outbox_events`. Last line: `chaos result=PASS|FAIL profile=cdc lost=N duplicate_effects=N projection_duplicates=N
projection_gaps=N stream_duplicates=N slot_retained_peak_mb=X slot_catch_up_s=X`.

This module owns the system and runs it (the order load, the drain, the counts); the plan and its injector are
`cdc_plan.py`'s, the probes of the slot, the inbox and the stream `cdc_probes.py`'s, the record and the evidence
`cdc_report.py`'s."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import psycopg
import redis as redis_lib
import sqlalchemy as sa

from jobs.drills.chaos.cdc_plan import CdcInjector, plan_cdc_faults
from jobs.drills.chaos.cdc_probes import ACTOR, Path_, libpq
from jobs.drills.chaos.cdc_report import CdcRun, print_report, write_cdc_evidence
from jobs.drills.chaos.owned import (
    OwnedPostgres,
    OwnedRedis,
    cluster_home,
    free_port,
    logical_decoding_options,
    now_s,
    remove_cluster_home,
    say,
)
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import BIN, ROOT, System, wait_until

PG_HOME = "chaos-cdc-pg"
LOG_DIR = ROOT / ".run" / "chaos-cdc-logs"
REDIS_DIR = ROOT / ".run" / "chaos-cdc-redis"
DB_NAME = "outbox_chaos_cdc"
TENANT = 42  # the seeded tenant the order commands run as
ENV = {"FULFILMENT_BLOCK_MS": "100", "FULFILMENT_CONSUMER": "fulfilment-1"}


class OrderLoad:
    """Order commands at about `rate` per second from one thread with its own seeded generator: a new order
    approved (revision 2), or an approved one fulfilled (revision 3). A command that fails (PostgreSQL restarting)
    is counted and the load goes on; what was committed is read back from `outbox_events` at the end."""

    def __init__(self, seed: int, rate: float) -> None:
        self.rng = random.Random(f"{seed}:cdc-load")
        self.rate = rate
        self.tally: dict[str, int] = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="cdc-load")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)

    def _note(self, what: str) -> None:
        self.tally[what] = self.tally.get(what, 0) + 1

    def _run(self) -> None:
        from domain.db import UnitOfWork
        from domain.orders.commands import Committed, execute_order_command

        approved: list[int] = []
        while not self.stop_event.is_set():
            fulfil = bool(approved) and self.rng.random() < 0.45
            command = "fulfill" if fulfil else "approve"
            try:
                if fulfil:
                    oid = approved.pop(self.rng.randrange(len(approved)))
                else:
                    with UnitOfWork() as uow:
                        oid = int(uow.execute(sa.text(
                            "INSERT INTO orders (tenant_id, status, revision, base_revision, customer_ref, "
                            "amount_cents, currency) VALUES (:t, 'authorized', 1, 1, 'cust-001', :a, 'EUR') "
                            "RETURNING id"), {"t": TENANT, "a": self.rng.randrange(500, 50_000)}).scalar_one())
                        uow.commit()
                done = execute_order_command(tenant_id=TENANT, order_id=oid, command=command,
                                             expected_revision=2 if fulfil else 1, actor_ref=ACTOR,
                                             request_id=f"chaos-cdc-{oid}-{command}")
                if isinstance(done, Committed):
                    self._note(f"{command} committed")
                    if not fulfil:
                        approved.append(oid)
                else:
                    self._note(f"{command} {type(done).__name__}")
            except (sa.exc.SQLAlchemyError, psycopg.Error) as e:  # PostgreSQL restarting: the outcome is read back
                self._note(f"{command} {type(e).__name__}")
                self.stop_event.wait(0.2)
            self.stop_event.wait(self.rng.expovariate(self.rate))  # pacing between commands


@contextmanager
def owned_cdc_system(ports: dict[str, int]) -> Iterator[tuple[System, OwnedPostgres, OwnedRedis]]:
    """The logical-decoding cluster, the durable Redis, the CDC relay and the fulfilment service; all of it
    stopped and removed on the way out, whatever happened (the Redis files too)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(REDIS_DIR, ignore_errors=True)  # a stream left by an earlier run is not this run's
    pg = OwnedPostgres(ports["postgres"], cluster_home(PG_HOME) / "pg", logical_decoding_options())
    rds = OwnedRedis(ports["redis"], appendonly=True, workdir=REDIS_DIR, logfile=LOG_DIR / "redis.log")
    system: System | None = None
    try:
        pg.init()
        pg.start()
        rds.start()
        for k in [k for k in os.environ if k.startswith("FULFILMENT_")]:  # the service gets ours, derived
            del os.environ[k]
        os.environ.update({"OUTBOX_DATABASE_URL": f"{pg.url}/{DB_NAME}",
                           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{rds.port}/0"})
        isolated_environment(DB_NAME, 0, OUTBOX_CDC="1", **ENV)
        system = System(dict(os.environ), LOG_DIR)
        system.cdc_relay()
        system.fulfilment()
        yield system, pg, rds
    finally:
        if system is not None:
            system.stop_all()
        rds.stop()
        pg.stop()
        pg.keep_log(LOG_DIR / "postgres.log")
        remove_cluster_home(PG_HOME)
        shutil.rmtree(REDIS_DIR, ignore_errors=True)


def run_cdc_chaos(duration: float, seed: int, rate: float = 8.0, drain_timeout: float = 90.0,
                  evidence: Path | None = None) -> CdcRun:
    run = CdcRun(seed=seed, duration=duration, rate=rate, drain_timeout=drain_timeout)
    say(f"chaos profile=cdc seed={seed} duration={duration:g}s rate={rate:g}/s (replay: outbox chaos --profile cdc "
        f"--duration {duration:g} --seed {seed})")
    ports: dict[str, int] = {}
    while len(set(ports.values())) < 2:
        ports = {"postgres": free_port(), "redis": free_port()}
    plan = plan_cdc_faults(seed, duration)
    with owned_cdc_system(ports) as (system, pg, rds):
        where = Path_(system.env, rds.port)
        say(f"chaos system up: postgres :{ports['postgres']} (cluster in {pg.base}) wal_level=logical, "
            f"redis :{ports['redis']} appendonly (fsync always), cdc-relay, fulfilment; logs "
            f"{LOG_DIR.relative_to(ROOT)}")
        # Not merely listed: a slot is in pg_replication_slots while it is still being built, and a transaction
        # that commits before it is consistent is never decoded (confirmed_flush_lsn is NULL until then).
        wait_until(where.slot_ready, 60, "the CDC relay's slot to reach its consistent point")
        load = OrderLoad(seed, rate)
        t0 = time.monotonic()
        run.started_at = time.time()
        next_progress = [0.0]

        def tick(phase: str = "load") -> None:
            injector.unexpected_exits()
            if now_s(t0) >= next_progress[0]:
                lag = where.slot_lag()
                say(f"chaos t={now_s(t0):6.1f}s {phase} commands={sum(load.tally.values())} faults="
                    f"{run.faults_done}/{run.faults_total} slot_behind_kb="
                    f"{'?' if lag is None else lag.behind_bytes // 1024}", run.progress)
                next_progress[0] = now_s(t0) + 5.0

        injector = CdcInjector(run, system, pg, rds, where, t0, tick)
        load.start()
        try:
            injector.play(plan)
            injector._wait_until(duration)
        finally:
            load.stop()
        run.commands = dict(sorted(load.tally.items()))
        drain_start = now_s(t0)
        try:
            def drained() -> bool:
                tick("drain")
                return where.drained()

            wait_until(drained, drain_timeout, "the stream to drain")
            run.drained_s = now_s(t0) - drain_start
            say(f"chaos t={now_s(t0):6.1f}s drained in {run.drained_s:.1f}s", run.progress)
        except TimeoutError:
            say(f"chaos t={now_s(t0):6.1f}s drain deadline ({drain_timeout:g}s) passed with events owed",
                run.progress)
        _count(run, where)
    print_report(run)
    if evidence is not None:
        write_cdc_evidence(run, evidence)
        print(f"evidence written to {evidence}")
    print(run.result_line(), flush=True)
    return run


# Applications beyond one per event: an aggregate's applied count over the events of it the inbox applied.
EXTRA_EFFECTS = """
SELECT coalesce(sum(greatest(0, f.applied_events - (SELECT count(*) FROM inbox i WHERE i.outcome = 'applied'
       AND i.tenant_id = f.tenant_id AND i.aggregate_type = f.aggregate_type AND i.aggregate_id = f.aggregate_id))),
       0) FROM fulfilments f"""


def _count(run: CdcRun, where: Path_) -> None:
    with psycopg.connect(libpq(where.ours)) as c:
        rows = c.execute("SELECT event_id, aggregate_id, aggregate_revision, extract(epoch FROM occurred_at) "
                         "FROM outbox_events WHERE actor_ref = %s", (ACTOR,)).fetchall()
    committed = {str(e): (str(a), int(str(r))) for e, a, r, _t in rows}
    occurred = {str(e): float(str(t)) for e, _a, _r, t in rows}
    # The service's own word on itself (its check), and its tables read as an outsider (nothing of ours imports it).
    checked = subprocess.run([str(BIN / "python"), "-m", "fulfilment", "check"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env={**os.environ, "FULFILMENT_DATABASE_URL": where.fulfilment})
    counts = {k: int(v) for k, v in json.loads(checked.stdout.strip().splitlines()[-1]).items()}
    with psycopg.connect(libpq(where.fulfilment)) as f:
        seen = {str(r[0]) for r in f.execute("SELECT event_id FROM inbox")}
        extra = f.execute(EXTRA_EFFECTS).fetchone()
        projected = {str(a): int(str(r)) for a, r in f.execute(
            "SELECT aggregate_id, revision FROM fulfilments WHERE aggregate_type = 'order'")}
    r = redis_lib.Redis(port=where.redis_port)
    try:
        ids = [fields[b"id"] for _id, fields in cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(where.stream))]
    finally:
        r.close()
    newest: dict[str, int] = {}
    for aggregate, revision in committed.values():
        newest[aggregate] = max(revision, newest.get(aggregate, 0))
    behind = sum(1 for a, rev in newest.items() if projected.get(a) != rev)  # projected short of its last revision
    run.committed_events = len(committed)
    run.lost = len(set(committed) - seen)
    run.missing = [f"{e} order {committed[e][0]} revision {committed[e][1]} committed at "
                   f"t={occurred[e] - run.started_at:.1f}s" for e in sorted(set(committed) - seen)]
    run.duplicate_effects = int(str(extra[0])) if extra else 0
    run.projection_duplicates = counts["projected_twice"]
    run.projection_gaps = counts["open_gaps"] + counts["parked"] + behind
    run.refusals = counts["refusals"]
    run.stream_entries, run.stream_duplicates = len(ids), len(ids) - len(set(ids))
    run.inbox = counts
