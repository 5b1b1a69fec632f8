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
projection_gaps=N stream_duplicates=N slot_retained_peak_mb=X slot_catch_up_s=X`."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import psycopg
import redis as redis_lib
import sqlalchemy as sa

from domain.cdc import slot
from jobs import cdc
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
from jobs.drills.chaos.plan import Fault
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import BIN, ROOT, System, fulfilment_env, wait_until

PG_HOME = "chaos-cdc-pg"
LOG_DIR = ROOT / ".run" / "chaos-cdc-logs"
REDIS_DIR = ROOT / ".run" / "chaos-cdc-redis"
DB_NAME = "outbox_chaos_cdc"
TENANT = 42  # the seeded tenant the order commands run as
GROUP = "fulfilment"
ACTOR = "chaos-cdc"  # the events this run committed (the seed's own came before the slot)
EVIDENCE = ROOT / "evidence" / "chaos-cdc.md"
CDC_FAULT_KINDS = ("kill_relay_after_publish", "kill_consumer_after_commit", "kill_relay", "kill_consumer",
                   "restart_redis", "restart_postgres", "relay_down")
REPEATABLE = ("kill_relay_after_publish", "kill_consumer_after_commit", "kill_relay", "kill_consumer",
              "restart_redis", "restart_postgres")
RESTORE_ALLOWANCE_S = 1.5  # a process start or a server start between one fault's end and the next one's beginning
FAULT_EXIT = 86  # what a process armed at a fault point exits with (domain.faults, fulfilment.consume)
ENV = {"FULFILMENT_BLOCK_MS": "100", "FULFILMENT_CONSUMER": "fulfilment-1"}


@dataclass
class CdcRun:
    seed: int
    duration: float
    rate: float
    drain_timeout: float
    timeline: list[str] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)
    faults_done: int = 0
    faults_total: int = 0
    fault_exits: dict[str, int | None] = field(default_factory=dict)  # an armed process's exit code, per fault
    commands: dict[str, int] = field(default_factory=dict)  # "approve committed", "fulfill error", …
    committed_events: int = 0
    lost: int = 0
    duplicate_effects: int = 0
    projection_duplicates: int = 0
    projection_gaps: int = 0
    refusals: int = 0
    stream_entries: int = 0
    stream_duplicates: int = 0
    inbox: dict[str, int] = field(default_factory=dict)
    retained_before_mb: float | None = None  # the slot's retained WAL when the relay was stopped
    retained_peak_mb: float | None = None  # … and at the end of its outage
    behind_peak_mb: float | None = None  # WAL written and not yet confirmed, at the end of the outage
    catch_up_s: float | None = None  # relay back → slot confirmed past everything written while it was down
    drained_s: float | None = None
    unexpected_exits: int = 0  # a relay or consumer that died outside its fault
    slot_survived: bool | None = None  # every PostgreSQL restart kept the slot (None: none happened)
    started_at: float = 0.0  # wall clock when the load started
    missing: list[str] = field(default_factory=list)  # what a lost event was: its aggregate, revision, when

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicate_effects == 0 and self.projection_duplicates == 0
                and self.projection_gaps == 0 and self.refusals == 0 and self.committed_events > 0
                and self.unexpected_exits == 0 and self.slot_survived is not False)

    def result_line(self) -> str:
        def f(x: float | None) -> str:
            return "none" if x is None else f"{x:.2f}"
        return (f"chaos result={'PASS' if self.ok else 'FAIL'} profile=cdc lost={self.lost} "
                f"duplicate_effects={self.duplicate_effects} projection_duplicates={self.projection_duplicates} "
                f"projection_gaps={self.projection_gaps} stream_duplicates={self.stream_duplicates} "
                f"slot_retained_peak_mb={f(self.retained_peak_mb)} slot_catch_up_s={f(self.catch_up_s)}")


def plan_cdc_faults(seed: int, duration: float) -> list[Fault]:
    """Every kind once (more in longer runs), one at a time: each fault's hold and a restore allowance fit before
    the next begins, the slack between them drawn from the seed (none in a run too short for them all: then they
    run back to back past 85 % of it, and the load goes on until the last is restored). The relay's outage lasts a
    quarter of the run, at most a minute."""
    rng = random.Random(seed)
    kinds = list(CDC_FAULT_KINDS) + [rng.choice(REPEATABLE) for _ in range(max(0, round(duration / 10) - 7))]
    rng.shuffle(kinds)
    holds = [min(60.0, max(4.0, 0.25 * duration)) if k == "relay_down" else rng.uniform(0.5, 2.0) for k in kinds]
    start, end = 0.05 * duration, 0.85 * duration
    slack = max(0.0, end - start - sum(holds) - RESTORE_ALLOWANCE_S * len(kinds))
    cuts = sorted(rng.uniform(0.0, slack) for _ in kinds)
    plan, at, used = [], start, 0.0
    for kind, hold, cut in zip(kinds, holds, cuts, strict=True):
        at += cut - used
        used = cut
        target = {"kill_relay_after_publish": "cdc-relay", "kill_relay": "cdc-relay", "relay_down": "cdc-relay",
                  "kill_consumer_after_commit": "fulfilment", "kill_consumer": "fulfilment"}.get(kind, "")
        plan.append(Fault(at, kind, target, hold))
        at += hold + RESTORE_ALLOWANCE_S
    assert {f.kind for f in plan} == set(CDC_FAULT_KINDS), "every kind of fault is in the plan"
    return plan


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


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


class Path_:
    """Where the run's pieces are: our database, the fulfilment service's, the stream, the slot."""

    def __init__(self, env: dict[str, str], redis_port: int) -> None:
        self.ours = env["OUTBOX_DATABASE_URL"]
        self.fulfilment = fulfilment_env(env)["FULFILMENT_DATABASE_URL"]
        self.slot = env.get("OUTBOX_CDC_SLOT", "outbox_cdc")
        self.stream = env.get("OUTBOX_CDC_STREAM", "outbox:cdc:events")
        self.redis_port = redis_port

    def slot_lag(self) -> slot.SlotLag | None:
        try:
            with cdc.connect(self.ours) as c:
                return slot.lag(c, self.slot)
        except psycopg.OperationalError:
            return None

    def slot_from_before(self, lsn: str) -> bool:
        """The slot exists and its restart point is at or before `lsn`: the same slot, not one made since."""
        with cdc.connect(self.ours) as c:
            row = c.execute("SELECT restart_lsn <= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                            (lsn, self.slot)).fetchone()
        return bool(row and row[0])

    def slot_ready(self) -> bool:
        lag = self.slot_lag()
        return lag is not None and lag.confirmed_lsn not in ("", "None")

    def current_lsn(self) -> str:
        with cdc.connect(self.ours) as c:
            row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def confirmed_past(self, lsn: str) -> bool:
        try:
            with cdc.connect(self.ours) as c:
                row = c.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                                "WHERE slot_name = %s", (lsn, self.slot)).fetchone()
            return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    def drained(self) -> bool:
        """Every committed event is in the inbox and the group owes nothing (nothing pending, nothing unread)."""
        try:
            with psycopg.connect(_libpq(self.ours), connect_timeout=2) as c:
                committed = {str(r[0]) for r in c.execute("SELECT event_id FROM outbox_events WHERE actor_ref = %s",
                                                          (ACTOR,))}
            with psycopg.connect(_libpq(self.fulfilment), connect_timeout=2) as f:
                seen = {str(r[0]) for r in f.execute("SELECT event_id FROM inbox")}
            r = redis_lib.Redis(port=self.redis_port, socket_timeout=2)
            try:
                groups = {g["name"].decode(): g for g in cast(list[dict[str, Any]], r.xinfo_groups(self.stream))}
            finally:
                r.close()
        except (psycopg.Error, redis_lib.RedisError):
            return False
        g = groups.get(GROUP)
        return bool(committed) and committed <= seen and g is not None and int(g["pending"]) == 0 \
            and int(g.get("lag") or 0) == 0


class CdcInjector:
    """Applies the plan one fault at a time: inject at its time, hold, restore (waited for) before the next."""

    def __init__(self, run: CdcRun, system: System, pg: OwnedPostgres, rds: OwnedRedis, where: Path_,
                 t0: float, tick: Callable[[], None]) -> None:
        self.run, self.system, self.pg, self.rds, self.where, self.t0 = run, system, pg, rds, where, t0
        self.tick = tick  # progress, while waiting
        self.current: Fault | None = None  # the fault being held or restored now
        self.before_restart = ""  # the WAL position when PostgreSQL was stopped
        self.reported: set[int] = set()  # pids already reported dead

    def _log(self, what: str) -> None:
        say(f"chaos t={now_s(self.t0):6.1f}s fault: {what}", self.run.timeline)

    def _wait_until(self, t: float) -> None:
        while now_s(self.t0) < t:
            self.tick()
            time.sleep(min(0.25, max(0.0, t - now_s(self.t0))))  # the plan's own clock, not a condition

    def play(self, plan: list[Fault]) -> None:
        self.run.faults_total = len(plan)
        for i, f in enumerate(plan):
            self._wait_until(f.at)
            self.run.faults_done += 1
            self.current = f
            self._inject(f)
            self._wait_until(now_s(self.t0) + f.hold)
            self._restore(f, f"{i}:{f.kind}")
            self.current = None

    def unexpected_exits(self) -> None:
        """A process of the path found dead outside its own fault: said once, in the timeline (nothing restarts it)."""
        for name in ("cdc-relay", "fulfilment"):
            p = self.system.procs.get(name)
            held = self.current is not None and self.current.target == name
            if p is None or p.popen is None or p.alive() or held or p.popen.pid in self.reported:
                continue
            self.reported.add(p.popen.pid)
            self.run.unexpected_exits += 1
            self._log(f"{name} exited {p.popen.returncode} on its own (see {LOG_DIR.relative_to(ROOT)}/{name}.log)")

    def _armed(self, name: str, fault: str) -> None:
        if name == "cdc-relay":
            self.system._proc(name, [str(BIN / "outbox"), "cdc-relay"], {"OUTBOX_FAULT": fault})
        else:
            self.system._proc(name, [str(BIN / "python"), "-m", "fulfilment", "consume"],
                              {**fulfilment_env(self.system.env), "FULFILMENT_FAULT": fault})

    def _start(self, name: str) -> None:
        if name == "cdc-relay":
            self.system.cdc_relay()
        else:
            self.system.fulfilment()

    def _inject(self, f: Fault) -> None:
        if f.kind in ("kill_relay_after_publish", "kill_consumer_after_commit"):
            self.system.procs[f.target].stop(signal.SIGKILL)
            point = cdc.FAULT_POINT if f.target == "cdc-relay" else "after_commit_before_ack"
            self._armed(f.target, point)
            self._log(f"{f.target} restarted armed at {point} (it dies there at its first batch)")
        elif f.kind in ("kill_relay", "kill_consumer"):
            self.system.procs[f.target].stop(signal.SIGKILL)
            self._log(f"SIGKILL {f.target} (restart in {f.hold:.1f}s)")
        elif f.kind == "relay_down":
            self.system.procs[f.target].stop()
            lag = self.where.slot_lag()
            self.run.retained_before_mb = lag.retained_bytes / 2**20 if lag else None
            self._log(f"cdc-relay stopped for {f.hold:.1f}s (slot retains "
                      f"{lag.retained_bytes / 2**20 if lag else float('nan'):.2f} MB)")
        elif f.kind == "restart_redis":
            self.rds.stop()
            self._log("redis-server SIGKILLed (the stream is in its append-only file)")
        elif f.kind == "restart_postgres":
            t = now_s(self.t0)
            self.before_restart = self.where.current_lsn()
            self.pg.stop("fast")
            self._log(f"PostgreSQL stopped (pg_ctl stop -m fast, took {now_s(self.t0) - t:.1f}s)")

    def _restore(self, f: Fault, key: str) -> None:
        if f.kind in ("kill_relay_after_publish", "kill_consumer_after_commit"):
            proc = self.system.procs[f.target]
            code = proc.wait_exit(30)
            if code is None:  # nothing came for it to die on within the deadline
                proc.stop(signal.SIGKILL)
            self.run.fault_exits[key] = code
            self._start(f.target)
            self._log(f"{f.target} armed process exited {code} "
                      f"({'at the fault point' if code == FAULT_EXIT else 'NOT at the fault point'}); restarted")
        elif f.kind in ("kill_relay", "kill_consumer"):
            self._start(f.target)
            self._log(f"{f.target} restarted")
        elif f.kind == "relay_down":
            lag = self.where.slot_lag()
            lsn = self.where.current_lsn()
            if lag is not None:
                self.run.retained_peak_mb = max(self.run.retained_peak_mb or 0.0, lag.retained_bytes / 2**20)
                self.run.behind_peak_mb = max(self.run.behind_peak_mb or 0.0, lag.behind_bytes / 2**20)
            back = now_s(self.t0)
            self._start(f.target)
            try:
                wait_until(lambda: self.where.confirmed_past(lsn), 120, "the slot to be confirmed past the outage")
                self.run.catch_up_s = now_s(self.t0) - back
            except TimeoutError:
                self._log("cdc-relay back but the slot was not confirmed past the outage within 120 s")
                return
            self._log(f"cdc-relay back: slot retained {self.run.retained_peak_mb or 0:.2f} MB "
                      f"({self.run.behind_peak_mb or 0:.2f} MB not yet relayed) after {f.hold:.1f}s down; "
                      f"confirmed past it {self.run.catch_up_s:.2f}s after the restart")
        elif f.kind == "restart_redis":
            self.rds.start()
            self._log("redis-server started again on its append-only file")
        elif f.kind == "restart_postgres":
            self.pg.start()
            wait_until(self.pg.accepts, 60, "PostgreSQL to accept connections")
            survived = self.where.slot_from_before(self.before_restart)
            self.run.slot_survived = survived and self.run.slot_survived is not False
            self._log(f"PostgreSQL accepting connections again; the slot {'survived' if survived else 'is GONE'} "
                      "(its restart point is still before the stop)")


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
    _report(run)
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
    with psycopg.connect(_libpq(where.ours)) as c:
        rows = c.execute("SELECT event_id, aggregate_id, aggregate_revision, extract(epoch FROM occurred_at) "
                         "FROM outbox_events WHERE actor_ref = %s", (ACTOR,)).fetchall()
    committed = {str(e): (str(a), int(str(r))) for e, a, r, _t in rows}
    occurred = {str(e): float(str(t)) for e, _a, _r, t in rows}
    # The service's own word on itself (its check), and its tables read as an outsider (nothing of ours imports it).
    checked = subprocess.run([str(BIN / "python"), "-m", "fulfilment", "check"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env={**os.environ, "FULFILMENT_DATABASE_URL": where.fulfilment})
    counts = {k: int(v) for k, v in json.loads(checked.stdout.strip().splitlines()[-1]).items()}
    with psycopg.connect(_libpq(where.fulfilment)) as f:
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


def _report(run: CdcRun) -> None:
    print(f"chaos cdc commands {run.commands}")
    print(f"chaos cdc committed events {run.committed_events}; stream entries {run.stream_entries} "
          f"({run.stream_duplicates} duplicates, absorbed by the inbox); inbox {run.inbox}")
    print(f"chaos cdc armed processes' exits {run.fault_exits}; processes dead outside their fault: "
          f"{run.unexpected_exits}")
    for m in run.missing[:20]:
        print(f"chaos cdc lost: {m}")
    print(f"chaos cdc relay outage: slot retained {run.retained_before_mb} MB when stopped, {run.retained_peak_mb} MB "
          f"at its end ({run.behind_peak_mb} MB not relayed); caught up {run.catch_up_s} s after the restart")


def write_cdc_evidence(run: CdcRun, path: Path) -> None:
    lines = [f"# Chaos on the CDC path — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
             f"`outbox chaos --profile cdc --duration {run.duration:g} --seed {run.seed} --evidence`: its own "
             "PostgreSQL cluster (wal_level = logical, wal2json), its own redis-server (appendonly, fsync always), "
             f"`outbox cdc-relay` and `python -m fulfilment consume`; order commands at ≈ {run.rate:g}/s.", "",
             "## Result", "", "```", run.result_line(), "```", "",
             "| figure | value |", "|---|---|",
             f"| events committed | {run.committed_events} |", f"| stream entries | {run.stream_entries} |",
             f"| stream duplicates (absorbed) | {run.stream_duplicates} |", f"| lost | {run.lost} |",
             f"| duplicate effects | {run.duplicate_effects} |",
             f"| projection duplicates | {run.projection_duplicates} |",
             f"| projection gaps | {run.projection_gaps} |", f"| refusals | {run.refusals} |",
             f"| slot retained when the relay stopped | {run.retained_before_mb} MB |",
             f"| slot retained at the end of the outage | {run.retained_peak_mb} MB |",
             f"| catch-up after the relay came back | {run.catch_up_s} s |",
             f"| drained after the load stopped | {run.drained_s} s |", "",
             "## Faults (seeded timeline)", "", "```", *run.timeline, "```", "",
             "## Progress", "", "```", *run.progress, "```", "",
             "## Commands", "", "| command and outcome | count |", "|---|---|",
             *[f"| {k} | {v} |" for k, v in run.commands.items()], ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
