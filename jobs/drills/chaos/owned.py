"""What a chaos run owns, next to the demo and a test run: its knobs, its PostgreSQL cluster (in a directory of the
server's user, see `cluster_home`; its log kept in `.run/chaos-logs/`), its Redis server and every process of the
system on free ports; all of it stopped and removed on the way out."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis as redis_lib

from domain.delivery.queue import LANES
from jobs.ops.dbadmin import isolated_environment
from jobs.ops.procs import ROOT, System, wait_until, wait_worker_ready

PG_HOME = "chaos-pg"  # the name of its cluster's home (cluster_home)
LOG_DIR = ROOT / ".run" / "chaos-logs"
DB_NAME = "outbox_chaos"
TENANT = 7  # its seeded recipients have no quiet hours: nothing is legitimately held past the drain
LEASE_SECONDS = 3.0
SAMPLE_EVERY = 0.25
# Seven workers, the relay, the API and the receiver, each with its pools (a worker: up to 10 async + 10 sync), all
# reconnecting at once after the restart: Debian's default of 100 ran out ("too many clients", CI, seed 792243900).
MAX_CONNECTIONS = 300
# What a cluster needs for the CDC relay's logical decoding (OwnedPostgres.options, logical_decoding_options): the
# system cluster runs wal_level = replica, and a test or drill never changes it.
LOGICAL_DECODING = ("-c wal_level=logical", "-c max_replication_slots=10", "-c max_wal_senders=10")
RATE_BEFORE_S, RATE_WINDOW_S, RECOVERED_SHARE = 4.0, 3.0, 0.95
# The knobs every process of the run shares: short leases and scans so a 30 s run sees recovery, many attempts with
# a short backoff so a receiver down for seconds delays messages instead of failing them, journeys 600x faster,
# and a bulk pace slow enough that the campaign keeps the bulk workers busy for seconds (a stall catches them mid-send).
CHAOS_ENV = {"OUTBOX_LEASE_SECONDS": str(LEASE_SECONDS), "OUTBOX_SCAN_INTERVAL": "0.5", "OUTBOX_MAX_ATTEMPTS": "50",
             "OUTBOX_BACKOFF_BASE": "0.2", "OUTBOX_BACKOFF_CAP": "2.0", "OUTBOX_TIME_SCALE": "600",
             "OUTBOX_API_RATE": "100000", "OUTBOX_BULK_RATE": "20"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def now_s(t0: float) -> float:
    return time.monotonic() - t0


def say(line: str, into: list[str] | None = None) -> None:
    print(line, flush=True)
    if into is not None:
        into.append(line)


def worker_names() -> list[str]:
    """Two workers per lane (a stalled or killed one leaves another to claim its rows), one for codes."""
    return [f"worker-{lane}-{i}" for lane in LANES for i in (1, 2) if lane != "critical" or i == 1]


def pg_command(*argv: str) -> list[str]:
    """A PostgreSQL server program (the newest installed), run as the `postgres` user when we are root (initdb and
    the server refuse to run as root), else as ourselves."""
    bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not bindir:
        raise RuntimeError("PostgreSQL is not installed: run 'sudo apt-get install -y postgresql'")
    cmd = [str(bindir[-1] / argv[0]), *argv[1:]]
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def logical_decoding_options(plugin: str = "wal2json") -> tuple[str, ...]:
    """LOGICAL_DECODING, plus `plugin` in the server's list of allowed output plugins where the installed server
    has one (`output_plugin_libraries`, not a setting of stock PostgreSQL: this machine's build refuses any plugin
    outside it, "may not be used as an output plugin"). Asked of the server program, never guessed: a stock server
    would refuse to start with a setting it does not know."""
    described = subprocess.run(pg_command("postgres", "--describe-config"), capture_output=True, text=True,
                               timeout=60, cwd="/").stdout
    for line in described.splitlines():
        name, *rest = line.split("\t")
        if name == "output_plugin_libraries":
            allowed = [p.strip() for p in (rest[3] if len(rest) > 3 else "").split(",") if p.strip()]
            return (*LOGICAL_DECODING, f"-c output_plugin_libraries={','.join([*allowed, plugin])}")
    return LOGICAL_DECODING


def _home_note(name: str) -> Path:
    return ROOT / ".run" / f"{name}.home"


def cluster_home(name: str) -> Path:
    """A fresh directory for the clusters of drill `name`, owned by the user their servers run as. Never inside the
    checkout: a checkout inside a 0700 directory (a home, a `mktemp -d`) is out of the `postgres` user's reach, so
    the clusters live in a private directory under the system's temporary directory, handed to `postgres` when we
    are root. Its path is noted in `.run/<name>.home`, so that the next run stops and removes what a run killed
    outright left behind (remove_cluster_home)."""
    remove_cluster_home(name)
    note = _home_note(name)
    note.parent.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix=f"outbox-{name}-"))  # mode 0700, ours
    note.write_text(f"{home}\n")
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
        if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(home)]).returncode != 0:
            raise RuntimeError(f"the postgres user cannot write {home}: point TMPDIR at a directory it can enter")
    return home


def remove_cluster_home(name: str) -> None:
    """Stop every server still running in drill `name`'s cluster home and remove it (a no-op when there is none)."""
    note = _home_note(name)
    if not note.exists():
        return
    home = Path(note.read_text().strip())
    # Only what cluster_home made: a note edited by hand never points the removal anywhere else.
    if home.parent == Path(tempfile.gettempdir()) and home.name.startswith(f"outbox-{name}-") and home.is_dir():
        for pid_file in home.glob("*/data/postmaster.pid"):  # each cluster in <home>/<name>/data
            subprocess.run(pg_command("pg_ctl", "-D", str(pid_file.parent), "-m", "immediate", "-w", "stop"),
                           capture_output=True, timeout=120, cwd="/")
        shutil.rmtree(home, ignore_errors=True)
    note.unlink()


