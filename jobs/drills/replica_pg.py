"""The clusters `outbox replica-drill` owns, never the machine's own (127.0.0.1:5432), in a directory of the server's
user (`cluster_home("replica-drill")`: outside the checkout, which may sit where `postgres` cannot reach):
a primary (initdb, a physical replication slot), its streaming standby (pg_basebackup -R through that slot) and an
"outside" cluster for the receiver — the world we deliver to does not fail over with our database, so what it
received stays counted across the promotion. Each on a port of its own; all stopped and removed on the way out (their
server logs kept in `.run/replica-drill-logs/`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from jobs.drills.chaos.owned import OwnedPostgres, cluster_home, remove_cluster_home
from jobs.ops.procs import ROOT, wait_until

HOME = "replica-drill"  # the name of its clusters' home (cluster_home)
LOG_DIR = ROOT / ".run" / "replica-drill-logs"
SLOT_NAME = "drill_standby"


def port_near(preferred: int) -> int:
    """`preferred` when nothing listens there, else any free port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds: a port in TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster(OwnedPostgres):
    def sql(self, statement: str, db: str = "postgres") -> list[tuple[object, ...]]:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/{db}", autocommit=True,
                             connect_timeout=3) as c:
            cur = c.execute(statement)
            return list(cur.fetchall()) if cur.description else []

    def basebackup_from(self, primary: Cluster) -> None:
        """A copy of `primary` that streams from it through the slot (`-R` writes standby.signal and the
        primary_conninfo)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self._own()
        self._run("pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1", "-p", str(primary.port), "-U",
                  "postgres", "-X", "stream", "-S", SLOT_NAME, "-R", "-c", "fast")

    def _own(self) -> None:
        if os.geteuid() == 0:  # the server runs as `postgres` (see pg_command)
            subprocess.run(["chown", "-R", "postgres", str(self.base)], check=True)

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


@dataclass
class Clusters:
    primary: Cluster
    standby: Cluster
    outside: Cluster

    def url(self, db: str) -> str:
        """Both hosts in one URL: every connection the system opens lands on whichever of them is the primary."""
        return (f"postgresql+psycopg://postgres@/{db}?host=127.0.0.1:{self.primary.port}"
                f"&host=127.0.0.1:{self.standby.port}&target_session_attrs=read-write")

    def lag_bytes(self) -> int:
        row = self.primary.sql("SELECT coalesce(max(pg_current_wal_lsn() - replay_lsn), 0)::bigint "
                               "FROM pg_stat_replication")
        return int(str(row[0][0]))


def _streaming(primary: Cluster, sync: bool) -> bool:
    rows = primary.sql("SELECT state, sync_state FROM pg_stat_replication")
    return any(r[0] == "streaming" and (r[1] == "sync" or not sync) for r in rows)


@contextmanager
def owned_clusters(slot: int, sync: bool) -> Iterator[Clusters]:
    """Primary streaming to its standby (synchronously with `sync`), plus the outside cluster; whatever happens, every
    cluster is stopped and its home removed afterwards (server logs kept in `.run/replica-drill-logs/`)."""
    home = cluster_home(HOME)  # what a run killed outright left behind is stopped and removed first
    cs = Clusters(Cluster(port_near(55440 + slot), home / "primary"),
                  Cluster(port_near(55450 + slot), home / "standby"),
                  Cluster(port_near(55460 + slot), home / "outside"))
    try:
        t = time.monotonic()
        for c in (cs.primary, cs.outside):
            c.init()
            c.start()
        cs.primary.sql(f"SELECT pg_create_physical_replication_slot('{SLOT_NAME}')")
        cs.standby.basebackup_from(cs.primary)
        cs.standby.start()
        if sync:  # set after the copy: a promoted standby must not wait for a standby of its own
            cs.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            cs.primary.sql("SELECT pg_reload_conf()")
        wait_until(lambda: _streaming(cs.primary, sync), 60, "the standby to stream")
        print(f"replica drill: primary :{cs.primary.port} streams to standby :{cs.standby.port} "
             f"({'synchronous' if sync else 'asynchronous'}), outside :{cs.outside.port}; clusters in {home}; "
             f"{time.monotonic() - t:.1f} s", flush=True)
        yield cs
    finally:
        for name, c in (("primary", cs.primary), ("standby", cs.standby), ("outside", cs.outside)):
            c.keep_log(LOG_DIR / f"{name}{'-sync' if sync else ''}.log")
            c.remove()
        remove_cluster_home(HOME)
