"""`outbox messages | replay | resolve`: the ledger from a terminal (a table, or JSON for scripts), and on-call's two
review actions on many rows at once — each change kept in operator_actions as `cli:<user>` with its note."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from rich.table import Table

from jobs.cli.console import check_lane, cli_actor, err, out, require_note

STATUSES = ("QUEUED", "SENT", "DELIVERED", "FAILED", "SUPPRESSED")
MAX_TENANT = 2**31 - 1  # tenants.id is a PostgreSQL integer: a larger --tenant is a usage error, never a DataError
_AGO = re.compile(r"^(\d{1,6})([mhd])$")


def parse_since(text: str, now: datetime) -> datetime | None:
    """`30m`, `6h`, `7d` back from now, or an ISO time (UTC unless it says otherwise); None when it is neither."""
    m = _AGO.match(text.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        try:
            return now - {"m": timedelta(minutes=n), "h": timedelta(hours=n), "d": timedelta(days=n)}[unit]
        except OverflowError:  # before year 1: not a time
            return None
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _rows(tenant: int | None, status: str | None, lane: str | None, since: datetime | None,
          limit: int) -> list[dict[str, Any]]:
    """Newest first, across the chosen tenant or every tenant, at most `limit`."""
    from domain.delivery.state import with_states
    from domain.delivery.views import tenants
    from domain.ledger.views import LedgerFilter, ledger_rows

    hours = max(1, math.ceil((datetime.now(UTC) - since).total_seconds() / 3600)) if since else None
    f = LedgerFilter(status=status, lane=lane, since_hours=hours, limit=limit)
    found: list[dict[str, Any]] = []
    for t in [tenant] if tenant else [tid for tid, _ in tenants()]:
        found += ledger_rows(t, f)[0]
    kept = [r for r in found if since is None or r["created_at"] >= since]
    # A queued row's `state`: what holds it (lane paused, breaker, balance, quiet hours, retrying, overdue).
    return with_states(sorted(kept, key=lambda r: r["id"], reverse=True)[:limit], datetime.now(UTC))


def messages(status: str = typer.Option(None, help=f"only this status: {', '.join(STATUSES)}"),
             lane: str = typer.Option(None, help="only this lane"),
             since: str = typer.Option(None, help="created since: 30m, 6h, 7d, or an ISO time (UTC)"),
             tenant: int = typer.Option(0, min=0, max=MAX_TENANT, help="only this tenant (0: every tenant)"),
             limit: int = typer.Option(50, min=1, max=5000, help="rows, newest first"),
             as_json: bool = typer.Option(False, "--json", help="one JSON array on stdout")) -> None:
    """The ledger, newest first: every message with its status, reason and attempts (recipients by ref)."""
    if status is not None and status.upper() not in STATUSES:
        err.print(f"[red]error:[/] unknown status {status!r}; statuses are {', '.join(STATUSES)}")
        raise typer.Exit(2)
    if lane is not None:
        check_lane(lane)
    when = parse_since(since, datetime.now(UTC)) if since else None
    if since and when is None:
        err.print(f"[red]error:[/] --since {since!r}: give 30m, 6h, 7d or an ISO time such as 2026-11-30T08:00")
        raise typer.Exit(2)
    from domain.ledger.reasons import ledger_reason

    rows = _rows(tenant or None, status.upper() if status else None, lane, when, limit)
    if as_json:
        print(json.dumps(rows, default=str))
        return
    t = Table(title=f"messages ({len(rows)}, newest first)")
    for col in ("#", "tenant", "created (UTC)", "channel", "lane", "recipient", "template", "status", "why",
                "attempts"):
        t.add_column(col)
    for r in rows:
        # In words, as the pages say it (domain/ledger/reasons.py): never a code such as `contract`.
        why = (r["state"]["text"] if r.get("state") else None) or ledger_reason(r)
        t.add_row(str(r["id"]), str(r["tenant_id"]), f"{r['created_at']:%Y-%m-%d %H:%M:%S}", r["channel"], r["lane"],
                  r["recipient"], r["template"], r["status"] + (f" ({r['review']})" if r["review"] else ""),
                  str(why), str(r["attempts"]))
    out.print(t)


def _review(action: str, ids: list[int], tenant: int, note: str) -> None:
    from domain.delivery.review import BULK_MAX, left_as_it_is, review_many

    if not ids or any(i < 1 for i in ids) or len(ids) > BULK_MAX:
        err.print(f"[red]error:[/] give 1 to {BULK_MAX} message ids (positive numbers)")
        raise typer.Exit(2)
    bulk = review_many(action, tenant or None, ids, actor_ref=cli_actor(), note=note)
    done = bulk.done
    verb = "queued again (same event id)" if action == "replay" else "marked resolved"
    if done:
        print(f"{verb}: " + " ".join(f"#{i}" for i in done))
    if bulk.refused:  # FAILED, but may not be owed again: a one-time code past its end of life
        err.print(f"left as it is: {left_as_it_is(bulk.refused)}")
    unchanged = sorted(set(ids) - set(done) - {r.id for r in bulk.refused})
    if unchanged:
        err.print("unchanged (not FAILED, already " + ("replayed" if action == "replay" else "resolved")
                  + ", or no such message" + (f" in tenant {tenant}" if tenant else "") + "): "
                  + " ".join(f"#{i}" for i in unchanged))


def replay(ids: list[int] = typer.Argument(..., help="message ids (`outbox messages --status FAILED`)"),
           note: str = typer.Option("", help="why (required: the customer hears from us again; kept in the audit "
                                             "log with your name)"),
           tenant: int = typer.Option(0, min=0, max=MAX_TENANT,
                                      help="refuse rows of any other tenant (0: any tenant)")) -> None:
    """Queue FAILED messages again with the same row and event id (the receiver recognises them). A message that
    is not FAILED (already replayed, delivered meanwhile), or a one-time code past its end of life, is left as it
    is, and the answer says why. As on /ops, a replay says why (`--note`)."""
    _review("replay", ids, tenant, require_note(note, "replay"))


def resolve(ids: list[int] = typer.Argument(..., help="message ids"),
            note: str = typer.Option(..., help="why a human settled it outside the system (kept in the audit log)"),
            tenant: int = typer.Option(0, min=0, max=MAX_TENANT,
                                       help="refuse rows of any other tenant (0: any tenant)")) -> None:
    """Mark FAILED messages as resolved by hand: they leave the review list; nothing is sent."""
    _review("resolve", ids, tenant, require_note(note, "resolve"))


COMMANDS = (messages, replay, resolve)
