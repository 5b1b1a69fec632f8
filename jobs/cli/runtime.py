"""`outbox` commands that start the system: one process of it (worker, relay, cdc-relay, receiver) or all of it
(up)."""

from __future__ import annotations

import asyncio

import typer

from domain.settings import get_settings
from jobs.cli.console import check_lane, err, out


def worker(lane: str = typer.Option(..., help="critical | high | normal | bulk")) -> None:
    """Run one arq worker process for one lane."""
    from domain import logs
    from jobs.worker import run_worker

    check_lane(lane)
    logs.configure(f"worker:{lane}")
    run_worker(lane)


def relay(once: bool = typer.Option(False, help="run one recovery scan and exit")) -> None:
    """LISTEN/NOTIFY relay plus periodic recovery scan."""
    from domain import logs
    from jobs.relay import run_relay

    logs.configure("relay")
    asyncio.run(run_relay(once=once))


def cdc_relay(once: bool = typer.Option(False, help="relay what the slot holds now, then exit")) -> None:
    """CDC relay: outbox events from a logical replication slot (wal2json) to a Redis Stream, in commit order."""
    from domain import logs
    from jobs.cdc import run_cdc_relay

    logs.configure("cdc-relay")
    raise typer.Exit(run_cdc_relay(once=once))


def cdc_refeed(since: str = typer.Option(..., help="ISO time: every event that occurred at or after it (UTC "
                                                   "unless it says otherwise)")) -> None:
    """Publish again to the CDC stream every outbox event since a time: after a lost slot, a failover before
    PostgreSQL 17, or a Redis that lost the stream (docs/relays.md). Consumers absorb what they already had."""
    from datetime import UTC, datetime

    import redis as redis_lib

    from jobs.cdc import connect, refeed

    try:
        at = datetime.fromisoformat(since)
    except ValueError:
        err.print(f"--since {since!r} is not an ISO time (e.g. 2026-12-01T20:00:00Z); nothing published")
        raise typer.Exit(2) from None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    s = get_settings()
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=30)
    try:
        with connect() as conn:
            n = refeed(conn, r, s.cdc_stream, at)
    finally:
        r.close()
    out.print(f"republished {n} events since {at.isoformat()} to {s.cdc_stream}")


def cdc_status(group: str = typer.Option("fulfilment", help="the consumer group to measure")) -> None:
    """How far behind the CDC path is: WAL the slot keeps, messages the group has not acknowledged, the oldest's age."""
    import redis as redis_lib

    from domain.cdc.views import cdc_lag
    from jobs.cdc import connect

    s = get_settings()
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=5)
    try:
        with connect() as conn:
            lag = cdc_lag(conn, r, s.cdc_slot, s.cdc_stream, group)
    finally:
        r.close()
    age = "-" if lag.oldest_unconsumed_age_s is None else f"{lag.oldest_unconsumed_age_s:.1f}"
    out.print(f"slot={s.cdc_slot} exists={lag.slot_exists} retained_mb={lag.slot_retained_bytes / 2**20:.2f} "
              f"behind_bytes={lag.slot_behind_bytes} stream={s.cdc_stream} length={lag.stream_length} "
              f"group={group} exists={lag.group_exists} events_behind={lag.events_behind} pending={lag.pending} "
              f"oldest_unconsumed_age_s={age}")


def receiver(port: int = 8090) -> None:
    """Run the mock outside world (webhook receiver and channel providers) in its own database."""
    from jobs.ops.procs import exec_receiver

    exec_receiver(port)


def up(port: int = typer.Option(3000, help="dashboard port"), receiver_port: int = 8090,
       no_dashboard: bool = typer.Option(False, help="start everything but the dashboard"),
       time_scale: float = typer.Option(60.0, help="journey delays divided by this (60: a 30-minute nudge fires "
                                                   "in 30 s, so the journeys page is alive)"),
       scale: int = typer.Option(1, min=1, max=8, help="N relays, N workers per lane and N dashboard backends "
                                                       "(ports PORT+1…PORT+N) behind nginx on PORT"),
       pgbouncer: bool = typer.Option(False, help="with --scale N: a PgBouncer in transaction mode in front of "
                                                  "PostgreSQL for every pool (LISTEN stays direct)"),
       pgbouncer_port: int = typer.Option(6440, min=1, max=65535, help="the port of that PgBouncer")) -> None:
    """Migrate, seed, then start receiver, relay, four lane workers and the dashboard; Ctrl-C stops them."""
    from jobs.ops import demo

    if pgbouncer and scale < 2:
        err.print("--pgbouncer is part of the scaled topology: give --scale N (N >= 2) too; nothing started")
        raise typer.Exit(2)
    demo.up(err.print, port, receiver_port, no_dashboard, time_scale, scale,
            pgbouncer_port if pgbouncer else None)


COMMANDS = (worker, relay, cdc_relay, cdc_refeed, cdc_status, receiver, up)
