"""The CDC chaos profile's seeded fault plan (`plan_cdc_faults`, pure: a seed and a duration in, a plan out) and its
injector (`CdcInjector`: each fault injected at its time, held, restored and waited for before the next).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable

from jobs import cdc
from jobs.drills.chaos.cdc_probes import Path_
from jobs.drills.chaos.cdc_report import CdcRun
from jobs.drills.chaos.owned import OwnedPostgres, OwnedRedis, now_s, say
from jobs.drills.chaos.plan import Fault
from jobs.ops.procs import BIN, ROOT, System, fulfilment_env, wait_until

CDC_FAULT_KINDS = ("kill_relay_after_publish", "kill_consumer_after_commit", "kill_relay", "kill_consumer",
                   "restart_redis", "restart_postgres", "relay_down")
REPEATABLE = ("kill_relay_after_publish", "kill_consumer_after_commit", "kill_relay", "kill_consumer",
              "restart_redis", "restart_postgres")
RESTORE_ALLOWANCE_S = 1.5  # a process start or a server start between one fault's end and the next one's beginning
FAULT_EXIT = 86  # what a process armed at a fault point exits with (domain.faults, fulfilment.consume)


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
            log = self.system.logdir.relative_to(ROOT) / f"{name}.log"
            self._log(f"{name} exited {p.popen.returncode} on its own (see {log})")

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
