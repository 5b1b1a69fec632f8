"""`outbox` — one console script for operators, on-call and CI."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import cast

import typer
from rich.console import Console
from rich.table import Table

from domain.delivery.queue import LANES
from domain.settings import get_settings
from jobs import cli_apikey

app = typer.Typer(help="Outbox: durable notification outbox. Run `outbox up` to start everything.",
                  no_args_is_help=True, add_completion=False)
apikey = typer.Typer(help="Tenant-scoped API keys", no_args_is_help=True)
app.add_typer(apikey, name="apikey")
cli_apikey.register(apikey)  # list, revoke
campaign = typer.Typer(help="Campaigns on the bulk lane", no_args_is_help=True)
app.add_typer(campaign, name="campaign")
err = Console(stderr=True)
out = Console()


@app.command()
def migrate() -> None:
    """Create the database if needed and apply every Alembic migration."""
    from jobs.ops import demo

    demo.migrate(err.print)


@app.command()
def seed(recipients: int = typer.Option(0, "--recipients", help="also add this many campaign recipients "
                                                                "(bulk-000001 …) to tenant 42")) -> None:
    """Load the demo tenants, orders, operators and recipients (idempotent)."""
    from jobs.ops import demo

    demo.seed_demo(err.print, recipients)


@apikey.command("create")
def apikey_create(tenant: int = typer.Option(..., help="tenant id the key acts for"),
                  actor: str = typer.Option("", help="audited actor reference")) -> None:
    """Print a new API key (only the key, on stdout)."""
    from domain.access.auth import create_api_key

    try:
        key = create_api_key(tenant, actor or None)
    except LookupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    print(key)


@app.command()
def check() -> None:
    """Run every invariant query (the receiver's through its API); exit 1 when any is broken."""
    from jobs.ops.checks import all_invariants

    url = get_settings().receiver_url
    counts = all_invariants(url)
    t = Table(title="invariants (each must be 0)")
    t.add_column("invariant")
    t.add_column("count", justify="right")
    for name, n in counts.items():
        t.add_row(name, "[yellow]not checked[/]" if n is None else f"[{'green' if n == 0 else 'red'}]{n}[/]")
    out.print(t)
    if None in counts.values():
        err.print(f"[yellow]the receiver's invariant was not checked: nothing answers at {url}[/]")
    if any(counts.values()):
        raise typer.Exit(1)


@app.command()
def status() -> None:
    """Per lane: due depth, oldest due age, scheduled apart, attempts, failed/review, latency, paused; balances."""
    from datetime import UTC, datetime

    from domain.delivery.views import lane_stats, tenants
    from domain.ledger.metering import balance_view

    slo = get_settings().oldest_owed_slo_seconds
    t = Table(title=f"lanes (oldest-due SLO {slo:.0f}s; scheduled rows are not late)")
    for col in ("lane", "due", "oldest due", "scheduled", "next due (UTC)", "attempts", "failed", "review",
                "p50 ms", "p99 ms", "paused"):
        t.add_column(col)
    for s in lane_stats():
        age = s["oldest_owed_seconds"]
        colour = "red" if age > slo else "green"
        nxt = f"{s['next_due']:%Y-%m-%d %H:%M}" if s["next_due"] else "—"
        t.add_row(s["lane"], str(s["depth"]), f"[{colour}]{age:.1f}s[/]", str(s["scheduled"]), nxt,
                  str(s["attempts"]), str(s["failed"]), str(s["review"]), f"{s['p50_ms']:.0f}",
                  f"{s['p99_ms']:.0f}", "yes" if s["paused"] else "no")
    out.print(t)
    now = datetime.now(UTC)
    b = Table(title="balances (run-out at the last hour's spend)")
    for col in ("tenant", "balance", "spent last hour", "runs out"):
        b.add_column(col)
    for tenant_id, name in tenants():
        v = balance_view(tenant_id, now)
        runs_out = v["runs_out_at"][:16].replace("T", " ") + " UTC" if v["runs_out_at"] else "does not run out"
        b.add_row(f"{tenant_id} {name}", f"{v['balance_cents'] / 100:,.2f}", f"{v['spent_last_hour_cents'] / 100:,.2f}",
                  runs_out)
    out.print(b)
    out.print(f"refresh publishes: {_refresh_publishes()}")


@app.command()
def why(recipient_ref: str = typer.Argument(..., help="the recipient's ref, e.g. cust-001"),
        tenant: int = typer.Option(None, help="only this tenant (default: every tenant with that ref)"),
        limit: int = typer.Option(50, help="messages to show, newest first")) -> None:
    """"Why didn't they get it?" — every message to one recipient, with its answer in plain words."""
    from datetime import UTC, datetime

    from domain.ledger.recipients import find_by_ref
    from domain.ledger.views import recipient_messages

    found = find_by_ref(tenant, recipient_ref)
    if not found:
        err.print(f"[red]error:[/] no recipient {recipient_ref!r}" + (f" in tenant {tenant}" if tenant else ""))
        raise typer.Exit(2)
    for tenant_id, rid in found:
        w = recipient_messages(tenant_id, rid, datetime.now(UTC), limit)
        assert w is not None
        heard = "yes" if w["heard_from_us_today"] else "no"
        out.print(f"[bold]{w['display_name']}[/] ({w['ref']}, tenant {tenant_id}, {w['timezone']}) — heard from us "
                  f"today: [bold]{heard}[/] · sent this week: {w['sent_this_week']} · reached by: "
                  f"{', '.join(w['reached_by']) or 'no channel yet'}")
        t = Table()
        for col in ("#", "created (UTC)", "channel", "template", "status", "answer", "cost", "provider ref"):
            t.add_column(col)
        for m in w["messages"]:
            t.add_row(str(m["id"]), f"{m['created_at']:%Y-%m-%d %H:%M}", m["channel"], m["template"], m["status"],
                      m["answer"], f"{m['cost_cents'] / 100:.2f}", m["provider_reference"] or "—")
        out.print(t)


def _refresh_publishes() -> str:
    import redis

    from domain.delivery.queue import REFRESH_PUBLISHES

    try:
        r = redis.Redis.from_url(get_settings().redis_url, socket_timeout=2)
        return str(int(cast(bytes | None, r.get(REFRESH_PUBLISHES)) or 0))
    except redis.RedisError as exc:
        return f"unknown (Redis: {type(exc).__name__})"


@app.command()
def pause(lane: str) -> None:
    """Pause a lane (durable: every worker of the lane obeys)."""
    from domain.delivery.lanes import set_lane_paused

    _lane(lane)
    set_lane_paused(lane, True, actor_ref=_cli_actor())
    err.print(f"lane {lane} paused")


@app.command()
def resume(lane: str) -> None:
    from domain.delivery.lanes import set_lane_paused

    _lane(lane)
    set_lane_paused(lane, False, actor_ref=_cli_actor())
    err.print(f"lane {lane} resumed")


def _cli_actor() -> str:
    return f"cli:{os.environ.get('USER') or os.environ.get('LOGNAME') or 'unknown'}"


def _lane(lane: str) -> None:
    if lane not in LANES:
        err.print(f"[red]error:[/] unknown lane {lane!r}; lanes are {', '.join(LANES)}")
        raise typer.Exit(2)


@app.command()
def worker(lane: str = typer.Option(..., help="critical | high | normal | bulk")) -> None:
    """Run one arq worker process for one lane."""
    from domain import logs
    from jobs.worker import run_worker

    _lane(lane)
    logs.configure(f"worker:{lane}")
    run_worker(lane)


@app.command()
def relay(once: bool = typer.Option(False, help="run one recovery scan and exit")) -> None:
    """LISTEN/NOTIFY relay plus periodic recovery scan."""
    from domain import logs
    from jobs.relay import run_relay

    logs.configure("relay")
    asyncio.run(run_relay(once=once))


@app.command()
def receiver(port: int = 8090) -> None:
    """Run the mock outside world (webhook receiver and channel providers) in its own database."""
    from jobs.ops.procs import exec_receiver

    exec_receiver(port)


@app.command()
def scenario(keep: bool = typer.Option(False, help="keep the scenario database afterwards"),
             out_path: Path = typer.Option(None, "--out", help="where to write the transcript "
                                                               "(default evidence/scenario.md)"),
             seed: int = typer.Option(None, help="ids and times from this seed (printed): same seed, same transcript"),
             ) -> None:
    """Run seed 004 §3.4 end to end against real processes, in its own database; write the transcript."""
    from jobs.drills.scenario import EVIDENCE, run_scenario

    ok = run_scenario(keep=keep, out=out_path or EVIDENCE, seed=seed)
    raise typer.Exit(0 if ok else 1)


@app.command()
def bench(n: int = typer.Option(300, help="commands / deliveries per measurement"),
          scan_owed: int = typer.Option(20_000, help="owed rows for the relay-claim drain"),
          scan_done: int = typer.Option(200_000, help="settled rows beside them"),
          recipients: int = typer.Option(40_000, help="campaign size for the lane-isolation measurement"),
          codes: int = typer.Option(30, help="one-time codes measured idle and with the campaign in flight"),
          only: str = typer.Option("", help="comma-separated steps to run (wake, commit, delivery, recovery, lanes, "
                                            "scan); their figures replace the last run's in the evidence")) -> None:
    """Benchmarks (own database and Redis db) → evidence/bench.md, as ratios against raw baselines."""
    from jobs.drills.bench import run_bench

    run_bench(n, scan_owed, scan_done, recipients, codes, only=tuple(x for x in only.split(",") if x))


@app.command()
def storm(leads: int = typer.Option(20), per_lead: int = typer.Option(200, help="events per lead"),
          clients: int = typer.Option(16, help="concurrent HTTP clients"),
          seed: int = typer.Option(None, help="replay a storm (the seed is printed)")) -> None:
    """The journey storm in its own database (time scale 600) → evidence/journeys.md."""
    from jobs.drills.storm import EVIDENCE, storm_drill

    report = storm_drill(leads, per_lead, clients, seed, EVIDENCE)
    out.print(EVIDENCE.read_text())
    err.print(f"evidence written to {EVIDENCE}")
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def chaos(duration: float = typer.Option(120.0, help="seconds of load while faults are injected"),
          seed: int = typer.Option(None, help="replay a run's fault plan (the seed is printed first)"),
          rate: float = typer.Option(8.0, help="API calls per second of steady load"),
          drain_timeout: float = typer.Option(90.0, help="seconds to wait for nothing to be owed afterwards"),
          evidence: bool = typer.Option(False, "--evidence", help="also write evidence/chaos.md")) -> None:
    """The whole system on its own PostgreSQL cluster and Redis, under load, with seeded kills, a stalled worker,
    a Redis flush and a PostgreSQL restart; exit 1 if anything was lost, duplicated or mis-charged."""
    import random

    from jobs.drills.chaos import EVIDENCE, run_chaos
    from jobs.ops.procs import stop_on_sigterm

    stop_on_sigterm()
    result = run_chaos(duration, seed if seed is not None else random.randrange(2**31), rate, drain_timeout,
                       EVIDENCE if evidence else None)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def up(port: int = typer.Option(3000, help="dashboard port"), receiver_port: int = 8090,
       no_dashboard: bool = typer.Option(False, help="start everything but the dashboard"),
       time_scale: float = typer.Option(60.0, help="journey delays divided by this (60: a 30-minute nudge fires "
                                                   "in 30 s, so the journeys page is alive)"),
       scale: int = typer.Option(1, min=1, max=8, help="N relays, N workers per lane and N dashboard backends "
                                                       "(ports PORT+1…PORT+N) behind nginx on PORT")) -> None:
    """Migrate, seed, then start receiver, relay, four lane workers and the dashboard; Ctrl-C stops them."""
    from jobs.ops import demo

    demo.up(err.print, port, receiver_port, no_dashboard, time_scale, scale)


@app.command("vacuum-drill")
def vacuum_drill(hold: float = typer.Option(180.0, help="seconds the one transaction stays open"),
                 window: float = typer.Option(60.0, help="seconds measured before and after it"),
                 evidence: bool = typer.Option(False, help="merge the figures into evidence/bench.json and .md")) -> None:
    """Delivery saturated, then one transaction holding its snapshot: the throughput drop and dead tuples."""
    from jobs.drills.vacuum import run_vacuum_drill

    run_vacuum_drill(hold, window, evidence=evidence)


@campaign.command("create")
def campaign_create(tenant: int = typer.Option(42, help="tenant the campaign sends for"),
                    name: str = typer.Option(..., help="what operators will call it"),
                    segment: str = typer.Option("all_reachable", help="all_reachable | abandoned_after_credit_check"),
                    template: str = typer.Option("offer"), channel: str = typer.Option("email"),
                    follow: bool = typer.Option(True, help="show live progress until it finishes")) -> None:
    """Start a campaign (its fan-out runs on the bulk lane) and follow it with a live progress bar."""
    from domain.campaigns.fan_out import create
    from domain.delivery.wakeups import arq_pool, enqueue_fan_out
    from domain.ledger.write import SendRefused

    try:
        cid = create(tenant_id=tenant, name=name, segment=segment, template=template, channel=channel,
                     actor_ref="cli")
    except SendRefused as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc

    async def wake() -> None:
        pool = await arq_pool()
        try:
            await enqueue_fan_out(pool, cid)
        finally:
            await pool.aclose()

    try:
        asyncio.run(wake())
    except Exception as exc:  # the relay's scan starts it anyway
        err.print(f"[yellow]could not reach Redis ({type(exc).__name__}); the relay will start campaign {cid}[/]")
    err.print(f"campaign [bold]{cid}[/] created ({segment} × {template} by {channel})")
    print(cid)
    if follow:
        _follow(tenant, cid)


@campaign.command("status")
def campaign_status(campaign_id: int, tenant: int = typer.Option(42),
                    follow: bool = typer.Option(True, help="keep the progress bar live until it finishes")) -> None:
    """Progress of one campaign: ledgered, sent, delivered, deferred, suppressed (by reason), failed."""
    _follow(tenant, campaign_id, follow)


def _follow(tenant: int, cid: int, live: bool = True) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from domain.campaigns.views import status as campaign_state

    s = campaign_state(tenant, cid)
    if s is None:
        err.print(f"[red]error:[/] no campaign {cid} in tenant {tenant}")
        raise typer.Exit(2)
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as bar:
        ledgered = bar.add_task("ledgered", total=max(1, s["total"]))
        settled = bar.add_task("settled", total=max(1, s["total"]))
        while True:
            s = campaign_state(tenant, cid)
            assert s is not None
            done = s["sent"] + s["failed"] + sum(s["suppressed"].values())
            bar.update(ledgered, completed=s["ledgered"], total=max(1, s["total"]))
            bar.update(settled, completed=done, total=max(1, s["total"]))
            if not live or s["finished_at"] is not None or s["status"] == "cancelled":
                break
            time.sleep(1)  # a display refresh, not a wait for a condition
    out.print(f"campaign {cid} [bold]{s['status']}[/]: total {s['total']} · ledgered {s['ledgered']} · queued "
              f"{s['queued']} · deferred {s['deferred']} · sent {s['sent']} · delivered {s['delivered']} · failed "
              f"{s['failed']} · suppressed {s['suppressed'] or 0}")


def main() -> None:
    try:
        app()
    except Exception as exc:  # a clear one-line error for operators; the traceback with OUTBOX_DEBUG=1
        if os.environ.get("OUTBOX_DEBUG"):
            raise
        err.print(f"[red]error:[/] {type(exc).__name__}: {exc}")
        sys.exit(1)
