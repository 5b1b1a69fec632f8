"""evidence/bench.md and evidence/bench.json, written only by `outbox bench`."""

from __future__ import annotations

import json
from collections.abc import Callable

from jobs.ops.procs import ROOT

_KEYS = (
    "`wake_*`: commit of a one-time code to its critical worker starting the attempt, the system at rest "
    "(`wake_until_claim_*`: of which until the claim began). `wake_via_relay_*`: the same with no wake-up after "
    "commit — the commit's NOTIFY wakes the relay, whose scan enqueues it. `wake_scan_only_*`: neither — only the "
    "recovery scan every `OUTBOX_SCAN_INTERVAL` (0.5 s here) finds it. `wake_raw_*`: the same hop done bare — a "
    "row committed by raw psycopg, its id PUBLISHed, another process UPDATEs it. `idle_cpu_pct`: % of one core "
    "burnt at rest by every process `outbox bench` runs (4 lane workers, relay, receiver, API; PostgreSQL and "
    "Redis are shared with other work on this machine and left out), per process beside it. "
    "`rss_total_mb_idle` / `rss_total_mb_load`: resident memory of those processes and the bench itself, at rest "
    "and at the peak of the delivery step. `commit_per_s_K` vs `commit_raw_per_s_K`: the order command vs the "
    "same statements (order update, envelope, two ledger rows, NOTIFY) by raw psycopg, K concurrent clients. "
    "`e2e_events_per_s`: a committed webhook backlog to receiver effects, 2 workers on the lane, beside "
    "`receiver_raw_posts_per_s`; `e2e_p50/p99_ms`: commit to the receiver's effect at half that rate, beside "
    "`e2e_raw_post_*` (one signed POST's round trip). `cpu_ms_per_delivery`: CPU (utime + stime, /proc, children "
    "included) of our worker, relay and API processes over the drain of that backlog, per webhook delivered, "
    "beside `lean_cpu_ms_per_delivery` (the lean probe's own process, same backlog); `receiver_cpu_share`: the "
    "receiver's CPU over the same window as a share of ours plus its (PostgreSQL and Redis left out); "
    "`pg_cpu_ms_per_delivery`: the PostgreSQL backends serving the bench's database over the same drain (/proc; "
    "the server's WAL writer and checkpointer left out), beside `lean_pg_cpu_ms_per_delivery` (the lean probe's). "
    "`e2e_lean_per_s`: the lean probe — one asyncio process, raw psycopg and httpx, claiming 50 rows per statement "
    "(SKIP LOCKED, a lease and a fence token each) on 2 connections, POSTing them concurrently, signed as the "
    "workers sign, and recording each batch in one statement — on a backlog of the same size committed the same "
    "way; `e2e_ratio_lean` = `e2e_events_per_s` / `e2e_lean_per_s`. `otp_p99_ms_idle/bulk`: a one-time code's "
    "request to the provider's receipt of it, idle and with a campaign in flight, beside `raw_provider_p99_ms`. "
    "`campaign_ledgered_per_s` beside `raw_insert_select_rows_per_s` (the same rows by one bare INSERT … SELECT into a "
    "temporary table: no index, no WAL) and `raw_insert_select_indexed_rows_per_s` (into a table with every index "
    "of `notifications`, logged); "
    "`campaign_sent_ratio`: sent/s with the bulk bucket set high over min(bucket, the provider's capacity "
    "measured in the same run). `fair_small_campaign_ratio`: tenant 7's 50-message campaign, start to last send, "
    "started while tenant 42's big campaign is in flight over the same campaign alone earlier in the run (target "
    "≤ 2); `fair_big_campaign_loss_pct`: the big campaign's sent/s over a window that holds the small one against "
    "an equal window just before without it; `fair_small_fcfs_wait_estimate_s`: what first come, first served "
    "would have made the small one wait (the big one's owed rows at its pace). `scan_ms_1m`: one relay scan of a "
    "lane with 1,000 owed among 1,000,000 settled rows, beside `scan_raw_read_ms_1m` (the same ids read without "
    "locks). `ops_series_ms_1m`: a refresh of /ops' 1 h "
    "chart for every tenant over those rows (only the points still moving are computed; finished ones are kept), "
    "`ops_series_first_ms_1m` its first load (every finished point computed once), beside "
    "`ops_series_whole_ledger_ms_1m` (the oracle: brute force over the whole ledger at every instant a point can "
    "peak; each point is the worst of its span since issue 27). "
    "`push_p50/p99_ms`: operator A's click to "
    "operator B's render of the new revision, 50 runs, both stamped inside the pages of one Chromium (a "
    "MutationObserver in B), beside `push_self_*` (A's own render of its answer: the command's round trip), "
    "`push_server_*` (publish → B's state reloaded, the dashboard's own measurement) and `push_raw_publish_*` (a bare "
    "Redis PUBLISH → receipt). `rss_per_tab_kb`: the dashboard's resident memory per open tab with 50 live tabs; "
    "`rss_total_mb_tabs`: every process of the system with them open (Chromium left out). "
    "`relay_{enqueue,notify,scan,cdc}_*` and `cdc_*`: the relays compared, in their own section above. "
    "`commit_ratio_4_clients_pgbouncer` / `e2e_events_per_s_pgbouncer`: the same two figures with every pool "
    "through PgBouncer in transaction mode (unprepared statements), beside `pgbouncer_direct_*` measured direct in "
    "the same step just before; `pgbouncer_{server,client}_connections_max`: what PgBouncer held for the bench "
    "database during that drain (its pool size `pgbouncer_pool_size`). "
    "`claim_ms_partitions_K` / `record_ms_partitions_K`: a batched lane's claim (CLAIM_BATCH, one due webhook) and "
    "record (RECORD_SENT_BATCH) through the workers' store, p50, with the ledger's messages in K months (its "
    "partitions: `ledger_partitions_K`, the months kept ahead and DEFAULT included), beside `…_id_only` (the same "
    "statements naming the row by id alone, as before they carried its month) and `…_unprepared` (a pool that "
    "prepares nothing, as through PgBouncer: every statement planned afresh); `…_ratio_partitions_48_to_1`: flat "
    "is 1. `claim_ms_long_way`: a per-row claim through the workers' store that the long way settles (a recipient "
    "over today's cap: SUPPRESSED in the claim's own transaction), p50 over 200, beside `claim_ms_common` (a claim "
    "that goes, same pool, same run); `claim_long_way_ratio` the two.")

