"""The API against its own OpenAPI description, by schemathesis with every check (`--checks all`): its coverage
phase sends each field's boundaries and hostile strings (NUL, surrogates, huge numbers, wrong types), fuzzing
sends what the schema allows, the stateful phase chains created ids into later calls, and undeclared methods are
tried on every path.

Invariants: no operation answers 5xx to anything; every answer conforms to the documented status codes, content
types and response schemas (errors included); schema-invalid input is refused and schema-valid input accepted —
except where tests/integration/schemathesis.toml names a domain rule the schema cannot state. Seeded: the seed is
printed and `OUTBOX_TEST_SEED` replays it.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.ops.procs import ROOT, System
from tests.conftest import SLOT_SUFFIX

CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")  # a fresh suffix on each valid Idempotency-Key


@pytest.fixture
def live_api(db, redis_db):  # type: ignore[no-untyped-def]
    """The API alone, as deployed (uvicorn, its own process), on the test database."""
    with socket.socket() as s:  # a port nobody holds (parallel runs and other checkouts use fixed ones)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    system = System(dict(os.environ), ROOT / ".run" / f"test-logs{SLOT_SUFFIX}" / "conformance")
    try:  # an API that never became healthy is stopped too, not left running past the test
        system.api(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        system.stop_all()


@pytest.mark.timeout(420)
def test_schemathesis_all_checks_find_no_server_error_and_no_nonconformance(live_api, key42, tmp_path):
    """Invariant: schemathesis with every check passes on every operation (no 5xx, documented answers only)."""
    seed = int(os.environ.get("OUTBOX_TEST_SEED") or random.randrange(2**32))
    print(f"schemathesis seed {seed} (replay: OUTBOX_TEST_SEED={seed})")
    r, output = _run_schemathesis(live_api, key42, tmp_path, seed)
    if r.returncode != 0 and _only_tool_errors(r.stdout):
        # A run that found no failing case and no server error but stopped on an error of its own (schemathesis's
        # "Runtime Error", seen once in CI with seed 2670246633 and never reproduced in 3,000+ coverage cases):
        # its text is printed here, and a second run with the next seed must pass whole. A failing case, a 5xx or
        # a second error of any kind fails the test.
        print(f"schemathesis (seed {seed}) stopped on an error of its own, no case failed:\n"
              f"{_section(r.stdout, 'ERRORS', 12000)}\nrunning once more with seed {seed + 1}")
        seed += 1
        r, output = _run_schemathesis(live_api, key42, tmp_path, seed)
    summary = _section(r.stdout, "SUMMARY") or r.stdout[-4000:]
    # What failed, by name, before anything else: the ERRORS section (a runtime error's title, text and traceback)
    # and the FAILURES section come first, the summary last, so a cut-off log still says what went wrong.
    named = "\n".join(filter(None, (_section(r.stdout, name, 12000) for name in ("ERRORS", "FAILURES"))))
    assert r.returncode == 0, (f"schemathesis (seed {seed}) found failures (whole output: {output}):\n"
                               f"{named or r.stdout[-12000:]}\n{summary}\n{r.stderr[-2000:]}")
    assert "Server error" not in r.stdout
    print(summary)


def _run_schemathesis(live_api: str, key42: dict[str, str], tmp_path: Path,
                      seed: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    argv = [str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(CONFIG), "run",
            f"{live_api}/api/openapi.json", "--checks", "all",
            "--exclude-checks", "ensure_resource_availability,missing_required_header", "--max-examples", "8",
            "--seed", str(seed),
            "--header", f"Authorization: {key42['Authorization']}", "--no-color", "--workers", "2",
            "--max-time", "55"]
    # missing_required_header is off: `--header Authorization` puts the key on every request, the "missing
    # Authorization" cases too, so the API rightly accepts them (ST203, intermittent); a missing or wrong key
    # answering 401 is proven in tests/integration/test_dashboard_api.py.
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=190,
                       env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)})
    output = tmp_path / f"schemathesis-output-{seed}.txt"  # the whole run, kept: a CI log keeps only its tail
    output.write_text(f"{r.stdout}\n--- stderr ---\n{r.stderr}")
    return r, output


def _only_tool_errors(stdout: str) -> bool:
    """The run stopped on errors alone: no FAILURES section, no server error, and an ERRORS section."""
    return (not _section(stdout, "FAILURES") and "Server error" not in stdout
            and bool(_section(stdout, "ERRORS")))


def _section(stdout: str, name: str, limit: int = 4000) -> str:
    """Schemathesis's `==== NAME ====` section of `stdout`, up to the next top-level section ("" if absent)."""
    match = re.search(rf"^=+ {name} =+$", stdout, re.MULTILINE)
    if match is None:
        return ""
    end = re.compile(r"^=+ [A-Z][A-Z ]+ =+$", re.MULTILINE).search(stdout, match.end())
    return stdout[match.start():end.start() if end else len(stdout)][:limit]
