"""`outbox chaos --duration S --seed N`: the whole system under steady load while seeded faults hit it.

It owns everything it runs, next to the demo and a test run: a PostgreSQL cluster under `.run/chaos-pg/` (initdb +
pg_ctl, as the `postgres` user when run as root), its own Redis server, the receiver, the HTTP API (the dashboard's
backend for /api/v1; the Reflex build is too slow to restart inside a short run), the relay and two workers per
lane (one critical), each on a free port. Load goes through the API: order approvals, sends, one-time codes, lead
events, and one campaign. At times drawn from `random.Random(seed)` it SIGKILLs a worker, the relay, the receiver
and the API (restarting each shortly after), SIGSTOPs a worker past its lease and resumes it, FLUSHALLs Redis,
turns on the receiver's fault switches for a few seconds (webhooks slower than a lease, 503s, effects applied with
the answer lost) and restarts PostgreSQL. Then it stops the load, drains (with a deadline) and counts:

- lost: an accepted request or committed row whose message never happened (still owed after the drain, FAILED,
  missing, a webhook with no receiver effect, a "sent" message the provider never received);
- duplicate_effects: more than one receiver effect for one (event_id, effect_type);
- invariants_broken: every `outbox check` invariant, the receiver's included (unchecked counts as broken);
- money_mismatch: balances vs their entries, sent rows vs their charge, unsent rows still charged;
- restart_recovery_s: from PostgreSQL accepting connections again until steady delivery (campaign rows apart) is
  back to 95 % of its rate before the restart, sampled every 0.25 s from a side connection.

Last line: `chaos result=PASS|FAIL lost=N duplicate_effects=N invariants_broken=N money_mismatch=N
restart_recovery_s=X`. Everything started is stopped at the end (process groups), on Ctrl-C and errors too; only
`.run/` is written, and `evidence/chaos.md` when asked.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis as redis_lib
import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.delivery.queue import LANES
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from jobs.ops.checks import RECEIVER_INVARIANT, all_invariants
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, receiver_database_url, wait_until, wait_worker_ready

PG_DIR = ROOT / ".run" / "chaos-pg"
LOG_DIR = ROOT / ".run" / "chaos-logs"
EVIDENCE = ROOT / "evidence" / "chaos.md"
DB_NAME = "outbox_chaos"
TENANT = 7  # its seeded recipients have no quiet hours: nothing is legitimately held past the drain
LEASE_SECONDS = 3.0
SAMPLE_EVERY = 0.25
RATE_BEFORE_S, RATE_WINDOW_S, RECOVERED_SHARE = 4.0, 3.0, 0.95
FAULT_KINDS = ("kill_worker", "kill_relay", "kill_receiver", "kill_api", "stop_worker", "flush_redis",
               "receiver_faults")
# The receiver's own switch board (development): webhooks slower than a lease, then 503s, effects applied with the
# answer lost (hang, dropped connection) — attempts whose outcome arrives after their lease ran out.
RECEIVER_FAULTS = {"slow_seconds": LEASE_SECONDS + 1.0, "fail_503": 6, "accept_then_hang": 2, "accept_then_drop": 2}
FINAL = ("SENT", "DELIVERED", "SUPPRESSED")
# The knobs every process of the run shares: short leases and scans so a 30 s run sees recovery, many attempts with
# a short backoff so a receiver down for seconds delays messages instead of failing them, journeys 600x faster,
# and a bulk pace slow enough that the campaign keeps the bulk workers busy for seconds (a stall catches them mid-send).
CHAOS_ENV = {"OUTBOX_LEASE_SECONDS": str(LEASE_SECONDS), "OUTBOX_SCAN_INTERVAL": "0.5", "OUTBOX_MAX_ATTEMPTS": "50",
             "OUTBOX_BACKOFF_BASE": "0.2", "OUTBOX_BACKOFF_CAP": "2.0", "OUTBOX_TIME_SCALE": "600",
             "OUTBOX_API_RATE": "100000", "OUTBOX_BULK_RATE": "20"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def now_s(t0: float) -> float:
    return time.monotonic() - t0


# ---- the cluster and the Redis server this run owns ------------------------------------------------------------

@dataclass
class OwnedPostgres:
    """A cluster under `.run/chaos-pg/` on its own port; never the system one."""

    port: int
    base: Path = PG_DIR

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
        if not bindir:
            raise RuntimeError("PostgreSQL is not installed: run 'sudo apt-get install -y postgresql'")
        cmd = [str(bindir[-1] / argv[0]), *argv[1:]]
        if os.geteuid() == 0:  # initdb and the server refuse to run as root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "postgres", str(self.base)], check=True)
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust")
        if (self.data / "postmaster.pid").exists():  # a previous run that was killed outright
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", f"-p {self.port} -h 127.0.0.1 -k {self.base}",
                  "-l", str(self.base / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def accepts(self) -> bool:
        try:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=1):
                return True
        except psycopg.Error:
            return False


@dataclass
class OwnedRedis:
    port: int
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        workdir = ROOT / ".run" / "chaos-redis"
        workdir.mkdir(parents=True, exist_ok=True)
        with open(LOG_DIR / "redis.log", "ab") as log:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                 "no", "--dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        r = redis_lib.Redis(port=self.port)
        wait_until(lambda: _pings(r), 20, f"redis-server on port {self.port}")
        r.close()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def _pings(r: redis_lib.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis_lib.RedisError:
        return False


# ---- the fault plan --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load started
    kind: str
    target: str  # a process name ('' for Redis and PostgreSQL)
    hold: float  # seconds until it is restarted / resumed / PostgreSQL starts again


def worker_names() -> list[str]:
    """Two workers per lane (a stalled or killed one leaves another to claim its rows), one for codes."""
    return [f"worker-{lane}-{i}" for lane in LANES for i in (1, 2) if lane != "critical" or i == 1]


def plan_faults(seed: int, duration: float) -> list[Fault]:
    """Every kind at least once (more in longer runs), PostgreSQL restarted once near the middle with a quiet
    zone around it, so the rate before it and the recovery after it are measured on a steady system."""
    rng = random.Random(seed)
    workers = worker_names()
    pg_at = rng.uniform(0.45, 0.55) * duration
    quiet = (pg_at - RATE_BEFORE_S - 4.0, pg_at + RATE_WINDOW_S + 4.0)
    kinds = list(FAULT_KINDS) + [rng.choice(FAULT_KINDS) for _ in range(max(0, round(duration / 10) - 7))]
    rng.shuffle(kinds)
    busy: dict[str, list[tuple[float, float]]] = {}
    plan = [Fault(pg_at, "restart_postgres", "", rng.uniform(0.5, 1.5))]
    for kind in kinds:
        hold = 0.0 if kind == "flush_redis" else (
            LEASE_SECONDS + rng.uniform(1.0, 2.0) if kind in ("stop_worker", "receiver_faults")
            else rng.uniform(1.0, 3.0))
        for tries in range(2000):
            at = rng.uniform(0.05 * duration, 0.95 * duration - hold)
            if quiet[0] - hold <= at <= quiet[1] and tries < 1000:  # a short run may have to give the zone up
                continue
            if kind == "stop_worker":  # stall one of a pair, so the other can take its rows over
                target = rng.choice([w for w in workers if not w.endswith("critical-1")])
            else:
                target = {"kill_worker": rng.choice(workers), "kill_relay": "relay", "kill_receiver": "receiver",
                          "kill_api": "api"}.get(kind, "")
            if target and any(at - 0.5 <= b and a <= at + hold + 0.5 for a, b in busy.get(target, [])):
                continue
            busy.setdefault(target, []).append((at, at + hold))
            plan.append(Fault(at, kind, target, hold))
            break
    assert {f.kind for f in plan} == {*FAULT_KINDS, "restart_postgres"}, "every kind of fault is in the plan"
    return sorted(plan, key=lambda f: f.at)


# ---- load ------------------------------------------------------------------------------------------------------

@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: Counter[str] = field(default_factory=Counter)  # "approve 200", "send ConnectError", …
    notification_ids: set[int] = field(default_factory=set)  # accepted sends and codes
    event_ids: set[str] = field(default_factory=set)  # accepted approvals

    def note(self, what: str, answer: str) -> None:
        with self.lock:
            self.answers[f"{what} {answer}"] += 1

    @property
    def accepted(self) -> int:
        return sum(n for k, n in self.answers.items() if k.split()[-1] in ("200", "201", "202"))

    @property
    def refused(self) -> int:
        return sum(self.answers.values()) - self.accepted


class Load:
    """Client threads driving the API at about `rate` requests per second in total; each thread has its own
    seeded generator. Refusals and connection errors (the API is killed, PostgreSQL restarts) are counted and
    the load goes on; only what the API accepted is tracked."""

    def __init__(self, api: str, key: str, seed: int, recipients: list[tuple[int, str]], rate: float,
                 threads: int = 2) -> None:
        self.api, self.key, self.seed, self.recipients = api, key, seed, recipients
        self.pause = threads / rate
        self.tally = Tally()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True, name=f"load-{i}")
                        for i in range(threads)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def _run(self, i: int) -> None:
        rng = random.Random(f"{self.seed}:load:{i}")
        leads: dict[str, Any] = {"id": None, "step": 0}
        actions: list[tuple[Callable[[httpx.Client, random.Random, dict[str, Any]], None], float]] = [
            (self._approve, 3), (self._send, 3), (self._otp, 1.5), (self._lead_event, 2.5)]
        with httpx.Client(base_url=self.api, headers={"Authorization": f"Bearer {self.key}"}, timeout=5) as c:
            while not self.stop_event.is_set():
                action = rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
                try:
                    action(c, rng, leads)
                except httpx.HTTPError as exc:
                    self.tally.note(action.__name__.strip("_"), type(exc).__name__)
                self.stop_event.wait(rng.expovariate(1 / self.pause))  # pacing between load steps

    def _post(self, c: httpx.Client, what: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        r = c.post(path, json=body)
        self.tally.note(what, str(r.status_code))
        answer: dict[str, Any] | None = r.json() if r.status_code in (200, 201, 202) else None
        return answer

    def _approve(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        _rid, ref = rng.choice(self.recipients)
        order = self._post(c, "create_order", "/api/v1/orders",
                           {"customer_ref": ref, "amount_cents": rng.randrange(500, 50_000), "currency": "EUR"})
        if order is None:
            return
        done = self._post(c, "approve", f"/api/v1/orders/{order['order_id']}/approve",
                          {"expected_revision": order["revision"], "request_id": f"chaos-{uuid.uuid4().hex}"})
        if done is not None:
            with self.tally.lock:
                self.tally.event_ids.add(str(done["event_id"]))

    def _track(self, answer: dict[str, Any] | None) -> None:
        if answer is not None:
            with self.tally.lock:
                self.tally.notification_ids.add(int(answer["notification_id"]))

    def _send(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        rid, _ref = rng.choice(self.recipients)
        self._track(self._post(c, "send", "/api/v1/notifications", {
            "recipient_id": rid, "channel": rng.choice(("email", "sms", "whatsapp")), "template": "offer",
            "lane": rng.choice(("high", "normal", "bulk")), "data": {"headline": "Chaos offer"},
            "subject_period": f"chaos-{uuid.uuid4().hex}"}))

    def _otp(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        rid, _ref = rng.choice(self.recipients)
        self._track(self._post(c, "otp", "/api/v1/otp", {"recipient_id": rid,
                                                         "channel": rng.choice(("sms", "whatsapp"))}))

    def _lead_event(self, c: httpx.Client, rng: random.Random, lead: dict[str, Any]) -> None:
        """Each thread walks one lead at a time forward through the funnel (with lifecycle events between);
        a lead at the end of the funnel is replaced by a new one."""
        if lead["id"] is None or lead["step"] >= len(JOURNEY_STEPS):
            _rid, ref = rng.choice(self.recipients)
            made = self._post(c, "new_lead", "/api/v1/leads", {"recipient_ref": ref, "advisor_ref": "chaos-advisor"})
            if made is None:
                return
            lead.update(id=made["lead_id"], step=0)
        event = rng.choice(LIFECYCLE_EVENTS) if rng.random() < 0.2 else JOURNEY_STEPS[lead["step"]]
        if self._post(c, "lead_event", f"/api/v1/leads/{lead['id']}/events",
                      {"event": event, "event_id": f"chaos-{uuid.uuid4().hex}"}) is not None \
                and event in JOURNEY_STEPS:
            lead["step"] += 1


# ---- the side connection that watches delivery -----------------------------------------------------------------

SAMPLE_SQL = ("SELECT count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED')), "
              "count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED') AND campaign_id IS NULL), "
              "count(*) FILTER (WHERE status = 'QUEUED') FROM notifications")


@dataclass(frozen=True)
class Sample:
    t: float
    sent: int
    steady_sent: int  # campaign rows apart: the steady load's own delivery
    owed: int


class Sampler:
    """Every 0.25 s from its own connection (reopened after PostgreSQL restarts): sent, steady sent, owed."""

    def __init__(self, url: str, t0: float) -> None:
        self.url, self.t0 = url.replace("postgresql+psycopg://", "postgresql://"), t0
        self.samples: list[Sample] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self.conn: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        if self.conn is not None:
            self.conn.close()

    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=1)
                row = self.conn.execute(SAMPLE_SQL).fetchone()
                assert row is not None
                self.samples.append(Sample(now_s(self.t0), int(row[0]), int(row[1]), int(row[2])))
            except psycopg.Error:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
            self.stop_event.wait(SAMPLE_EVERY)  # the sampling period


def steady_at(samples: list[Sample], t: float) -> int:
    """Steady rows sent by time t (the last sample at or before it)."""
    before = [s.steady_sent for s in samples if s.t <= t]
    return before[-1] if before else (samples[0].steady_sent if samples else 0)


def recovery_seconds(samples: list[Sample], down_at: float, up_at: float, load_end: float) -> tuple[float, float | None]:
    """(rate before the restart, seconds from PostgreSQL accepting connections until the first window of
    RATE_WINDOW_S starting then delivers at RECOVERED_SHARE of that rate, and not before the first row sent after
    the restart — None if it never did before the load stopped). Resolution: the sampling period."""
    rate_before = (steady_at(samples, down_at) - steady_at(samples, down_at - RATE_BEFORE_S)) / RATE_BEFORE_S
    if rate_before <= 0:
        return rate_before, 0.0
    # Delivery is not back before the first row is sent again (a backlog burst late in a window must not make
    # the window's start look recovered): the answer is never earlier than the first sample that saw one.
    before_down = steady_at(samples, down_at)
    first = next((s.t for s in samples if s.t >= up_at and s.steady_sent > before_down), None)
    if first is None:
        return rate_before, None
    for s in samples:
        if s.t < up_at:
            continue
        if s.t + RATE_WINDOW_S > load_end:
            break
        if (steady_at(samples, s.t + RATE_WINDOW_S) - s.steady_sent) / RATE_WINDOW_S >= RECOVERED_SHARE * rate_before:
            return rate_before, max(0.0, s.t - up_at, first - up_at)
    return rate_before, None


# ---- the run ---------------------------------------------------------------------------------------------------

@dataclass
class Run:
    seed: int
    duration: float
    rate: float
    drain_timeout: float
    ports: dict[str, int] = field(default_factory=dict)
    timeline: list[str] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)
    faults_done: int = 0
    faults_total: int = 0
    pg_down_at: float | None = None
    pg_up_at: float | None = None
    load_end: float = 0.0
    drained_s: float | None = None
    rate_before: float = 0.0
    recovery_s: float | None = None
    lost: dict[str, int] = field(default_factory=dict)
    lost_total: int = 0
    duplicate_effects: int = 0
    invariants: dict[str, int | None] = field(default_factory=dict)
    money: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    suppressed: dict[str, int] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)
    campaign_id: int | None = None

    @property
    def invariants_broken(self) -> int:
        return sum(1 if v is None else v for v in self.invariants.values())

    @property
    def money_mismatch(self) -> int:
        return sum(self.money.values())

    @property
    def ok(self) -> bool:
        return self.lost_total == 0 and self.duplicate_effects == 0 and self.invariants_broken == 0 \
            and self.money_mismatch == 0

    def result_line(self) -> str:
        rec = "none" if self.recovery_s is None else f"{self.recovery_s:.2f}"
        return (f"chaos result={'PASS' if self.ok else 'FAIL'} lost={self.lost_total} "
                f"duplicate_effects={self.duplicate_effects} invariants_broken={self.invariants_broken} "
                f"money_mismatch={self.money_mismatch} restart_recovery_s={rec}")


def say(line: str, into: list[str] | None = None) -> None:
    print(line, flush=True)
    if into is not None:
        into.append(line)


@contextmanager
def owned_system(run: Run) -> Iterator[tuple[System, OwnedPostgres, OwnedRedis]]:
    """Cluster, Redis and every process of the system; all of it is stopped on the way out, whatever happened."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = OwnedPostgres(run.ports["postgres"])
    rds = OwnedRedis(run.ports["redis"])
    system: System | None = None
    try:
        pg.init()
        pg.start()
        rds.start()
        os.environ.update({"OUTBOX_DATABASE_URL": f"{pg.url}/{DB_NAME}",
                           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{rds.port}/0"})
        isolated_environment(DB_NAME, 0, OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{run.ports['receiver']}",
                             OUTBOX_APP_URL=f"http://127.0.0.1:{run.ports['api']}", **CHAOS_ENV)
        system = System(dict(os.environ), LOG_DIR)
        system.receiver(run.ports["receiver"], reset=True)
        system.api(run.ports["api"])
        system.relay()
        r = redis_lib.Redis(port=rds.port)
        for name in worker_names():
            system.worker(name.split("-")[1], name=name)
        for lane in LANES:
            wait_worker_ready(r, lane, 90)
        r.close()
        yield system, pg, rds
    finally:
        if system is not None:
            for p in system.procs.values():  # a stalled worker must run again to hear SIGTERM
                if p.alive() and p.popen is not None:
                    _signal_group(p.popen.pid, signal.SIGCONT)
            system.stop_all()
        rds.stop()
        pg.stop()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class Injector:
    """Applies the plan: each fault at its time, its restart / resume / start `hold` seconds later."""

    def __init__(self, run: Run, system: System, pg: OwnedPostgres, rds: OwnedRedis, t0: float) -> None:
        self.run, self.system, self.pg, self.rds, self.t0 = run, system, pg, rds, t0
        self.steps: list[tuple[float, int, Fault, bool]] = []  # (when, order, fault, restore?)
        self.restoring: set[str] = set()
        self.injected: set[int] = set()
        self.last_back = 0.0  # when the last restarted process was back
        self.closing = False
        self.threads: list[threading.Thread] = []

    def schedule(self, plan: list[Fault]) -> None:
        for i, f in enumerate(plan):
            self.steps += [(f.at, i, f, False), (f.at + f.hold, i, f, True)]
        self.steps.sort(key=lambda s: (s[0], s[1]))
        self.run.faults_total = len(plan)

    def next_at(self) -> float | None:
        return self.steps[0][0] if self.steps else None

    def due(self) -> None:
        """Inject what is due; restores run in their own threads (a process start takes seconds on a busy
        machine and must not hold the next fault back). A target still coming back is hit a moment later."""
        while self.steps and self.steps[0][0] <= now_s(self.t0):
            when, order, fault, restore = self.steps[0]
            if not restore and fault.kind == "restart_postgres" and not self._steady():
                self._postpone(0.5)  # the rate before the restart is measured on a system with nothing down
                continue
            self.steps.pop(0)
            target = "receiver" if fault.kind == "receiver_faults" else fault.target
            if not restore and target in self.restoring:  # hit what is up, not what is still starting
                self.steps.append((when + 0.5, order, fault, restore))
                self.steps.sort(key=lambda s: (s[0], s[1]))
                continue
            if not restore:
                self.injected.add(order)
            if restore:
                self.restoring.add(fault.target)
                t = threading.Thread(target=self._restore, args=(fault,), daemon=True, name=f"restore-{fault.kind}")
                self.threads.append(t)
                t.start()
            else:
                self._inject(fault)

    def _steady(self) -> bool:
        """Nothing coming back and nothing back for less than the window the rate before is measured over (or
        too little of the run left to wait any longer)."""
        t = now_s(self.t0)
        return (not self.restoring and t - self.last_back >= RATE_BEFORE_S + 1.0) \
            or t >= self.run.duration - RATE_WINDOW_S - 8.0

    def _postpone(self, dt: float) -> None:
        """Shift every fault not yet injected (the rest of the plan keeps its spacing)."""
        self.steps = sorted(((w + dt if o not in self.injected else w, o, f, r) for w, o, f, r in self.steps),
                            key=lambda s: (s[0], s[1]))

    def settle(self, timeout: float) -> None:
        """Every restore still pending happens now; wait (deadline) until each is back."""
        self.steps = [(0.0, *s[1:]) for s in self.steps]
        self.due()
        self.join(timeout)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _log(self, what: str) -> None:
        say(f"chaos t={now_s(self.t0):6.1f}s fault: {what}", self.run.timeline)

    def _inject(self, f: Fault) -> None:
        self.run.faults_done += 1
        if f.kind == "flush_redis":
            r = redis_lib.Redis(port=self.rds.port)
            r.flushall()
            r.close()
            self._log("FLUSHALL Redis (every wake-up and in-progress mark gone)")
        elif f.kind == "restart_postgres":
            self.run.pg_down_at = now_s(self.t0)
            self.pg.stop("fast")
            self._log(f"PostgreSQL stopped (pg_ctl stop -m fast, took {now_s(self.t0) - self.run.pg_down_at:.1f}s)")
        elif f.kind == "receiver_faults":
            self._log(f"receiver fault switches {self._switch(RECEIVER_FAULTS)} for {f.hold:.1f}s: "
                      + ", ".join(f"{k}={v:g}" for k, v in RECEIVER_FAULTS.items()))
        elif f.kind == "stop_worker":
            p = self.system.procs[f.target]
            assert p.popen is not None
            _signal_group(p.popen.pid, signal.SIGSTOP)
            self._log(f"SIGSTOP {f.target} for {f.hold:.1f}s (lease {LEASE_SECONDS:.0f}s)")
        else:
            self.system.procs[f.target].stop(signal.SIGKILL)
            self._log(f"SIGKILL {f.target} (restart in {f.hold:.1f}s)")

    def _restore(self, f: Fault) -> None:
        try:
            if not self.closing:  # on the way out (Ctrl-C, an error) nothing new is started
                self._bring_back(f)
        finally:
            self.last_back = now_s(self.t0)
            self.restoring.discard(f.target)

    def _switch(self, faults: dict[str, float]) -> str:
        try:
            r = httpx.post(f"http://127.0.0.1:{self.run.ports['receiver']}/faults", json=faults, timeout=5)
            return "set" if r.status_code == 200 else f"refused ({r.status_code})"
        except httpx.HTTPError as exc:
            return f"not reached ({type(exc).__name__})"

    def _bring_back(self, f: Fault) -> None:
        if f.kind == "flush_redis":
            return
        if f.kind == "receiver_faults":
            self._log(f"receiver fault switches cleared: {self._switch({})}")
            return
        if f.kind == "restart_postgres":
            self.pg.start()
            wait_until(self.pg.accepts, 60, "PostgreSQL to accept connections")
            self.run.pg_up_at = now_s(self.t0)
            self._log(f"PostgreSQL accepting connections again (down {self.run.pg_up_at - (self.run.pg_down_at or 0):.1f}s)")
        elif f.kind == "stop_worker":
            p = self.system.procs[f.target]
            assert p.popen is not None
            _signal_group(p.popen.pid, signal.SIGCONT)
            self._log(f"SIGCONT {f.target}")
        else:
            self._restart(f.target)
            self._log(f"{f.target} restarted")

    def _restart(self, name: str) -> None:
        if name == "relay":
            self.system.relay()
        elif name == "receiver":
            self.system.receiver(self.run.ports["receiver"])
        elif name == "api":
            self.system.api(self.run.ports["api"])
        else:
            self.system.worker(name.split("-")[1], name=name)


def _setup_load(api: str, seed: int) -> tuple[str, list[tuple[int, str]]]:
    """An API key for the tenant and its recipients, made through the API like any client would: no quiet
    hours, no daily cap (what is sent must be sendable now), and an advisor for the leads."""
    from domain.access.auth import create_api_key

    key = create_api_key(TENANT, "chaos")
    out: list[tuple[int, str]] = []
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=10) as c:
        for i in range(60):
            ref = f"chaos-{i:03d}"
            r = c.post("/api/v1/recipients", json={
                "ref": ref, "display_name": f"Chaos {i}", "email": f"{ref}@example.test",
                "phone": f"+1555{seed % 1000:03d}{i:04d}", "timezone": "UTC"})
            r.raise_for_status()
            out.append((int(r.json()["recipient_id"]), ref))
        c.post("/api/v1/recipients", json={"ref": "chaos-advisor", "display_name": "Chaos advisor",
                                           "email": "advisor@example.test", "timezone": "UTC"}).raise_for_status()
    return key, out


def _start_campaign(run: Run, api: str, key: str, deadline: float) -> None:
    """The campaign goes through the API too; while the API or PostgreSQL is down, ask again (deadline)."""
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=5) as c:
        def ask() -> int | None:
            try:
                r = c.post("/api/v1/campaigns", json={"name": f"chaos {run.seed}", "segment": "all_reachable",
                                                      "template": "offer", "channel": "email"})
                return int(r.json()["campaign_id"]) if r.status_code == 202 else None
            except (httpx.HTTPError, ValueError, KeyError):
                return None

        run.campaign_id = wait_until(ask, deadline, "the campaign to be accepted")


