"""`outbox bench --only relays` in small (jobs/drills/bench/relays.py): the four relay paths on a wal_level = logical
cluster of the step's own, a few events each.

Invariants: the step carries every approval through each path to its consumer (it waits for each one applied, with a
deadline), writes every key issue 28 names with a real figure (a latency, a rate, CPU and WAL per event, the slot's
retained WAL and its catch-up), removes its cluster and gives this process its environment back. It writes no
evidence: only `outbox bench` does.
"""

from __future__ import annotations

import math
import os

import pytest

from jobs.drills.bench import relays
from jobs.ops.procs import ROOT

pytestmark = pytest.mark.services
KEYS = [f"relay_{p}_{k}" for p in relays.PATHS for k in ("p50_ms", "p99_ms", "events_per_s",
                                                            "db_cpu_ms_per_event", "wal_bytes_per_event")]


@pytest.mark.timeout(600)
def test_relays_step_writes_every_key_with_a_figure_and_cleans_up() -> None:
    before = dict(os.environ)
    evidence = ROOT / "evidence" / "bench.json"
    evidence_before = evidence.read_text() if evidence.exists() else None
    got = relays.bench_relays(samples=4, rate=10.0, burst=8, outage_s=1.0)
    for key in [*KEYS, "cdc_slot_retained_mb", "cdc_catch_up_s"]:
        assert key in got and math.isfinite(got[key]), key
    for p in relays.PATHS:
        assert 0 < got[f"relay_{p}_p50_ms"] <= got[f"relay_{p}_p99_ms"], p
        assert got[f"relay_{p}_events_per_s"] > 0 and got[f"relay_{p}_wal_bytes_per_event"] > 0, p
        assert got[f"relay_{p}_db_cpu_ms_per_event"] >= 0, p
    assert got["cdc_slot_retained_mb"] > 0 and got["cdc_catch_up_s"] > 0
    assert dict(os.environ) == before
    assert not (ROOT / ".run" / f"{relays.PG_HOME}.home").exists(), "the step left its cluster behind"
    assert (evidence.read_text() if evidence.exists() else None) == evidence_before
