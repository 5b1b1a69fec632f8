"""`outbox replica-drill --evidence`: its flat `replica_*` keys merged into evidence/bench.json (the whole run under
`replica`), and its section of evidence/bench.md replaced (appended if absent); nothing else there changes."""

from __future__ import annotations

import json
from typing import Any

from jobs.drills.bench.report import replace_section
from jobs.ops.procs import ROOT

HEAD = "## Replica promotion"


def write_evidence(res: dict[str, Any]) -> None:
    out = ROOT / "evidence"
    bench_json = out / "bench.json"
    data: dict[str, Any] = json.loads(bench_json.read_text()) if bench_json.exists() else {}
    data.update({k: v for k, v in res.items() if k.startswith("replica_")})
    data["replica"] = res
    bench_json.write_text(json.dumps(data, indent=2))
    bench_md = out / "bench.md"
    text = bench_md.read_text() if bench_md.exists() else "# Benchmarks\n"
    bench_md.write_text(replace_section(text, HEAD, section(res)))
    print(f"evidence merged into {bench_json} and {bench_md}")


def section(res: dict[str, Any]) -> str:
    rows = [f"| {k} | {v} |" for k, v in res.items() if k.startswith("replica_")]
    return "\n".join([
        HEAD, "",
        f"`outbox replica-drill --evidence`, {res['measured_at']}: a primary and its streaming standby (physical slot, "
        "`pg_basebackup -R`) in a temporary directory of its own, the system (receiver, API, relay, a high and a "
        "normal worker) on ONE URL naming both hosts with `target_session_attrs=read-write`; "
        f"{res['rate_per_s']:g} approvals/s (each a webhook and an email) for {res['load_s']:g} s, then "
        "`pg_ctl stop -m immediate` on the primary and `pg_ctl promote` on the standby at once, load going on. "
        "`replica_rto_s`: the primary's stop to the first webhook approved after it delivered and marked sent "
        "through the promoted standby (no process restarted or reconfigured; an operator's or Patroni's decision "
        "time comes on top). `replica_rpo_events`: approvals the primary acknowledged that the promoted standby "
        "does not have (`replica_lost_but_delivered`: of those, webhooks the receiver already had). `_sync` keys: "
        "the same with `synchronous_standby_names = '*'`. `replica_invariants_ok`: `outbox check` on the promoted "
        "database after the drain, no effect doubled at the receiver (its database on a third cluster), every "
        "webhook there delivered. Load average (1 min) "
        f"{res['load_avg_1m_start']:.2f} at the start, {res['load_avg_1m_end']:.2f} at the end.", "",
        "| metric | value |", "|---|---|", *rows, ""])
