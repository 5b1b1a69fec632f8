"""The `outbox` command as operators and CI run it: real processes, real exit codes.

Invariants: `check` fails exactly when an invariant is broken; `apikey create` prints only the key; `scenario`
replays seed 004 §3.4 against real processes and passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from domain.auth import principal_for_key
from domain.db import get_engine

OUTBOX = str(Path(sys.executable).parent / "outbox")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OUTBOX, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def test_check_passes_on_a_consistent_database_and_fails_on_a_broken_one(db):
    ok = run("check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    with get_engine().begin() as c:  # a revision committed behind the outbox's back
        c.execute(sa.text("UPDATE orders SET revision = revision + 1 WHERE id = 913"))
    broken = run("check")
    assert broken.returncode == 1
    assert "committed revision without outbox event" in broken.stdout


def test_apikey_create_prints_only_the_key(db):
    r = run("apikey", "create", "--tenant", "42")
    assert r.returncode == 0
    key = r.stdout.strip()
    assert "\n" not in key and principal_for_key(key).tenant_id == 42  # type: ignore[union-attr]
    bad = run("apikey", "create", "--tenant", "99")
    assert bad.returncode != 0 and bad.stdout == "" and "tenant 99 does not exist" in bad.stderr


def test_unknown_lane_is_a_clear_error(db):
    r = run("pause", "express")
    assert r.returncode == 2 and "unknown lane 'express'" in r.stderr


def test_scenario_passes_against_real_processes(migrated_db, tmp_path):
    transcript = tmp_path / "scenario.md"
    r = run("scenario", "--out", str(transcript), timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "scenario result=PASS" in r.stdout
    assert "effective_calls=1" in r.stdout and "webhook=already_processed" in r.stdout
    assert "| invariants all zero | PASS |" in transcript.read_text()
