"""The CDC chaos profile's record (`CdcRun`: what the run counted, its result line) and how it is told: the summary
printed at the end of a run (`print_report`) and the evidence file (`write_cdc_evidence`, evidence/chaos-cdc.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from jobs.ops.procs import ROOT

EVIDENCE = ROOT / "evidence" / "chaos-cdc.md"


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


def print_report(run: CdcRun) -> None:
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
