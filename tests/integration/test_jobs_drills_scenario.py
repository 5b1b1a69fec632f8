"""`outbox scenario` as operators and CI run it: real processes, real exit codes.

Invariants: the scenario replays seed 004 §3.4 against real processes and passes; it is deterministic evidence —
two runs with one seed print the same transcript, and its ids and times are the ones that seed gives.
"""

from __future__ import annotations

import re
import subprocess

from jobs.drills.scenario import seeded_ids
from tests.support.cli import run

SEED = 20261130


def transcript(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("scenario seed="))
    last = next(i for i, line in enumerate(lines) if line.startswith("scenario result="))
    return lines[first:last + 1]


def scenario(out: str) -> subprocess.CompletedProcess[str]:
    r = run("scenario", "--seed", str(SEED), "--out", out, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_scenario_passes_and_one_seed_prints_one_transcript(migrated_db, tmp_path):
    """Seed 004 §3.4 passes against real processes (two deliveries, one effect, every invariant zero), and a second
    run with the same seed prints the same transcript line for line, starting with the seed; the event id, request
    ids and clock in it are the seed's, not random."""
    first, second = scenario(str(tmp_path / "a.md")), scenario(str(tmp_path / "b.md"))
    assert "scenario result=PASS" in first.stdout
    assert "effective_calls=1 deliveries>=2" in first.stdout and "webhook=already_processed" in first.stdout
    evidence = (tmp_path / "a.md").read_text()
    assert "| invariants all zero | PASS |" in evidence

    one, two = transcript(first.stdout), transcript(second.stdout)
    assert one == two, "\n".join(f"{a!r} != {b!r}" for a, b in zip(one, two, strict=False) if a != b)
    assert one[0].startswith(f"scenario seed={SEED} ")
    block = re.search(r"```\n(.*?)\n```", evidence, re.S)
    assert block is not None and block.group(1).splitlines() == one  # the file holds exactly what was printed

    ids = seeded_ids(SEED)
    text = "\n".join(one)
    assert f"event_id={ids.event_ids[0]}" in text and all(f"request_id={r}" in text for r in ids.request_ids)
    assert f"at={ids.clock[0]:%Y-%m-%dT%H:%M:%SZ}" in text
    assert "effect_id=fx#1" in text and "effect_id=fx-" not in text  # the receiver's random ids stay out