def run_chaos(duration: float, seed: int, rate: float = 8.0, drain_timeout: float = 90.0,
              evidence: Path | None = None) -> Run:
    run = Run(seed=seed, duration=duration, rate=rate, drain_timeout=drain_timeout)
    say(f"chaos seed={seed} duration={duration:g}s rate={rate:g}/s (replay: outbox chaos --duration {duration:g} "
        f"--seed {seed})")
    names = ("postgres", "redis", "receiver", "api")
    while len(set(run.ports.values())) < len(names):
        run.ports = {n: free_port() for n in names}
    plan = plan_faults(seed, duration)
    with owned_system(run) as (system, pg, rds):
        api = f"http://127.0.0.1:{run.ports['api']}"
        key, recipients = _setup_load(api, seed)
        say(f"chaos system up: postgres :{run.ports['postgres']} redis :{run.ports['redis']} receiver "
            f":{run.ports['receiver']} api :{run.ports['api']}, {len(system.procs) - 3} workers, relay; "
            f"logs {LOG_DIR.relative_to(ROOT)}")
        load = Load(api, key, seed, recipients, rate)
        t0 = time.monotonic()
        sampler = Sampler(os.environ["OUTBOX_DATABASE_URL"], t0)
        injector = Injector(run, system, pg, rds, t0)
        injector.schedule(plan)
        sampler.start()
        load.start()
        try:
            _drive(run, load, sampler, injector, api, key, t0)
            run.load_end = now_s(t0)
            load.stop()
            injector.settle(120)
            _drain(run, sampler, t0)
            sampler.stop()
            run.answers = dict(sorted(load.tally.answers.items()))
            if run.pg_down_at is not None and run.pg_up_at is not None:
                run.rate_before, run.recovery_s = recovery_seconds(sampler.samples, run.pg_down_at, run.pg_up_at,
                                                                   run.load_end)
            _check(run, load.tally, f"http://127.0.0.1:{run.ports['receiver']}")
        finally:
            injector.closing = True
            injector.join(90)  # a restart in flight finishes before the system is stopped, so none outlives it
            load.stop()
            sampler.stop()
    _report(run)
    if evidence is not None:
        write_evidence(run, evidence)
        print(f"evidence written to {evidence}")
    print(run.result_line(), flush=True)
    return run


