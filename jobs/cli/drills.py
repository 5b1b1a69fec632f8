"""`outbox` commands that run a drill against a whole system in its own database: scenario, bench, storm, chaos,
vacuum-drill, replica-drill."""

from __future__ import annotations

from pathlib import Path

import typer

from jobs.cli.console import err, out


def scenario(keep: bool = typer.Option(False, help="keep the scenario database afterwards"),
             out_path: Path = typer.Option(None, "--out", help="where to write the transcript "
                                                               "(default evidence/scenario.md)"),
             seed: int = typer.Option(None, help="ids and times from this seed (printed): same seed, same transcript"),
             ) -> None:
    """Run seed 004 §3.4 end to end against real processes, in its own database; write the transcript."""
    from jobs.drills.scenario import EVIDENCE, run_scenario

    ok = run_scenario(keep=keep, out=out_path or EVIDENCE, seed=seed)
    raise typer.Exit(0 if ok else 1)


def bench(n: int = typer.Option(300, help="commands / deliveries per measurement"),
          scan_owed: int = typer.Option(20_000, help="owed rows for the relay-claim drain"),
          scan_done: int = typer.Option(200_000, help="settled rows beside them"),
          recipients: int = typer.Option(40_000, help="campaign size for the lane-isolation measurement"),
          codes: int = typer.Option(30, help="one-time codes measured idle and with the campaign in flight"),
          only: str = typer.Option("", help="comma-separated steps to run (wake, commit, delivery, recovery, lanes, "
                                            "fair, scan, partitions, pgbouncer, push, relays); their figures "
                                            "replace the last run's in the evidence"),
          relay_outage: float = typer.Option(60.0, help="relays: seconds the CDC relay stays down under load"),
          relay_samples: int = typer.Option(100, help="relays: paced approvals per path for the latency")) -> None:
    """Benchmarks (own database and Redis db) → evidence/bench.md, as ratios against raw baselines."""
    from jobs.drills.bench import run_bench

    run_bench(n, scan_owed, scan_done, recipients, codes, only=tuple(x for x in only.split(",") if x),
              relay_outage=relay_outage, relay_samples=relay_samples)


def storm(leads: int = typer.Option(20), per_lead: int = typer.Option(200, help="events per lead"),
          clients: int = typer.Option(16, help="concurrent HTTP clients"),
          seed: int = typer.Option(None, help="replay a storm (the seed is printed)")) -> None:
    """The journey storm in its own database (time scale 600) → evidence/journeys.md."""
    from jobs.drills.storm import EVIDENCE, storm_drill

    report = storm_drill(leads, per_lead, clients, seed, EVIDENCE)
    out.print(EVIDENCE.read_text())
    err.print(f"evidence written to {EVIDENCE}")
    raise typer.Exit(0 if report.ok else 1)


def chaos(duration: float = typer.Option(120.0, help="seconds of load while faults are injected"),
          seed: int = typer.Option(None, help="replay a run's fault plan (the seed is printed first)"),
          rate: float = typer.Option(8.0, help="API calls per second of steady load"),
          drain_timeout: float = typer.Option(90.0, help="seconds to wait for nothing to be owed afterwards"),
          evidence: bool = typer.Option(False, "--evidence", help="also write evidence/chaos.md "
                                                                   "(evidence/chaos-cdc.md with --profile cdc)"),
          profile: str = typer.Option("system", help="system: the whole system; cdc: the CDC relay, the stream "
                                                     "and the fulfilment inbox (wal_level = logical cluster)")) -> None:
    """The whole system on its own PostgreSQL cluster and Redis, under load, with seeded kills, a stalled worker,
    a Redis flush and a PostgreSQL restart; exit 1 if anything was lost, duplicated or mis-charged.
    `--profile cdc`: the CDC path instead (relay killed between publish and confirm, consumer between commit and
    XACK, Redis and PostgreSQL restarted, the relay kept down)."""
    import random

    from jobs.ops.procs import stop_on_sigterm

    if profile not in ("system", "cdc"):
        err.print(f"unknown profile {profile!r}: choose system or cdc")
        raise typer.Exit(2)
    stop_on_sigterm()
    chosen = seed if seed is not None else random.randrange(2**31)
    if profile == "cdc":
        from jobs.drills.chaos.cdc import run_cdc_chaos
        from jobs.drills.chaos.cdc_report import EVIDENCE as CDC_EVIDENCE

        ran = run_cdc_chaos(duration, chosen, rate, drain_timeout, CDC_EVIDENCE if evidence else None)
        raise typer.Exit(0 if ran.ok else 1)
    from jobs.drills.chaos import EVIDENCE, run_chaos

    result = run_chaos(duration, chosen, rate, drain_timeout, EVIDENCE if evidence else None)
    raise typer.Exit(0 if result.ok else 1)


def vacuum_drill(hold: float = typer.Option(180.0, help="seconds the one transaction stays open"),
                 window: float = typer.Option(60.0, help="seconds measured before and after it"),
                 evidence: bool = typer.Option(False, help="merge the figures into evidence/bench.json and .md"),
                 ) -> None:
    """Delivery saturated, then one transaction holding its snapshot: the throughput drop and dead tuples."""
    from jobs.drills.vacuum import run_vacuum_drill

    run_vacuum_drill(hold, window, evidence=evidence)


def replica_drill(load: float = typer.Option(20.0, help="seconds of steady approvals before the primary is stopped"),
                  after: float = typer.Option(5.0, help="seconds of load through the promoted standby"),
                  rate: float = typer.Option(20.0, help="approvals per second"),
                  sync: bool = typer.Option(True, help="a second pass with a synchronous standby"),
                  evidence: bool = typer.Option(False, help="merge the figures into evidence/bench.json and .md"),
                  ) -> None:
    """A primary and its streaming standby under .run/: load, the primary stopped hard, the standby promoted;
    recovery time and point, invariants afterwards. Exit 1 if an invariant broke or an effect was doubled."""
    from jobs.drills.replica import run_replica_drill

    res = run_replica_drill(load, after, rate, sync=sync, evidence=evidence)
    raise typer.Exit(0 if res["replica_invariants_ok"] else 1)


# vacuum_drill and replica_drill answer to `outbox vacuum-drill` and `outbox replica-drill`
COMMANDS = (scenario, bench, storm, chaos, vacuum_drill, replica_drill)