_SECTIONS = (
    ("commit", "Commit: outbox command vs bare UPDATE"),
    ("delivery", "Delivery: ledger → arq → 2 workers → receiver vs direct signed POSTs"),
    ("recovery", "Recovery after Redis FLUSHDB (relay scan only)"),
    ("lanes", "Lanes: one-time codes (critical) idle and with a campaign in flight (bulk)"),
    ("scan", "Relay claim draining a backlog: partial index of owed rows vs index on (status, next_attempt_at)"),
)


# Issue 26's targets, each figure beside its baseline of the same run: (key, target, met?, its baseline's key).
TARGETS: tuple[tuple[str, str, Callable[[float], bool], str], ...] = (
    ("cpu_ms_per_delivery", "≤ 3 ms", lambda v: v <= 3, "lean_cpu_ms_per_delivery"),
    ("e2e_ratio_lean", "≥ 0.8", lambda v: v >= 0.8, "e2e_lean_per_s"),
    ("e2e_events_per_s", "≥ 400 webhooks/s", lambda v: v >= 400, "receiver_raw_posts_per_s"),
    ("receiver_raw_posts_per_s", "> 400/s (the mock is never the limit)", lambda v: v > 400, "receiver_cpu_share"),
    ("pg_cpu_ms_per_delivery", "— (sizes PostgreSQL)", lambda v: True, "lean_pg_cpu_ms_per_delivery"),
)


def _targets(res: dict[str, object]) -> list[str]:
    lines = ["## Issue 26: delivery as cost, against its targets", "",
             "| figure | value | target | met | beside it (same run) |", "|---|---|---|---|---|"]
    for key, target, met, beside in TARGETS:
        v, b = res.get(key), res.get(beside)
        if not isinstance(v, int | float):
            continue
        shown = f"{b:.2f}" if isinstance(b, int | float) else "—"
        lines.append(f"| {key} | {v:.2f} | {target} | {'✓' if met(v) else '✗'} | {beside} {shown} |")
    return [*lines, ""] if len(lines) > 4 else []


RELAY_PATHS = (("enqueue", "(a) after-commit enqueue → 2 workers → receiver effect"),
               ("notify", "(b) NOTIFY-woken relay scan → 2 workers → receiver effect"),
               ("scan", "(c) the recovery scan alone (0.5 s) → 2 workers → receiver effect"),
               ("cdc", "(d) CDC slot → Redis Stream → fulfilment inbox"))