def _progress(run: Run, sampler: Sampler, load: Load, t0: float, phase: str) -> None:
    s = sampler.last()
    line = (f"chaos t={now_s(t0):6.1f}s {phase} sent={s.sent if s else '?'} owed={s.owed if s else '?'} "
            f"faults={run.faults_done}/{run.faults_total} api_accepted={load.tally.accepted} "
            f"api_refused_or_failed={load.tally.refused}")
    say(line, run.progress)


def _drive(run: Run, load: Load, sampler: Sampler, injector: Injector, api: str, key: str, t0: float) -> None:
    campaign_at, next_progress = 0.05 * run.duration, 0.0
    while now_s(t0) < run.duration:
        injector.due()
        if run.campaign_id is None and now_s(t0) >= campaign_at:
            _start_campaign(run, api, key, 30)
            say(f"chaos t={now_s(t0):6.1f}s campaign {run.campaign_id} started (all_reachable × offer × email)",
                run.timeline)
        if now_s(t0) >= next_progress:
            _progress(run, sampler, load, t0, "load")
            next_progress = now_s(t0) + 5.0
        upcoming = [x for x in (injector.next_at(), next_progress, run.duration) if x is not None]
        time.sleep(max(0.0, min(0.25, min(upcoming) - now_s(t0))))  # the schedule's own clock, not a condition


