"""The `outbox` app: every command registered under its name, and `main`, the console script's entry point."""

from __future__ import annotations

import os
import sys

import typer

from jobs.cli import apikeys, campaigns, drills, messages, oncall, retention, runtime
from jobs.cli.console import err

app = typer.Typer(help="Outbox: durable notification outbox. Run `outbox up` to start everything.",
                  no_args_is_help=True, add_completion=False)
apikey = typer.Typer(help="Tenant-scoped API keys", no_args_is_help=True)
app.add_typer(apikey, name="apikey")
campaign = typer.Typer(help="Campaigns on the bulk lane", no_args_is_help=True)
app.add_typer(campaign, name="campaign")
partitions = typer.Typer(help="Month partitions of attempts and receipts", no_args_is_help=True)
app.add_typer(partitions, name="partitions")

for command in (*oncall.COMMANDS, *messages.COMMANDS, *runtime.COMMANDS, *drills.COMMANDS, *retention.COMMANDS):
    app.command()(command)
apikeys.register(apikey)  # create, list, revoke
campaign.command("create")(campaigns.create)
campaign.command("status")(campaigns.status)
partitions.command("ensure")(retention.ensure)
partitions.command("list")(retention.list_partitions)


def main() -> None:
    try:
        app()
    except Exception as exc:  # a clear one-line error for operators; the traceback with OUTBOX_DEBUG=1
        if os.environ.get("OUTBOX_DEBUG"):
            raise
        err.print(f"[red]error:[/] {type(exc).__name__}: {exc}")
        sys.exit(1)
