"""`outbox partitions ensure|list`, `outbox archive --before YYYY-MM`, `outbox prune`: the ledger's history by month
and the retention of what is not partitioned (domain/retention/; the 3 a.m. runbook: docs/operations-runbook.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from domain.settings import get_settings
from jobs.cli.console import cli_actor, err, out


def ensure(ahead: int = typer.Option(None, help="months ahead of this one (default OUTBOX_PARTITIONS_AHEAD)")) -> None:
    """Create this month's and the next months' partitions, and move rows out of a DEFAULT partition."""
    from domain.retention.partitions import ensure_partitions

    made = ensure_partitions(ahead if ahead is not None else get_settings().partitions_ahead)
    err.print(f"created {', '.join(made)}" if made else "every partition was there")


def list_partitions() -> None:
    """Every partition of the partitioned tables, oldest month first."""
    from domain.retention.partitions import partitions

    t = Table(title="partitions")
    for col in ("table", "partition", "month"):
        t.add_column(col)
    for p in partitions():
        t.add_row(p.parent, p.name, f"{p.month:%Y-%m}" if p.month else "DEFAULT")
    out.print(t)


def archive(before: str = typer.Option(..., "--before", help="the first month to KEEP, YYYY-MM: every month "
                                                            "before it is archived"),
            out_dir: Path = typer.Option(None, "--out",
                                         help="directory for the files (default .run/archive/)")) -> None:
    """Write each settled month before --before to a redacted file, then detach and drop its partitions.
    Refused (exit 1, nothing changed) while any of those months still owes a message or a receipt."""
    from domain.retention.archive import ArchiveRefused, archive_before
    from domain.retention.months import parse_month
    from jobs.ops.procs import ROOT

    try:
        cutoff = parse_month(before)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    target = out_dir or ROOT / ".run" / "archive"
    try:
        done = archive_before(cutoff, target, actor_ref=cli_actor())
    except ArchiveRefused as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    except ValueError as exc:  # a month it must not take (this one or later): nothing changed
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if not done:
        err.print(f"no partition before {before}: nothing to archive")
    for m in done:
        err.print(f"archived {m.month}: {m.messages} messages, {m.attempts} attempts, {m.receipts} receipts "
                  f"-> {m.path}; dropped {', '.join(m.dropped)}")


def prune(days: float = typer.Option(None, help="keep this many days (default OUTBOX_RETENTION_DAYS)"),
          dry_run: bool = typer.Option(False, "--dry-run", help="count what would go; change nothing")) -> None:
    """Delete what retention lets go among the tables that are not partitioned."""
    from domain.retention.prune import prune as run_prune

    keep = days if days is not None else get_settings().retention_days
    try:
        done = run_prune(keep, dry_run=dry_run)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    verb = "would delete" if dry_run else "deleted"
    for table, n in done.items():
        err.print(f"{table}: {verb} {n} (older than {keep:g} days)")


COMMANDS = (archive, prune)
