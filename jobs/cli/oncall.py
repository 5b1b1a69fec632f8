"""`outbox` commands for operators and on-call: the database (migrate, seed), the invariants (check),
the lanes and balances (status, pause, resume) and "why didn't they get it?" (why)."""

from __future__ import annotations

from typing import cast

import typer
from rich.table import Table

from domain.settings import get_settings
from jobs.cli.console import check_lane, cli_actor, err, out, require_note


def migrate() -> None:
    """Create the database if needed and apply every Alembic migration."""
    from jobs.ops import demo

    demo.migrate(err.print)


def seed(recipients: int = typer.Option(0, "--recipients", help="also add this many campaign recipients "
                                                                "(bulk-000001 …) to tenant 42")) -> None:
    """Load the demo tenants, orders, operators and recipients (idempotent)."""
    from jobs.ops import demo

    demo.seed_demo(err.print, recipients)


def check() -> None:
    """Run every invariant query (the receiver's through its API), then the CDC checks (with OUTBOX_CDC on: an
    event projected twice; once the stream is drained, a committed order event the fulfilment inbox never saw);
    exit 1 when any is broken."""
    from jobs.ops.checks import all_invariants, cdc_checks

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
    cdc = cdc_checks()
    c = Table(title="CDC checks (each must be 0; counted only with OUTBOX_CDC on)")
    c.add_column("check")
    c.add_column("count", justify="right")
    for name, v in cdc.items():
        c.add_row(name, f"[yellow]{v}[/]" if isinstance(v, str) else f"[{'green' if v == 0 else 'red'}]{v}[/]")
    out.print(c)
    if any(counts.values()) or any(isinstance(v, int) and v for v in cdc.values()):
        raise typer.Exit(1)


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


def why(query: str = typer.Argument(..., metavar="QUERY",
                                    help="what search takes: a recipient's ref (cust-001), name, phone or email; a "
                                         "message's #id, job id (n-4940) or provider reference; an event id; an "
                                         "order number"),
        tenant: int = typer.Option(None, help="only this tenant (default: every tenant)"),
        limit: int = typer.Option(50, help="messages to show, newest first")) -> None:
    """"Why didn't they get it?" — every message to each recipient the query leads to (read as search reads it:
    the recipient themselves, a message's recipient, an order's customer), with its answer in plain words (a
    queued one: what holds it — lane paused, breaker open, balance, quiet hours, retrying, being sent, overdue)."""
    from datetime import UTC, datetime

    from domain.delivery.views import tenants
    from domain.support.ledger import recipient_messages
    from domain.support.query import QueryRefused, names_contact_point, read_query
    from domain.support.search import recipients_named

    try:
        kinds = read_query(query).kinds
    except QueryRefused as exc:
        err.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(2) from None
    scopes = [tenant] if tenant is not None else [t for t, _ in tenants()]
    found = [(t, rid, how) for t in scopes for rid, how in recipients_named(t, query)]
    if not found:
        # A contact point is never echoed back (it stays out of terminals' scrollback and logs): only its reading.
        said = f"for that {' or '.join(kinds)}" if names_contact_point(query) else repr(query)
        err.print(f"[red]error:[/] no recipient {said}" + (f" in tenant {tenant}" if tenant is not None else ""))
        raise typer.Exit(2)
    for tenant_id, rid, how in found:
        w = recipient_messages(tenant_id, rid, datetime.now(UTC), limit)
        if w is None:
            continue
        out.print(f"[dim]found by {how}[/]")
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


def pause(lane: str, note: str = typer.Option("", help="why (required; kept in the audit log with your name)")) -> None:
    """Pause a lane (durable: every worker of the lane obeys); audited as cli:<os user> with the note."""
    from domain.delivery.lanes import set_lane_paused

    check_lane(lane)
    why = require_note(note, f"pausing lane {lane}")
    set_lane_paused(lane, True, actor_ref=cli_actor(), note=why)
    err.print(f"lane {lane} paused by {cli_actor()}: {why}")


def resume(lane: str,
           note: str = typer.Option("", help="why (required; kept in the audit log with your name)")) -> None:
    """Resume a paused lane; audited as cli:<os user> with the note."""
    from domain.delivery.lanes import set_lane_paused

    check_lane(lane)
    why = require_note(note, f"resuming lane {lane}")
    set_lane_paused(lane, False, actor_ref=cli_actor(), note=why)
    err.print(f"lane {lane} resumed by {cli_actor()}: {why}")


COMMANDS = (migrate, seed, check, status, why, pause, resume)
