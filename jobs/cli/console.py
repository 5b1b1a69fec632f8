"""What every `outbox` command shares: the two consoles (tables on stdout, messages on stderr), the lane check and
the actor a command line change is audited as."""

from __future__ import annotations

import os

import typer
from rich.console import Console

from domain.delivery.queue import LANES

err = Console(stderr=True)
out = Console()


def cli_actor() -> str:
    return f"cli:{os.environ.get('USER') or os.environ.get('LOGNAME') or 'unknown'}"


def check_lane(lane: str) -> None:
    if lane not in LANES:
        err.print(f"[red]error:[/] unknown lane {lane!r}; lanes are {', '.join(LANES)}")
        raise typer.Exit(2)