def _drain(run: Run, sampler: Sampler, t0: float) -> None:
    """Wait (deadline) until nothing is owed; progress every 5 s."""
    start = now_s(t0)
    deadline = start + run.drain_timeout
    next_progress = start
    while now_s(t0) < deadline:
        s = sampler.last()
        if s is not None and s.t > start and s.owed == 0:
            run.drained_s = now_s(t0) - start
            say(f"chaos t={now_s(t0):6.1f}s drained in {run.drained_s:.1f}s", run.progress)
            return
        if now_s(t0) >= next_progress:
            say(f"chaos t={now_s(t0):6.1f}s drain sent={s.sent if s else '?'} owed={s.owed if s else '?'}",
                run.progress)
            next_progress = now_s(t0) + 5.0
        time.sleep(SAMPLE_EVERY)  # polling the sampler's condition, bounded by the deadline above
    say(f"chaos t={now_s(t0):6.1f}s drain deadline ({run.drain_timeout:g}s) passed with rows still owed",
        run.progress)


# ---- the checks ------------------------------------------------------------------------------------------------

MONEY_SQL = {
    "balance not equal to the sum of its entries": """
        SELECT count(*) FROM balances b WHERE b.balance_cents <> coalesce(
          (SELECT sum(e.amount_cents) FROM balance_entries e WHERE e.tenant_id = b.tenant_id), 0)""",
    "negative balance": "SELECT count(*) FROM balances WHERE balance_cents < 0",
    "sent or delivered row not charged exactly its cost": """
        SELECT count(*) FROM notifications n WHERE n.status IN ('SENT', 'DELIVERED')
          AND -coalesce((SELECT sum(b.amount_cents) FROM balance_entries b WHERE b.notification_id = n.id), 0)
              <> n.cost_cents""",
    "unsent (failed, suppressed) row still charged": """
        SELECT count(*) FROM notifications n WHERE n.status IN ('FAILED', 'SUPPRESSED')
          AND coalesce((SELECT sum(b.amount_cents) FROM balance_entries b WHERE b.notification_id = n.id), 0) <> 0""",
}