@dataclass
class OwnedPostgres:
    """A cluster of a drill's own on its own port, never the system one: its data directory, socket and server log
    under `base`, inside a cluster_home (the server's user owns it)."""

    port: int
    base: Path
    # More server settings, e.g. ("-c wal_level=logical", "-c max_replication_slots=10") for the CDC tests.
    options: tuple[str, ...] = ()

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # cwd "/": the postgres user may not enter our checkout.
        p = subprocess.run(pg_command(*argv), capture_output=True, text=True, timeout=120, cwd="/")
        if check and p.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {p.returncode}: {(p.stderr or p.stdout).strip()[-500:]}")
        return p

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "postgres", str(self.base)], check=True)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust")

    def start(self) -> None:
        server = " ".join((f"-p {self.port} -h 127.0.0.1 -k {self.base} -c max_connections={MAX_CONNECTIONS}",
                           *self.options))
        self._run("pg_ctl", "-D", str(self.data), "-o", server,
                  "-l", str(self.base / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def keep_log(self, into: Path) -> None:
        """Copy the server's log out of its home (removed with it) into `.run/`."""
        if (self.base / "server.log").exists():
            into.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.base / "server.log", into)

    def accepts(self) -> bool:
        try:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=1):
                return True
        except psycopg.Error:
            return False


@dataclass
class OwnedRedis:
    """A redis-server of the drill's own. `appendonly`: an append-only file in `workdir`, fsynced as `fsync` says
    (`always`: before each reply, so a server killed outright and started again keeps every entry it acknowledged,
    the CDC profile's stream; `everysec`: what docs/relays.md recommends, up to a second lost with the machine);
    without it, a restart starts empty."""

    port: int
    popen: subprocess.Popen[bytes] | None = None
    appendonly: bool = False
    workdir: Path = ROOT / ".run" / "chaos-redis"
    logfile: Path = LOG_DIR / "redis.log"
    fsync: str = "always"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        durability = ["--appendonly", "yes", "--appendfsync", self.fsync] if self.appendonly else ["--appendonly", "no"]
        with open(self.logfile, "ab") as log:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *durability,
                 "--dir", str(self.workdir)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        r = redis_lib.Redis(port=self.port)
        wait_until(lambda: _pings(r), 20, f"redis-server on port {self.port}")
        r.close()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def _pings(r: redis_lib.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis_lib.RedisError:
        return False


@contextmanager
def owned_system(ports: dict[str, int]) -> Iterator[tuple[System, OwnedPostgres, OwnedRedis]]:
    """Cluster, Redis and every process of the system; all of it is stopped on the way out, whatever happened."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = OwnedPostgres(ports["postgres"], cluster_home(PG_HOME) / "pg")
    rds = OwnedRedis(ports["redis"])
    system: System | None = None
    try:
        pg.init()
        pg.start()
        rds.start()
        os.environ.update({"OUTBOX_DATABASE_URL": f"{pg.url}/{DB_NAME}",
                           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{rds.port}/0"})
        isolated_environment(DB_NAME, 0, OUTBOX_RECEIVER_URL=f"http://127.0.0.1:{ports['receiver']}",
                             OUTBOX_APP_URL=f"http://127.0.0.1:{ports['api']}", **CHAOS_ENV)
        system = System(dict(os.environ), LOG_DIR)
        system.receiver(ports["receiver"], reset=True)
        system.api(ports["api"])
        system.relay()
        r = redis_lib.Redis(port=rds.port)
        for name in worker_names():
            system.worker(name.split("-")[1], name=name)
        for lane in LANES:
            wait_worker_ready(r, lane, 90)
        r.close()
        yield system, pg, rds
    finally:
        if system is not None:
            for p in system.procs.values():  # a stalled worker must run again to hear SIGTERM
                if p.alive() and p.popen is not None:
                    signal_group(p.popen.pid, signal.SIGCONT)
            system.stop_all()
        rds.stop()
        pg.stop()
        pg.keep_log(LOG_DIR / "postgres.log")
        remove_cluster_home(PG_HOME)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
