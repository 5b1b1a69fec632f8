"""A chaos run's record, its result line, the printed summary and `evidence/chaos.md`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from jobs.drills.chaos.owned import (
    LEASE_SECONDS,
    RATE_BEFORE_S,
    RATE_WINDOW_S,
    SAMPLE_EVERY,
    TENANT,
    worker_names,
)
from jobs.ops.procs import ROOT

EVIDENCE = ROOT / "evidence" / "chaos.md"


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


def report(run: Run) -> None:
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
        "fault plan is the same; the load's timing is not). Its own PostgreSQL cluster (a temporary directory), its "
        "own Redis server, receiver, the HTTP API (`dashboard.standalone`: the dashboard's /api/v1 backend — the "
        "Reflex build is too slow to restart inside a run, so this process is the dashboard backend that is killed), "
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
