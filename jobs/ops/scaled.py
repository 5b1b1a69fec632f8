"""Past one process of each (`outbox up --scale N`, the scale-out test): N dashboard backends behind ONE port through
nginx, sharing sessions through Reflex's Redis state manager; N workers per lane and N relays; one PostgreSQL, one
Redis.

The frontend is built once, for the proxy's address (Reflex bakes the backend URL into the bundle), into a web
directory of its own (`<run_dir>/web`, as every build but the demo's: jobs/ops/procs.py AppDir), so it never disturbs
a single-backend build in `.web/`. nginx serves that bundle and proxies the backend paths (the `/_event` websocket,
`/ping`, the HTTP API, `/healthz`, `/metrics`) round-robin to the backends, each started `--backend-only`. A backend
that dies is skipped (nginx passes a request it could not send to the next one); a tab on it reconnects to another,
which loads the session from Redis.

With a PgBouncer port (`outbox up --scale N --pgbouncer`), a PgBouncer in transaction mode (jobs/ops/pgbouncer.py)
starts first and every relay, worker and backend gets OUTBOX_PGBOUNCER_URL: their pools go through it, unprepared;
the relays' LISTEN (and any CDC relay's replication) stays on OUTBOX_DATABASE_URL.

Diagnostics and the test pin a browser to one backend with the cookie `outbox_backend=<i>` (1-based); while that
backend is down the others stand in for it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from domain.delivery.queue import LANES
from jobs.ops import pgbouncer
from jobs.ops.procs import (
    BIN,
    ROOT,
    AppDir,
    Proc,
    System,
    one_build_at_a_time,
    reflex_env,
    wait_http,
    wait_until,
)

# What the backends answer; every other path is the static bundle (an unknown page gets the bundle's own 404.html,
# whose router renders the page, as Reflex's own static mount does).
BACKEND_PATHS = ("_event", "_upload", "_health", "_all_routes", "ping", "auth-codespace", "api", "healthz", "metrics")
PIN_COOKIE = "outbox_backend"
# Where the nginx we start reaches its backends from (it listens and connects on loopback only): its backends trust
# its X-Forwarded-For, so the login throttle and the API's per-address limits count each client, not the proxy.
# The header is the proxy's own (`$remote_addr`, replacing whatever the caller sent): a caller on this host reaches
# the proxy from 127.0.0.1 too, and an appended header would leave its forged address counted left of that hop.
PROXY_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Topology:
    port: int  # the one public port (nginx)
    backend_ports: tuple[int, ...]
    state_redis_url: str  # Reflex's Redis state manager: the sessions every backend shares
    run_dir: Path  # nginx's config, pid and temp files, and the bundle's web directory
    pgbouncer_port: int | None = None  # a PgBouncer in front of PostgreSQL for every pool of the topology
    pgbouncer_pool_size: int = pgbouncer.DEFAULT_POOL_SIZE

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def app(self) -> AppDir:
        return AppDir(self.run_dir / "web", self.run_dir / "states")

    @property
    def web_dir(self) -> Path:
        return self.app.web

    @property
    def static_dir(self) -> Path:
        return self.web_dir / "build" / "client"

    def backend_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.backend_ports[i]}"

    def bouncer(self, database_url: str) -> pgbouncer.Bouncer | None:
        if self.pgbouncer_port is None:
            return None
        return pgbouncer.for_database(database_url, self.pgbouncer_port, self.run_dir / "pgbouncer",
                                      self.pgbouncer_pool_size)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if found is None:
        raise RuntimeError("nginx is not installed: run 'sudo apt-get install -y nginx' (the set-up in .ci/ does)")
    return found


def nginx_conf(t: Topology, error_log: Path) -> str:
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=3s;" for p in t.backend_ports)
    pinned = []
    for i, p in enumerate(t.backend_ports):
        others = "\n".join(f"    server 127.0.0.1:{q} backup;" for q in t.backend_ports if q != p)
        pinned.append(f"  upstream dashboard_{i + 1} {{\n    server 127.0.0.1:{p} max_fails=1 fail_timeout=3s;\n"
                      f"{others}\n  }}")
    pins = "\n".join(f'    "{i + 1}" dashboard_{i + 1};' for i in range(len(t.backend_ports)))
    tmp = t.run_dir / "nginx-tmp"
    # As root nginx would hand its workers to `nobody`, who may not read a checkout under a private home.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""# Written by jobs/ops/scaled.py for this run; not a production configuration (no TLS, loopback only).
{user}worker_processes 1;
daemon off;
pid {t.run_dir / 'nginx.pid'};
error_log {error_log} warn;
events {{ worker_connections 4096; }}
http {{
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  sendfile on;
  gzip_static on;
  client_max_body_size 4m;  # above the app's own limit (OUTBOX_MAX_BODY_BYTES): the app answers 413 itself
  map $http_upgrade $connection_upgrade {{ default upgrade; "" close; }}
  upstream dashboards {{
{servers}
  }}
{chr(10).join(pinned)}
  map $cookie_{PIN_COOKIE} $dashboard_pool {{
    default dashboards;
{pins}
  }}
  server {{
    listen 127.0.0.1:{t.port};
    root {t.static_dir};
    location / {{ try_files $uri $uri.html $uri/index.html /404.html; }}
    location ~ ^/({'|'.join(BACKEND_PATHS)})(/|$) {{
      proxy_pass http://$dashboard_pool;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_connect_timeout 2s;
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;
      proxy_buffering off;
      proxy_next_upstream error timeout http_502;
    }}
  }}
}}
"""


