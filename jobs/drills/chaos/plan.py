"""The fault plan, drawn from the seed, and the injector that applies it on time: kills, a stall past the lease,
a Redis flush, the receiver's fault switches and one PostgreSQL restart, each undone `hold` seconds later."""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass

import httpx
import redis as redis_lib

from jobs.drills.chaos.owned import (
    LEASE_SECONDS,
    RATE_BEFORE_S,
    RATE_WINDOW_S,
    OwnedPostgres,
    OwnedRedis,
    now_s,
    say,
    signal_group,
    worker_names,
)
from jobs.drills.chaos.report import Run
from jobs.ops.procs import System, wait_until

FAULT_KINDS = ("kill_worker", "kill_relay", "kill_receiver", "kill_api", "stop_worker", "flush_redis",
               "receiver_faults")
# The receiver's own switch board (development): webhooks slower than a lease, then 503s, effects applied with the
# answer lost (hang, dropped connection) — attempts whose outcome arrives after their lease ran out.
RECEIVER_FAULTS = {"slow_seconds": LEASE_SECONDS + 1.0, "fail_503": 6, "accept_then_hang": 2, "accept_then_drop": 2}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load started
    kind: str
    target: str  # a process name ('' for Redis and PostgreSQL)
    hold: float  # seconds until it is restarted / resumed / PostgreSQL starts again


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
            signal_group(p.popen.pid, signal.SIGSTOP)
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
            down = self.run.pg_up_at - (self.run.pg_down_at or 0)
            self._log(f"PostgreSQL accepting connections again (down {down:.1f}s)")
        elif f.kind == "stop_worker":
            p = self.system.procs[f.target]
            assert p.popen is not None
            signal_group(p.popen.pid, signal.SIGCONT)
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
