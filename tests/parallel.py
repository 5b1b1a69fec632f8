"""The suite in parallel (pytest-xdist, `-n N`): each worker is a test run of its own.

Imported first by tests/conftest.py and e2e/conftest.py (and registered as a plugin by whichever loads first), so
every module that reads the environment at import sees the worker's own:
- `OUTBOX_TEST_SLOT`: its own databases (`outbox_test_sN`, `outbox_e2e_sN`, ...), ports and log folders — the
  mechanism a second checkout uses (tests/conftest.py);
- `OUTBOX_REDIS_URL`: its own Redis server, started here on a port of its slot and shut down at the end, since the
  tests' Redis db indexes (3, 9-12) are fixed.
Without `-n` (or with `-n 0`) nothing here runs: the suite is the one run it always was.

The work is handed out by group (our scheduler, below): every browser test shares one running system and one
Chromium, so they form one group on one worker; each drill that owns a cluster under `.run/` is a group of its
own. The groups that take longest are collected first, so the long poles start at once and the short tests fill
the other workers around them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... (set by xdist before it loads any plugin)
_REDIS: tuple[int, Path] | None = None


def worker_slot(worker: str, base: int) -> int:
    """gwN of a run whose own slot is `base` (0: the usual checkout) -> a slot no other run uses: 20 + N for
    the usual checkout, 10 * base + 20 + N for a second one (ports are 100 * slot above the defaults)."""
    return 10 * base + 20 + int(worker.removeprefix("gw"))


def _start_redis(port: int) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix=f"outbox-test-redis-{port}-"))
    exe = shutil.which("redis-server")
    if exe is None:
        raise pytest.UsageError("redis-server is not installed: run 'sudo apt-get install -y redis-server'")
    subprocess.run([exe, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                    "--appendonly", "no", "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
                   check=True, stdout=subprocess.DEVNULL)
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            if redis.Redis(port=port).ping():
                return workdir
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


if _WORKER:
    _slot = worker_slot(_WORKER, int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0))
    _port = 16400 + _slot
    os.environ["OUTBOX_TEST_SLOT"] = str(_slot)
    os.environ["OUTBOX_REDIS_URL"] = f"redis://127.0.0.1:{_port}/0"
    _REDIS = (_port, _start_redis(_port))


def register(config: pytest.Config) -> None:
    """Make this module's hooks part of the run (once, whichever conftest asks first)."""
    if not config.pluginmanager.has_plugin(__name__):
        config.pluginmanager.register(sys.modules[__name__], __name__)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _REDIS is None:
        return
    port, workdir = _REDIS
    import redis

    try:
        redis.Redis(port=port).shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # shutting down closes the connection under us
    shutil.rmtree(workdir, ignore_errors=True)


# The long poles, longest first (seconds on two cores, from --durations): each is its own group.
_OWN_GROUP = ("tests/integration/test_jobs_drills_chaos.py", "tests/integration/test_jobs_drills_replica.py",
              "e2e/test_scale_out.py", "tests/integration/test_cdc.py")
# The browser tests need a running system each worker that runs them builds and starts (≈ 2 min): with
# OUTBOX_TEST_BROWSER_SYSTEMS=2 they are two groups, two systems on two workers, each half about as long as the other.
# Not the default: on two cores two systems (and the scale-out test's) at once made the whole run slower (26 min
# against 19) and pushed a frontend build's prerender past its timeout.
_E2E_SYSTEMS = int(os.environ.get("OUTBOX_TEST_BROWSER_SYSTEMS", "1") or 1)
_E2E_FIRST_HALF = ("e2e/test_operators.py", "e2e/test_sessions.py", "e2e/test_api_docs_page.py",
                   "e2e/test_api_keys_page.py", "e2e/test_balance_ceiling.py")
# Single tests that each take minutes: handed out right after the groups, not among the short tests at the end.
_LONG_TESTS = ("tests/integration/test_delivery_state_machine.py", "tests/integration/test_journeys_storm.py",
               "tests/integration/test_orders_command_model.py", "tests/integration/test_bench_relays.py",
               "tests/integration/test_dashboard_api_conformance.py", "tests/integration/test_jobs_drills_scenario.py")


def _group(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    if path in _OWN_GROUP:
        return path
    if path.startswith("e2e/"):  # one running system and one Chromium for each group (e2e/conftest.py)
        return "e2e" if _E2E_SYSTEMS < 2 or path in _E2E_FIRST_HALF else "e2e-2"
    return None


def _rank(nodeid: str) -> int:
    group = _group(nodeid)
    if group is not None:
        return 0 if group.startswith("e2e") else 1 + _OWN_GROUP.index(group)
    path = nodeid.split("::", 1)[0]
    return 1 + len(_OWN_GROUP) + (_LONG_TESTS.index(path) if path in _LONG_TESTS else len(_LONG_TESTS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long poles first: xdist hands the groups out largest first and the single tests in the order the
    workers collected them, so the minutes-long single tests come right after the groups."""
    if _WORKER is None:
        return
    items.sort(key=lambda it: _rank(it.nodeid))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's own `loadgroup` marks groups by rewriting `item._nodeid`, which pytest 9 no longer reads (a node's
    id is `_id`): every marked test went its own way and three workers built three e2e systems at once. So the
    groups are decided here, from the node id, by a scheduler of ours."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    return Groups(config, log)
