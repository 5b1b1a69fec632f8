"""CPU priority of the PostgreSQL backends that serve one lane's worker, when they run on the worker's machine.

A lane worker is niced by its lane (jobs/worker.py `LANE_NICENESS`: bulk 10), but the PostgreSQL backend that runs
its claims and records is a process of its own at the default priority: a campaign's sends kept a backend busy
beside the one claiming a one-time code, at equal weight on a 2-core machine. The worker lowers its own backends'
priority to its lane's — never raises it, never touches a backend it cannot prove is a local PostgreSQL process
(a database on another host: nothing to do; the operating system there schedules its own backends).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

LOCAL_HOSTS: Final[frozenset[str]] = frozenset({"127.0.0.1", "::1", "localhost"})


def is_local(host: str | None) -> bool:
    """A TCP loopback address or a Unix socket directory: the backend runs on this machine."""
    return bool(host) and (host in LOCAL_HOSTS or str(host).startswith("/"))


def renice_backend(pid: int, host: str | None, niceness: int) -> bool:
    """Lower the priority of backend `pid` to `niceness` (best effort). True: it runs at `niceness` or lower now."""
    if niceness <= 0 or not is_local(host):
        return False
    try:  # the same pid namespace: the pid PostgreSQL gave us is one of its processes here
        if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
            return False
        if os.getpriority(os.PRIO_PROCESS, pid) < niceness:
            os.setpriority(os.PRIO_PROCESS, pid, niceness)
        return True
    except OSError:  # not ours to renice (another user's process without the capability), or gone
        return False
