"""What every `outbox` command shares: the two consoles (tables on stdout, messages on stderr), the lane check and
the actor a command line change is audited as."""

from __future__ import annotations

import getpass
import os

import typer
from rich.console import Console

from domain.delivery.queue import LANES

err = Console(stderr=True)
out = Console()


def cli_actor() -> str:
    """`cli:<os user>` for the audit log: the login name, or the account of this process's uid where no login
    variable is set (cron, CI, `sudo -i`): never `cli:unknown` on a machine that has the user."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # a uid with no account (a container's arbitrary uid)
        who = f"uid{os.getuid()}"
    return f"cli:{who}"


def require_note(note: str, action: str) -> str:
    """The dashboard asks a note for the same action: the terminal does too, so the audit log says why."""
    note = note.strip()
    if not note:
        err.print(f"[red]error:[/] say why: {action} needs --note \"...\" (kept in the audit log with your name)")
        raise typer.Exit(2)
    return note[:500]


def check_lane(lane: str) -> None:
    if lane not in LANES:
        err.print(f"[red]error:[/] unknown lane {lane!r}; lanes are {', '.join(LANES)}")
        raise typer.Exit(2)