def trusting_proxy(env: dict[str, str]) -> str:
    """`OUTBOX_TRUSTED_PROXIES` for a backend behind our nginx: whatever the operator trusts already (a load
    balancer in front of it) and the proxy itself."""
    given = env.get("OUTBOX_TRUSTED_PROXIES", "").strip()
    return f"{given},{PROXY_ADDRESS}" if given else PROXY_ADDRESS


def dashboard_env(t: Topology, env: dict[str, str]) -> dict[str, str]:
    """Every backend (and the build) sees the same bundle directory, the proxy as its public address and the shared
    state manager, and trusts the proxy's X-Forwarded-For; one granian worker each (the processes are the scale unit
    here, not threads)."""
    return {**env, **reflex_env(env, t.app), "REFLEX_API_URL": t.url,
            "OUTBOX_APP_URL": t.url, "OUTBOX_DASHBOARD_STATE_URL": t.state_redis_url, "GRANIAN_WORKERS": "1",
            "OUTBOX_TRUSTED_PROXIES": trusting_proxy(env)}


def build_frontend(t: Topology, env: dict[str, str], log: Path, timeout: float = 900) -> None:
    """The static bundle, built for the proxy's address (~40 s cold on 2 cores, seconds when the directory exists)."""
    t.web_dir.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with one_build_at_a_time(), open(log, "ab") as fh:
        p = subprocess.run([str(BIN / "reflex"), "export", "--frontend-only", "--no-zip", "--env", "prod",
                            "--loglevel", "warning"], env=dashboard_env(t, env), cwd=ROOT, stdout=fh,
                           stderr=subprocess.STDOUT, timeout=timeout)
    if p.returncode != 0 or not (t.static_dir / "index.html").exists():
        raise RuntimeError(f"the dashboard bundle did not build (exit {p.returncode}); see {log}")


def dashboard_backend(system: System, t: Topology, i: int, timeout: float = 180) -> Proc:
    name = f"dashboard-{i + 1}"
    p = system._proc(name, [str(BIN / "reflex"), "run", "--env", "prod", "--backend-only", "--backend-host",
                            "127.0.0.1", "--backend-port", str(t.backend_ports[i]), "--loglevel", "warning"],
                     dashboard_env(t, system.env))
    wait_http(f"{t.backend_url(i)}/ping", timeout, proc=p)
    return p


def proxy(system: System, t: Topology, timeout: float = 30) -> Proc:
    (t.run_dir / "nginx-tmp").mkdir(parents=True, exist_ok=True)
    conf = t.run_dir / "nginx.conf"
    conf.write_text(nginx_conf(t, system.logdir / "proxy-error.log"))
    p = system._proc("proxy", [nginx_binary(), "-p", str(t.run_dir), "-c", str(conf), "-e",
                               str(system.logdir / "proxy-error.log")])
    wait_http(f"{t.url}/ping", timeout, proc=p)
    wait_http(f"{t.url}/", timeout, proc=p)
    return p


def start_pgbouncer(system: System, b: pgbouncer.Bouncer, timeout: float = 30) -> Proc:
    """PgBouncer as a child of ours, then OUTBOX_PGBOUNCER_URL in the environment of every process started after it
    (the receiver, the outside world, has its own database and never reads it)."""
    pgbouncer.write(b)
    p = system._proc("pgbouncer", pgbouncer.argv(b))
    database_url = system.env["OUTBOX_DATABASE_URL"]
    database = database_url.rsplit("/", 1)[-1].split("?")[0]

    def answers() -> bool:
        if not p.alive():
            raise RuntimeError(f"pgbouncer exited at start (code {p.popen and p.popen.returncode}); see {p.log}")
        try:
            pgbouncer.pools(b, database)
            return True
        except Exception:
            return False

    wait_until(answers, timeout, f"pgbouncer on port {b.port}")
    system.env["OUTBOX_PGBOUNCER_URL"] = b.url(database_url)
    return p


def start(system: System, t: Topology, build: bool = True, dashboards: bool = True) -> None:
    """PgBouncer if asked, relays, workers (N per lane), the bundle, the backends and the proxy,
    N = len(backend_ports); the receiver is the caller's. Names end in -1 … -N so a test or on-call can pick one to
    stop."""
    n = len(t.backend_ports)
    ports = (t.port, *t.backend_ports, *([t.pgbouncer_port] if t.pgbouncer_port is not None else []))
    for port in ports:  # an earlier run still listening would answer every readiness check
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise RuntimeError(f"port {port} is already in use: stop what listens there or choose other ports")
    b = t.bouncer(system.env["OUTBOX_DATABASE_URL"])
    if b is not None:
        start_pgbouncer(system, b)
    for i in range(1, n + 1):
        system.relay(name=f"relay-{i}")
    for lane in LANES:
        for i in range(1, n + 1):
            system.worker(lane, name=f"worker-{lane}-{i}")
    if not dashboards:
        return
    if build:
        build_frontend(t, system.env, system.logdir / "dashboard-build.log")
    for i in range(n):
        dashboard_backend(system, t, i)
    proxy(system, t)
