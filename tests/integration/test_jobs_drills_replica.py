"""A replica promotion (issue 19, item 5): `outbox replica-drill --no-sync` with a short load — a primary and its
streaming standby of its own (in a directory its server's user owns, outside the checkout: a checkout inside a 0700
directory works too, issue 25), the system on one URL naming both hosts
(`target_session_attrs=read-write`), the primary stopped hard, the standby promoted.

Protects: the system finds the promoted standby by itself and delivers through it (a webhook approved after the stop
reaches the receiver and is marked sent: the recovery time is a number, not a timeout), `outbox check`'s invariants
hold on the promoted database, no effect is doubled at the receiver, and the drill leaves no cluster behind.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from jobs.ops.procs import BIN, ROOT

HAVE_PG = any(Path("/usr/lib/postgresql").glob("*/bin/pg_basebackup"))
pytestmark = [pytest.mark.chaos, pytest.mark.skipif(
    not HAVE_PG, reason="needs PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) under "
                        "/usr/lib/postgresql: apt-get install postgresql")]
HOME = re.compile(r"clusters in (\S+);")
RESULT = re.compile(r"replica result=(PASS|FAIL) rto_s=(\S+) rpo_events=(\d+) doubled=(\d+) delivered_after=(\d+)")


@pytest.mark.timeout(300)
def test_system_follows_a_promoted_standby_and_doubles_nothing() -> None:
    # The drill owns its clusters and database; it keeps this session's Redis (a db of its own) and slot.
    env = {k: v for k, v in os.environ.items() if k != "OUTBOX_DATABASE_URL"} | {"OUTBOX_ENV": "development"}
    p = subprocess.run([str(BIN / "outbox"), "replica-drill", "--load", "5", "--after", "2", "--no-sync"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=280)
    print(p.stdout[-5000:], p.stderr[-3000:])
    lines = p.stdout.strip().splitlines()
    m = RESULT.fullmatch(lines[-1]) if lines else None
    assert m is not None, f"no result line (exit {p.returncode}); see .run/replica-logs/ and .run/replica-drill-logs/"
    verdict, rto, _rpo, doubled, delivered = m.groups()
    assert float(rto) > 0, "no delivery measured through the promoted standby"
    assert int(doubled) == 0, f"{doubled} effects doubled at the receiver across the promotion"
    assert int(delivered) > 0
    assert verdict == "PASS" and p.returncode == 0, "an invariant of `outbox check` broke on the promoted database"
    home = HOME.search(p.stdout)
    assert home is not None and not Path(home.group(1)).exists(), "the drill left a cluster behind"
    assert not (ROOT / ".run" / "replica-drill.home").exists()
