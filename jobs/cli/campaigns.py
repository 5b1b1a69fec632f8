"""`outbox campaign create | status`: start a campaign on the bulk lane and follow its progress live."""

from __future__ import annotations

import asyncio
import time

import typer

from jobs.cli.console import cli_actor, err, out, require_note


def create(tenant: int = typer.Option(42, help="tenant the campaign sends for"),
                    name: str = typer.Option(..., help="what operators will call it"),
                    segment: str = typer.Option("all_reachable", help="all_reachable | abandoned_after_credit_check"),
                    template: str = typer.Option("offer"), channel: str = typer.Option("email"),
                    note: str = typer.Option("", help="why (required, as on the dashboard; kept in the audit log "
                                                      "with your name)"),
                    follow: bool = typer.Option(True, help="show live progress until it finishes")) -> None:
    """Start a campaign (its fan-out runs on the bulk lane) and follow it with a live progress bar."""
    from domain.campaigns.fan_out import create
    from domain.delivery.wakeups import arq_pool, enqueue_fan_out
    from domain.ledger.send import SendRefused

    why = require_note(note, "campaign create")
    try:
        cid = create(tenant_id=tenant, name=name, segment=segment, template=template, channel=channel,
                     actor_ref=cli_actor(), note=why)
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


def status(campaign_id: int, tenant: int = typer.Option(42),
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
