"""`outbox up` and its parts: migrate, seed the demo, then start every process and keep them running until Ctrl-C.
`say` prints a line for the operator (the command line hands in its console)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from domain.settings import get_settings, reload_settings
from jobs.ops import scaled
from jobs.ops.dbadmin import ensure_database
from jobs.ops.dbadmin import migrate as run_migrate
from jobs.ops.procs import DEMO_APP, ROOT, System, stop_on_sigterm
from jobs.ops.seed import DEMO_PASSWORD, OPERATORS, seed, seed_journeys, seed_recipients

Say = Callable[[str], None]


def migrate(say: Say) -> None:
    """Create the database if needed and apply every Alembic migration."""
    url = get_settings().database_url
    created = ensure_database(url)
    run_migrate(url)
    say(f"[green]migrated[/] database={url.rsplit('/', 1)[-1]} created={created}")


def seed_demo(say: Say, recipients: int = 0) -> None:
    """The demo tenants, orders, operators and recipients (idempotent), and `recipients` campaign recipients."""
    created = seed()
    if recipients:
        created["campaign recipients"] = seed_recipients(recipients)
    say(f"[green]seeded[/] {created}; operators: "
        + ", ".join(f"{login} (tenant {t or 'none'}, {role})" for t, login, _, role in OPERATORS)
        + f", password {DEMO_PASSWORD!r}")


def start_cdc(say: Say, system: System) -> None:
    """OUTBOX_CDC=1: the CDC relay and the fulfilment service, only where the cluster can decode its WAL; else a
    plain line saying what to run, and the rest of the system starts without them (fail closed, never guessed)."""
    from domain.cdc.slot import LogicalDecodingUnavailable
    from jobs import cdc

    try:
        with cdc.connect() as conn:
            cdc.prepare(conn, get_settings().cdc_slot)
    except LogicalDecodingUnavailable as e:
        say(f"[red]CDC relay not started:[/] {e}")
        return
    say("starting the CDC relay and the fulfilment service (OUTBOX_CDC) …")
    system.cdc_relay()
    system.fulfilment()


def up(say: Say, port: int, receiver_port: int, no_dashboard: bool, time_scale: float, scale: int = 1,
       pgbouncer_port: int | None = None) -> None:
    """Migrate, seed, start receiver, relay, four lane workers, with OUTBOX_CDC the CDC relay and the fulfilment
    service, and (unless told not to) the dashboard; restart any
    that exits; on Ctrl-C or SIGTERM stop them all. `scale` N > 1: N relays, N workers per lane, N dashboard
    backends on PORT+1…PORT+N behind nginx on PORT, sharing sessions in Redis db 1 (jobs/ops/scaled.py);
    `pgbouncer_port`: their pools through a PgBouncer on that port (jobs/ops/pgbouncer.py)."""
    os.environ["OUTBOX_TIME_SCALE"] = str(time_scale)
    os.environ.setdefault("OUTBOX_ENV", "development")
    s = reload_settings()
    if s.env == "development":
        say("[yellow]development mode (the demo):[/] demo secrets, fault switches on /ops, /metrics open. "
            "Production runs each process with OUTBOX_ENV=production and real secrets.")
    migrate(say)
    seed_demo(say)
    moved = seed_journeys()
    if moved:
        say(f"demo leads put mid-journey: {moved} events")
    say(f"journey time scale {time_scale:g}: a 30-minute nudge fires after {30 * 60 / time_scale:.0f} s")
    env = {**os.environ, "OUTBOX_RECEIVER_URL": f"http://127.0.0.1:{receiver_port}",
           "OUTBOX_APP_URL": f"http://127.0.0.1:{port}"}
    system = System(env, ROOT / ".run" / "logs")
    stop_on_sigterm()  # the children too
    try:
        say("starting receiver, relay and lane workers …")
        system.receiver(receiver_port)
        if scale > 1:
            say(f"scale {scale}: {scale} relays, {scale} workers per lane, {scale} dashboard backends behind nginx"
                + (f", their pools through PgBouncer on {pgbouncer_port}" if pgbouncer_port else "") + " …")
            state = s.redis_url.rsplit("/", 1)[0] + "/1"
            scaled.start(system, scaled.Topology(port, tuple(port + i for i in range(1, scale + 1)), state,
                                                 ROOT / ".run" / "scale-demo", pgbouncer_port),
                         dashboards=not no_dashboard)
        else:
            system.relay()
            system.workers()
        if s.cdc:
            start_cdc(say, system)
        if not no_dashboard and scale == 1:
            say("starting dashboard (first build takes a minute) …")
            system.dashboard(port, DEMO_APP)
        say(f"\n[bold green]Outbox is up[/]: open http://127.0.0.1:{port}/login  "
            f"(alice, bob, sam — tenant 42; carol — tenant 7; pat — platform on-call; password {DEMO_PASSWORD})\n"
            f"API docs http://127.0.0.1:{port}/api/docs · metrics http://127.0.0.1:{port}/metrics · "
            f"logs {system.logdir}\nCtrl-C stops everything.")
        while True:
            time.sleep(2)
            dead = [p.name for p in system.procs.values() if not p.alive()]
            if dead:
                say(f"[red]process exited:[/] {', '.join(dead)} — see {system.logdir}")
                for name in dead:
                    system.procs[name].start()
    except KeyboardInterrupt:
        pass
    finally:
        system.stop_all()
