"""The proxy configuration `outbox up --scale N` writes (jobs/ops/scaled.py).

Invariants: nginx itself accepts it (`nginx -t`); every backend path of Reflex and of our API goes to the backends
and nothing else does; a pinned browser falls back to the other backends while its own is down.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from jobs.ops import scaled


def test_nginx_accepts_the_configuration_and_routes_backend_paths_to_every_backend(tmp_path: Path) -> None:
    t = scaled.Topology(3940, (3941, 3942, 3943), "redis://127.0.0.1:6379/1", tmp_path)
    (tmp_path / "nginx-tmp").mkdir()
    t.static_dir.mkdir(parents=True)
    conf = tmp_path / "nginx.conf"
    conf.write_text(scaled.nginx_conf(t, tmp_path / "error.log"))
    checked = subprocess.run([scaled.nginx_binary(), "-t", "-p", str(tmp_path), "-c", str(conf), "-e",
                              str(tmp_path / "error.log")], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    text = conf.read_text()
    for path in ("_event", "ping", "api", "healthz", "metrics", "_upload"):
        assert path in scaled.BACKEND_PATHS
    for port in t.backend_ports:
        assert f"server 127.0.0.1:{port} max_fails=1" in text
        assert f"server 127.0.0.1:{port} backup;" in text  # stands in for each of the others when pinned
    assert "listen 127.0.0.1:3940;" in text and "0.0.0.0" not in text
