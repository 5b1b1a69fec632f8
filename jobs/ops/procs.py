"""Start and stop the system's processes (used by `outbox up`, `outbox scenario` and the test fixtures)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

import httpx
import sqlalchemy as sa
from arq.constants import health_check_key_suffix, retry_key_prefix
from redis import Redis

from domain.delivery.queue import LANES, queue_name
from domain.settings import get_settings

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class AppDir:
    """Where one dashboard keeps what Reflex writes: `web`, the frontend it builds and serves (the backend's address,
    its port, is baked into that bundle: a second build for another port in the same directory turns the first
    dashboard's pages to that port), and `states`, its sessions on disk (Reflex's disk state manager, which every
    `reflex run` empties as it starts)."""

    web: Path
    states: Path

    def env(self) -> dict[str, str]:
        return {"REFLEX_WEB_WORKDIR": str(self.web), "REFLEX_STATES_WORKDIR": str(self.states)}


# The checkout's own `.web/` and `.states/` are the demo's (`outbox up`, and `reflex run` by hand) and no one else's.
DEMO_APP = AppDir(ROOT / ".web", ROOT / ".states")


def app_dir(name: str) -> AppDir:
    """The directories of one drill's, bench step's or test run's dashboard: `.run/<name>/web` and
    `.run/<name>/states` (`outbox up --scale` keeps its bundle there too), never the checkout's."""
    base = ROOT / ".run" / name
    return AppDir(base / "web", base / "states")


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.log, "ab")
        self.popen = subprocess.Popen(self.argv, env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT,
                                      start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int | None:
        """Signal the whole process group and return once every process in it is gone, not only the one we
        started: a server's worker processes (uvicorn `--workers`) outliving their parent keep its port, and the
        next start on that port fails "Address already in use". Whatever is left after `timeout` is SIGKILLed."""
        if self.popen is None:
            return None
        pgid = self.popen.pid  # start_new_session: the group is named after the process we started
        if self.popen.poll() is None or group_alive(pgid):
            _signal_group(pgid, sig)
            deadline = time.monotonic() + timeout
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.popen.poll() is None or group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
                self.popen.wait(5)
                wait_until(lambda: not group_alive(pgid), 10, f"process group of {self.name} to be gone")
        return self.popen.returncode

    def wait_exit(self, timeout: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


@contextlib.contextmanager
def one_build_at_a_time() -> Iterator[None]:
    """One dashboard frontend build at a time from this checkout (a file lock under `.run/`, so the parallel
    suite's workers, a bench and a drill share it): two or three builds at once on two cores pushed react-router's
    prerender of `/` past its own timeout ("Prerender: Request failed for /: The operation timed out")."""
    lock = ROOT / ".run" / "frontend-build.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class System:
    env: dict[str, str]
    logdir: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    def _proc(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> Proc:
        p = Proc(name, argv, {**self.env, **(extra_env or {})}, self.logdir / f"{name}.log")
        self.procs[name] = p
        return p.start()

    def receiver(self, port: int, reset: bool = False, workers: int | None = None) -> Proc:
        """The mock outside world, configured through its own `RECEIVER_*` variables (it reads none of ours);
        `workers`: its server processes (default: its own setting)."""
        argv = [str(BIN / "python"), "-m", "receiver", "serve", "--port", str(port)] + (["--reset"] if reset else [])
        argv += ["--workers", str(workers)] if workers else []
        p = self._proc("receiver", argv, receiver_env(self.env))
        wait_http(f"http://127.0.0.1:{port}/healthz", 60, proc=p)
        return p

    def worker(self, lane: str, fault: str = "", name: str | None = None, env: dict[str, str] | None = None) -> Proc:
        return self._proc(name or f"worker-{lane}", [str(BIN / "outbox"), "worker", "--lane", lane],
                          {"OUTBOX_FAULT": fault, **(env or {})})

    def workers(self) -> None:
        for lane in LANES:
            self.worker(lane)

    def relay(self, name: str = "relay") -> Proc:
        return self._proc(name, [str(BIN / "outbox"), "relay"])

    def cdc_relay(self, name: str = "cdc-relay") -> Proc:
        """The CDC relay (`outbox cdc-relay`): it exits 2, saying what to run, where wal_level is not logical."""
        return self._proc(name, [str(BIN / "outbox"), "cdc-relay"])

    def fulfilment(self, name: str = "fulfilment") -> Proc:
        """The second service (`python -m fulfilment consume`), configured through its own `FULFILMENT_*`."""
        return self._proc(name, [str(BIN / "python"), "-m", "fulfilment", "consume"], fulfilment_env(self.env))

    def api(self, port: int, timeout: float = 60) -> Proc:
        """The HTTP API alone (no pages): receipts land here in tests and benchmarks. uvicorn's own reading of
        X-Forwarded-For (on by default, trusting loopback) is off: which proxies are believed is
        OUTBOX_TRUSTED_PROXIES alone, as under the dashboard's granian."""
        p = self._proc("api", [str(BIN / "python"), "-m", "uvicorn", "dashboard.standalone:app", "--host",
                               "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-proxy-headers"])
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout, proc=p)
        return p

    def dashboard(self, port: int, app: AppDir, timeout: float = 240) -> Proc:
        """Pages, websocket and API on one port, built and run in `app` (DEMO_APP for the demo, app_dir(name) for
        every drill, bench step and test). Built one at a time per checkout (`one_build_at_a_time`)."""
        with one_build_at_a_time():
            p = self._proc("dashboard", [str(BIN / "reflex"), "run", "--env", "prod", "--frontend-port", str(port),
                                         "--backend-port", str(port), "--loglevel", "warning"],
                           reflex_env(self.env, app))
            wait_http(f"http://127.0.0.1:{port}/ping", timeout, proc=p)
            wait_http(f"http://127.0.0.1:{port}/", timeout, proc=p)
        return p

    def stop_all(self) -> None:
        for p in reversed(list(self.procs.values())):
            p.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    """Whether any live process (zombies apart: they hold no port, and a reaper may be slow) is in group `pgid`."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def stop_on_sigterm() -> None:
    """SIGTERM stops everything this process started, exactly like Ctrl-C (its `finally` blocks run)."""

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)


def exec_receiver(port: int) -> None:
    """Become the receiver (`outbox receiver`), handed our configuration as its own `RECEIVER_*` variables."""
    env = {**os.environ, **receiver_env(dict(os.environ))}
    os.execve(str(BIN / "python"), [str(BIN / "python"), "-m", "receiver", "serve", "--port", str(port)], env)


def receiver_env(env: dict[str, str]) -> dict[str, str]:
    """What the receiver must know of our configuration, handed over as its own variables: its database (ours,
    suffixed `_receiver`), where to post receipts, and the secrets both sides share."""
    s = get_settings()
    out = {"RECEIVER_DATABASE_URL": receiver_database_url(env.get("OUTBOX_DATABASE_URL", s.database_url)),
           "RECEIVER_APP_URL": env.get("OUTBOX_APP_URL", s.app_url),
           "RECEIVER_WEBHOOK_SECRET": env.get("OUTBOX_WEBHOOK_SECRET", s.webhook_secret),
           "RECEIVER_RECEIPT_SECRET": env.get("OUTBOX_RECEIPT_SECRET", s.receipt_secret),
           # The receiver's fault switch board exists only when we run in development.
           "RECEIVER_FAULTS": "1" if s.dev_mode else "0",
           # ... and so does its endpoint-secrets API (the demo hands it an endpoint's secret:
           # domain/endpoints/mock.py).
           "RECEIVER_SECRETS_API": "1" if s.dev_mode else "0"}
    return {k: env.get(k, v) for k, v in out.items()}


def fulfilment_env(env: dict[str, str]) -> dict[str, str]:
    """What the fulfilment service must know of our configuration, as its own variables: its database (ours,
    suffixed `_fulfilment`), the Redis server and the stream the CDC relay writes."""
    from domain.cdc.views import fulfilment_database_url

    s = get_settings()
    out = {"FULFILMENT_DATABASE_URL": fulfilment_database_url(env.get("OUTBOX_DATABASE_URL", s.database_url)),
           "FULFILMENT_REDIS_URL": env.get("OUTBOX_REDIS_URL", s.redis_url),
           "FULFILMENT_STREAM": env.get("OUTBOX_CDC_STREAM", s.cdc_stream)}
    return {k: env.get(k, v) for k, v in out.items()}


def receiver_database_url(database_url: str) -> str:
    base, sep, query = database_url.partition("?")  # a multi-host URL carries its hosts after the name
    return f"{base}_receiver{sep}{query}"


def reflex_env(env: dict[str, str], app: AppDir) -> dict[str, str]:
    """Reflex offline: bun from the npm registry (installed into .tools by the set-up), no telemetry, no version
    check, no registry speed test (see shared/notes/reflex-on-these-machines.md); everything it writes in `app`."""
    return {
        "PATH": f"{ROOT / '.tools' / 'node_modules' / '.bin'}:{BIN}:{env.get('PATH', '')}",
        "REFLEX_USE_SYSTEM_BUN": "1", "REFLEX_TELEMETRY_ENABLED": "false", "REFLEX_CHECK_LATEST_VERSION": "0",
        "NPM_CONFIG_REGISTRY": "https://registry.npmjs.org", **app.env(),
    }


def wait_until(pred: Callable[[], T], timeout: float, what: str) -> T:
    """Poll `pred` until it returns something truthy; fail loudly naming what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_worker_ready(redis: Redis, lane: str, timeout: float) -> None:
    """A lane worker is polling once arq has written its health-check key (at its first poll)."""
    wait_until(lambda: redis.exists(queue_name(lane) + health_check_key_suffix), timeout, f"a {lane} worker to poll")


def job_tries(redis: Redis, job_id: str) -> int:
    """How many times a worker has started this arq job (arq counts every try in Redis)."""
    return int(cast(bytes | None, redis.get(retry_key_prefix + job_id)) or 0)


def batch_claim_ran(application_name: str) -> bool:
    """Whether a batched lane's drain loop has run its batch claim (CLAIM_BATCH) on a connection of pool
    `application_name` (`outbox-worker-<lane>`): a paused lane's loop claims and gets nothing, which only the
    server's record of the pool's last statement shows (the per-row path's proof is `job_tries`). The claim runs in
    a pipelined transaction, so that record is its COMMIT once it has ended (the claim's own text only while it
    runs): either proves it — nothing else the pool runs before a claim is a transaction (records follow claims;
    the idle loop's next-due read is no transaction, and a new connection's record is empty)."""
    from domain.db import get_engine

    with get_engine().connect() as c:
        return bool(c.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :a AND datname = current_database() "
            "AND (query LIKE '%picked AS MATERIALIZED%' OR query = 'COMMIT')"), {"a": application_name}).scalar())


def wait_http(url: str, timeout: float, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited early; see {proc.log}")
        try:
            r = httpx.get(url, timeout=2)
            if r.status_code < 500:
                return
            last = str(r.status_code)
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.3)
    raise TimeoutError(f"{url} not up after {timeout}s ({last})")