def _relays(res: dict[str, object]) -> list[str]:
    """`outbox bench --only relays` (relays.py): the four paths side by side, then the slot's cost."""
    if not isinstance(res.get("relay_cdc_p50_ms"), int | float):
        return []

    def v(key: str, fmt: str = ".0f") -> str:
        x = res.get(key)
        return format(x, fmt) if isinstance(x, int | float) else "—"

    lines = ["## Relays compared (issue 28): one approval to another service applying it once", "",
             f"Measured {res.get('relays_measured_at', '?')} on a wal_level = logical cluster and a redis-server "
             "(appendonly, everysec) of the step's own; `uptime` said "
             f"\"{res.get('relays_uptime_start', '?')}\" before and \"{res.get('relays_uptime_end', '?')}\" after. "
             f"Latency: {v('relay_samples')} approvals at {v('relay_latency_rate_per_s')}/s, commit returned → the "
             "consumer's transaction time (receiver `webhook_effects.applied_at`, inbox `received_at`). events/s: a "
             f"burst of {v('relay_burst')} committed by one client, first commit → last application. DB CPU: the "
             "cluster's postmaster and backends over the burst (/proc); WAL: `pg_current_wal_lsn()` over the burst "
             "(the approval's own writes included: "
             f"{v('relay_producer_wal_bytes_per_event')} bytes with nothing consuming).", "",
             "| path | p50 ms | p99 ms | events/s | DB CPU ms/event | WAL bytes/event |", "|---|---|---|---|---|---|"]
    for key, title in RELAY_PATHS:
        lines.append(f"| {title} | {v(f'relay_{key}_p50_ms')} | {v(f'relay_{key}_p99_ms')} | "
                     f"{v(f'relay_{key}_events_per_s')} | {v(f'relay_{key}_db_cpu_ms_per_event', '.2f')} | "
                     f"{v(f'relay_{key}_wal_bytes_per_event')} |")
    lines += ["", f"CDC relay stopped {v('cdc_outage_s')} s while {v('cdc_outage_events')} approvals committed: the "
              f"slot retained {v('cdc_slot_retained_mb', '.2f')} MB (`cdc_slot_retained_mb`; "
              f"{v('cdc_slot_retained_growth_mb', '+.2f')} MB over the outage); started again, the slot was "
              f"confirmed past it after {v('cdc_catch_up_s', '.2f')} s (`cdc_catch_up_s`, the process's start "
              f"included) and the inbox had every event after {v('cdc_inbox_catch_up_s', '.2f')} s.", ""]
    return lines


def _fmt(d: object, prefix: str = "") -> str:
    assert isinstance(d, dict)
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(_fmt(v, f"{prefix}{k}."))
        elif isinstance(v, str) and "\n" in v:
            continue  # a plan: printed on its own below
        else:
            lines.append(f"| {prefix}{k} | {v:.2f} |" if isinstance(v, float) else f"| {prefix}{k} | {v} |")
    return "\n".join(lines)


def _kept_before_after(md: str) -> list[str]:
    """The hand-written "Before and after" notes of the last run (what each change moved), carried forward."""
    if "\n## Before and after" not in md:
        return []
    part = md.split("\n## Before and after", 1)[1].split("\n## ", 1)[0]
    return ["## Before and after" + part.rstrip(), ""]


# Sections other commands merge into bench.md (`outbox vacuum-drill --evidence`, `outbox replica-drill --evidence`):
# `outbox bench` keeps them, at the end, in this order.
DRILL_SECTIONS = ("## VACUUM held back", "## Replica promotion")


def _section_of(md: str, head: str) -> str | None:
    """The section under `head` (up to the next `## ` heading or the end), or None when absent."""
    at = md.find("\n" + head)
    if at < 0:
        return None
    end = md.find("\n## ", at + 1)
    return md[at + 1:end if end >= 0 else len(md)].rstrip("\n")


def replace_section(md: str, head: str, section: str) -> str:
    """`md` with its section under `head` replaced by `section` (appended when absent); every other section stays."""
    old = _section_of(md, head)
    if old is None:
        return md.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    return md.replace(old, section.rstrip("\n"), 1)


def _kept_vacuum(md: str) -> list[str]:
    """The drills' sections (jobs/drills/vacuum.py and replica_report.py merge them in), kept at the end."""
    kept = [s for s in (_section_of(md, head) for head in DRILL_SECTIONS) if s is not None]
    return [x for s in kept for x in ("", s)]


def write(res: dict[str, object]) -> None:
    out = ROOT / "evidence"
    out.mkdir(exist_ok=True)
    old = (out / "bench.md").read_text() if (out / "bench.md").exists() else ""
    kept = _kept_before_after(old)
    (out / "bench.json").write_text(json.dumps(res, indent=2))
    skip = ("measured_at", "n", "cpu_count", "uptime_start", "uptime_end")
    flat = {k: v for k, v in res.items() if not isinstance(v, dict) and k not in skip}
    md = [f"# Benchmarks — {res['measured_at']}", "",
          f"`outbox bench`, n={res['n']}, {res['cpu_count']} cores. Ratios compare against raw baselines measured in "
          "the same run on the same machine, shared with other engineers' tests: `uptime` said "
          f"\"{res.get('uptime_start', '?')}\" at the start and \"{res.get('uptime_end', '?')}\" at the end.", "",
          *kept, *_targets(res), *_relays(res),
          "## Issue 17: each figure beside its raw baseline (flat keys of bench.json)", "", _KEYS, "",
          "| metric | value |", "|---|---|", _fmt(flat), ""]
    for key, title in _SECTIONS:
        md += [f"## {title}", "", "| metric | value |", "|---|---|", _fmt(res.get(key, {})), ""]
    scan_1m = res.get("scan_1m")
    if isinstance(scan_1m, dict) and scan_1m.get("plan"):
        md += ["## The relay's scan with 1,000,000 settled rows: its plan", "", "```", str(scan_1m["plan"]), "```", ""]
    md += _kept_vacuum(old)
    (out / "bench.md").write_text("\n".join(md))
    print("\n".join(md))
    print(f"evidence written to {out / 'bench.md'} and {out / 'bench.json'}")