def _check(run: Run, tally: Tally, receiver_url: str) -> None:
    with UnitOfWork() as uow:
        x = uow.execute
        run.statuses = {r.status: int(r.n) for r in x(sa.text(
            "SELECT status, count(*) AS n FROM notifications GROUP BY status ORDER BY status"))}
        run.suppressed = {r.reason or "none": int(r.n) for r in x(sa.text(
            "SELECT suppressed_reason AS reason, count(*) AS n FROM notifications WHERE status = 'SUPPRESSED' "
            "GROUP BY 1 ORDER BY 1"))}
        tracked = {int(r.id): r.status for r in x(sa.text("SELECT id, status FROM notifications WHERE id = ANY(:i)"),
                                                 {"i": sorted(tally.notification_ids)})}
        unfinished = {int(i) for i in x(sa.text("SELECT id FROM notifications WHERE status NOT IN "
                                                "('SENT', 'DELIVERED', 'SUPPRESSED')")).scalars()}
        events = {str(e) for e in x(sa.text("SELECT event_id FROM outbox_events WHERE event_id::text = ANY(:e)"),
                                    {"e": sorted(tally.event_ids)}).scalars()}
        webhooks = [(int(r.id), str(r.event_id)) for r in x(sa.text(
            "SELECT id, event_id FROM notifications WHERE channel = 'webhook' AND event_id IS NOT NULL"))]
        sent_people = {str(r.dedupe_key): int(r.id) for r in x(sa.text(
            "SELECT id, dedupe_key FROM notifications WHERE channel <> 'webhook' "
            "AND status IN ('SENT', 'DELIVERED')"))}
        run.money = {k: int(x(sa.text(q)).scalar_one()) for k, q in MONEY_SQL.items()}
    lost: dict[str, set[str]] = {
        "accepted send or code with no row": {f"n{i}" for i in tally.notification_ids if i not in tracked},
        "accepted approval with no event": {f"e{e}" for e in tally.event_ids - events},
        "accepted send or code not sent": {f"n{i}" for i, s in tracked.items() if s not in FINAL},
        "row still owed or failed after the drain": {f"n{i}" for i in unfinished},
    }
    no_effect: set[str] = set()
    with httpx.Client(base_url=receiver_url, timeout=10) as c:
        for nid, event_id in webhooks:
            fx = int(c.get(f"/effects/{event_id}").json()["effects"])
            if fx == 0:
                no_effect.add(f"n{nid}")
            run.duplicate_effects += max(0, fx - 1)
    lost["order event with no receiver effect"] = no_effect
    lost["sent message the provider never received"] = {f"n{sent_people[k]}" for k in
                                                        _missing_at_provider(list(sent_people))}
    run.lost = {k: len(v) for k, v in lost.items()}
    run.lost_total = len(set().union(*lost.values()))
    run.invariants = all_invariants(receiver_url)
    run.duplicate_effects = max(run.duplicate_effects, run.invariants.get(RECEIVER_INVARIANT) or 0)


