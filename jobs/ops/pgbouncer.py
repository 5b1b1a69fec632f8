"""PgBouncer in transaction mode in front of the scaled topology (`outbox up --scale N --pgbouncer`, the scale-out
test, the bench's `*_pgbouncer` keys).

Debian's `pgbouncer` (1.18, installed by the set-up like nginx) runs as a child process of ours, never the system
service: its configuration, auth file and pid live in a run directory of its own, it listens on loopback only and
lets every local user in (`auth_type = trust`, as the project-local PostgreSQL does), and sends each database to the
PostgreSQL of OUTBOX_DATABASE_URL under the client's own user name (the wildcard database `*`).

Transaction mode: a server connection is a client's only for one transaction, so everything that must outlive a
transaction stays off it — LISTEN (the relay), the CDC relay's replication slot, migrations, `outbox check` and
the admin commands keep OUTBOX_DATABASE_URL; the pools (domain/db.py get_engine, domain/delivery/store.py) use
OUTBOX_PGBOUNCER_URL and prepare nothing server-side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

# Server connections per (database, user) pair: what one PostgreSQL database of the topology holds, however many
# processes and pools sit behind PgBouncer.
DEFAULT_POOL_SIZE = 20
# Clients PgBouncer accepts (every pool of every process of the topology, each up to 10 + 10 connections).
MAX_CLIENT_CONN = 2000


@dataclass(frozen=True)
class Bouncer:
    port: int
    run_dir: Path  # pgbouncer.ini, userlist.txt
    server_host: str
    server_port: int
    pool_size: int = DEFAULT_POOL_SIZE

    def url(self, database_url: str) -> str:
        """OUTBOX_PGBOUNCER_URL for a database of OUTBOX_DATABASE_URL: the same user and database, PgBouncer's
        address."""
        u = make_url(database_url)
        return u.set(host="127.0.0.1", port=self.port, query={}).render_as_string(hide_password=False)

    def admin_libpq(self, user: str = "postgres") -> str:
        """PgBouncer's admin console (SHOW POOLS, SHOW CLIENTS)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/pgbouncer"


def for_database(database_url: str, port: int, run_dir: Path, pool_size: int = DEFAULT_POOL_SIZE) -> Bouncer:
    """A PgBouncer in front of the PostgreSQL of `database_url` (one host: PgBouncer 1.18 does not follow a primary
    across several)."""
    u = make_url(database_url)
    if isinstance(u.query.get("host"), tuple):
        raise ValueError("--pgbouncer needs OUTBOX_DATABASE_URL to name one PostgreSQL host, not several")
    return Bouncer(port, run_dir, u.host or "127.0.0.1", u.port or 5432, pool_size)


def binary() -> str:
    found = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.path.exists(p)), None)
    if found is None:
        raise RuntimeError("pgbouncer is not installed: run 'sudo apt-get install -y pgbouncer' (the set-up in .ci/ "
                           "does)")
    return found


def config(b: Bouncer, users: tuple[str, ...] = ("postgres",)) -> str:
    # As root PgBouncer refuses to run unless told which user to become; `postgres` exists wherever PostgreSQL is
    # installed. It reads its files before it drops to that user and logs to stderr (our log file, already open).
    user = "user = postgres\n" if os.geteuid() == 0 else ""
    return f"""; Written by jobs/ops/pgbouncer.py for this run; not a production configuration (loopback, trust).
[databases]
* = host={b.server_host} port={b.server_port}

[pgbouncer]
{user}listen_addr = 127.0.0.1
listen_port = {b.port}
unix_socket_dir =
auth_type = trust
auth_file = {b.run_dir / 'userlist.txt'}
admin_users = {','.join(users)}
stats_users = {','.join(users)}
pool_mode = transaction
default_pool_size = {b.pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = {MAX_CLIENT_CONN}
; a client waits this long for a server connection before it is told so (the pools' own timeouts are shorter)
query_wait_timeout = 60
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
log_connections = 0
log_disconnections = 0
"""


def write(b: Bouncer, users: tuple[str, ...] = ("postgres",)) -> Path:
    b.run_dir.mkdir(parents=True, exist_ok=True)
    (b.run_dir / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in users))
    ini = b.run_dir / "pgbouncer.ini"
    ini.write_text(config(b, users))
    if os.geteuid() == 0:  # read by `postgres` too, should PgBouncer look again after dropping to it
        for p in (b.run_dir, ini, b.run_dir / "userlist.txt"):
            p.chmod(0o755 if p.is_dir() else 0o644)
    return ini


def argv(b: Bouncer) -> list[str]:
    return [binary(), str(b.run_dir / "pgbouncer.ini")]


def pools(b: Bouncer, database: str) -> list[dict[str, str]]:
    """SHOW POOLS for `database` (one row per user): cl_active, cl_waiting, sv_active, sv_idle, sv_used, …. The admin
    console speaks the simple query protocol only: psql asks it."""
    out = subprocess.run(["psql", b.admin_libpq(), "-AF", "\t", "-c", "SHOW POOLS"], capture_output=True, text=True,
                         timeout=10, check=True).stdout.splitlines()
    head = out[0].split("\t")
    rows = [dict(zip(head, line.split("\t"), strict=False)) for line in out[1:] if "\t" in line]
    return [r for r in rows if r.get("database") == database]


def server_connections(row: dict[str, str]) -> int:
    """The server connections PgBouncer holds for one pool, busy or not."""
    return sum(int(row.get(k, 0) or 0) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))


def client_connections(row: dict[str, str]) -> int:
    """The client connections of one pool: what its processes would hold on PostgreSQL without PgBouncer."""
    return sum(int(row.get(k, 0) or 0) for k in ("cl_active", "cl_waiting", "cl_active_cancel_req",
                                                   "cl_waiting_cancel_req"))