def _missing_at_provider(keys: list[str]) -> set[str]:
    """Idempotency keys the mock providers never stored (read from the receiver's database, as the benchmark
    does: the receiver has no endpoint listing its messages)."""
    eng = sa.create_engine(receiver_database_url(os.environ["OUTBOX_DATABASE_URL"]))
    try:
        with eng.connect() as c:
            got = set(c.execute(sa.text("SELECT idempotency_key FROM provider_messages WHERE idempotency_key = "
                                        "ANY(:k)"), {"k": keys}).scalars())
    finally:
        eng.dispose()
    return set(keys) - got


def _report(run: Run) -> None:
    rec = "not measured" if run.recovery_s is None else f"{run.recovery_s:.2f}s"
    print(f"chaos rows by status {run.statuses}; suppressed by reason {run.suppressed}")
    print(f"chaos lost {run.lost}")
    print(f"chaos money {run.money}")
    print(f"chaos invariants {run.invariants}")
    print(f"chaos steady delivery before the restart {run.rate_before:.1f}/s; back to 95% after {rec}")


def _code_version() -> str:
    """The commit the run used, and whether files outside `evidence/` differed from it (shared working trees)."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()

    changed = [ln for ln in git("status", "--porcelain").splitlines() if not ln[3:].startswith("evidence/")]
    return f"commit `{git('rev-parse', '--short', 'HEAD')}`" + (
        f" with {len(changed)} uncommitted file(s) in the working tree" if changed else " (clean working tree)")


def _pg_down(run: Run) -> str:
    if run.pg_down_at is None or run.pg_up_at is None:
        return "not restarted"
    return f"{run.pg_up_at - run.pg_down_at:.1f} s"


def write_evidence(run: Run, path: Path) -> None:
    rec = "not reached before the load stopped" if run.recovery_s is None else f"{run.recovery_s:.2f} s"
    lines = [
        f"# Chaos while it runs — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
        f"`outbox chaos --duration {run.duration:g} --seed {run.seed} --evidence` (replay with the same seed: the "
        "fault plan is the same; the load's timing is not). Its own PostgreSQL cluster (`.run/chaos-pg/`), its own "
        "Redis server, receiver, the HTTP API (`dashboard.standalone`: the dashboard's /api/v1 backend — the Reflex "
        "build is too slow to restart inside a run, so this process is the dashboard backend that is killed), "
        f"relay and {len(worker_names())} lane workers (two per lane, one critical). Tenant {TENANT}; lease "
        f"{LEASE_SECONDS:g} s; scan 0.5 s; load ≈ {run.rate:g} API calls/s (approvals, sends, one-time codes, lead "
        f"events) plus one campaign. Code: {_code_version()}.", "",
        "## Result", "", "```", run.result_line(), "```", "",
        "| figure | value |", "|---|---|",
        f"| lost | {run.lost_total} |", f"| duplicate effects | {run.duplicate_effects} |",
        f"| invariants broken | {run.invariants_broken} |", f"| money mismatches | {run.money_mismatch} |",
        f"| PostgreSQL down (stop issued → accepting connections) | {_pg_down(run)} |",
        f"| steady delivery before the PostgreSQL restart (campaign rows apart, last {RATE_BEFORE_S:g} s) | "
        f"{run.rate_before:.1f} rows/s |",
        f"| restart recovery (accepting connections → the next {RATE_WINDOW_S:g} s deliver ≥ 95 % of that rate, "
        f"not before the first row sent again; sampled every {SAMPLE_EVERY:g} s) | {rec} |",
        f"| drained after the load stopped | {'no' if run.drained_s is None else f'{run.drained_s:.1f} s'} |",
        "", "## Faults (seeded timeline)", "", "```", *run.timeline, "```", "",
        "## Progress", "", "```", *run.progress, "```", "",
        "## Rows", "", "| status | rows |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.statuses.items()], "",
        "| suppressed reason | rows |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.suppressed.items()], "",
        "## Lost, by kind", "", "| kind | count |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.lost.items()], "",
        "## Money", "", "| check | count |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.money.items()], "",
        "## Invariants (`outbox check`)", "", "| invariant | count |", "|---|---|",
        *[f"| {k} | {'not checked' if v is None else v} |" for k, v in run.invariants.items()], "",
        "## API answers during the run", "", "| call and answer | count |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in run.answers.items()], "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
