"""The run itself: start the owned system, set up the load's tenant, drive load and faults for the duration, stop
the load, settle the faults, drain, then count what was lost, duplicated or mis-charged."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import sqlalchemy as sa

from domain.db import UnitOfWork
from jobs.drills.chaos.load import Load, Sampler, Tally, recovery_seconds
from jobs.drills.chaos.owned import LOG_DIR, SAMPLE_EVERY, TENANT, free_port, now_s, owned_system, say
from jobs.drills.chaos.plan import Injector, plan_faults
from jobs.drills.chaos.report import Run, report, write_evidence
from jobs.ops.checks import RECEIVER_INVARIANT, all_invariants
from jobs.ops.procs import ROOT, receiver_database_url, wait_until

FINAL = ("SENT", "DELIVERED", "SUPPRESSED")


def _setup_load(api: str, seed: int) -> tuple[str, list[tuple[int, str]]]:
    """An API key for the tenant and its recipients, made through the API like any client would: no quiet
    hours, no daily cap (what is sent must be sendable now), and an advisor for the leads."""
    from domain.access.auth import create_api_key

    key = create_api_key(TENANT, "chaos")
    out: list[tuple[int, str]] = []
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=10) as c:
        for i in range(60):
            ref = f"chaos-{i:03d}"
            r = c.post("/api/v1/recipients", json={
                "ref": ref, "display_name": f"Chaos {i}", "email": f"{ref}@example.test",
                "phone": f"+1555{seed % 1000:03d}{i:04d}", "timezone": "UTC"})
            r.raise_for_status()
            out.append((int(r.json()["recipient_id"]), ref))
        c.post("/api/v1/recipients", json={"ref": "chaos-advisor", "display_name": "Chaos advisor",
                                           "email": "advisor@example.test", "timezone": "UTC"}).raise_for_status()
    return key, out


def _start_campaign(run: Run, api: str, key: str, deadline: float, tick: Callable[[], None]) -> None:
    """The campaign goes through the API too; while the API or PostgreSQL is down, ask again (deadline). `tick`
    keeps the fault plan running meanwhile: the API killed just before the campaign is restarted by it (seed
    1013971946 waited 30 s for an API whose restart was never injected)."""
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=5) as c:
        def ask() -> int | None:
            tick()
            try:
                r = c.post("/api/v1/campaigns", json={"name": f"chaos {run.seed}", "segment": "all_reachable",
                                                      "template": "offer", "channel": "email"})
                return int(r.json()["campaign_id"]) if r.status_code == 202 else None
            except (httpx.HTTPError, ValueError, KeyError):
                return None

        run.campaign_id = wait_until(ask, deadline, "the campaign to be accepted")


def run_chaos(duration: float, seed: int, rate: float = 8.0, drain_timeout: float = 90.0,
              evidence: Path | None = None) -> Run:
    run = Run(seed=seed, duration=duration, rate=rate, drain_timeout=drain_timeout)
    say(f"chaos seed={seed} duration={duration:g}s rate={rate:g}/s (replay: outbox chaos --duration {duration:g} "
        f"--seed {seed})")
    names = ("postgres", "redis", "receiver", "api")
    while len(set(run.ports.values())) < len(names):
        run.ports = {n: free_port() for n in names}
    plan = plan_faults(seed, duration)
    with owned_system(run.ports) as (system, pg, rds):
        api = f"http://127.0.0.1:{run.ports['api']}"
        key, recipients = _setup_load(api, seed)
        say(f"chaos system up: postgres :{run.ports['postgres']} (cluster in {pg.base}) redis :{run.ports['redis']} "
            f"receiver :{run.ports['receiver']} api :{run.ports['api']}, {len(system.procs) - 3} workers, relay; "
            f"logs {LOG_DIR.relative_to(ROOT)}")
        load = Load(api, key, seed, recipients, rate)
        t0 = time.monotonic()
        sampler = Sampler(os.environ["OUTBOX_DATABASE_URL"], t0)
        injector = Injector(run, system, pg, rds, t0)
        injector.schedule(plan)
        sampler.start()
        load.start()
        try:
            _drive(run, load, sampler, injector, api, key, t0)
            run.load_end = now_s(t0)
            load.stop()
            injector.settle(120)
            _drain(run, sampler, t0)
            sampler.stop()
            run.answers = dict(sorted(load.tally.answers.items()))
            if run.pg_down_at is not None and run.pg_up_at is not None:
                run.rate_before, run.recovery_s = recovery_seconds(sampler.samples, run.pg_down_at, run.pg_up_at,
                                                                   run.load_end)
            _check(run, load.tally, f"http://127.0.0.1:{run.ports['receiver']}")
        finally:
            injector.closing = True
            injector.join(90)  # a restart in flight finishes before the system is stopped, so none outlives it
            load.stop()
            sampler.stop()
    report(run)
    if evidence is not None:
        write_evidence(run, evidence)
        print(f"evidence written to {evidence}")
    print(run.result_line(), flush=True)
    return run


def _progress(run: Run, sampler: Sampler, load: Load, t0: float, phase: str) -> None:
    s = sampler.last()
    line = (f"chaos t={now_s(t0):6.1f}s {phase} sent={s.sent if s else '?'} owed={s.owed if s else '?'} "
            f"faults={run.faults_done}/{run.faults_total} api_accepted={load.tally.accepted} "
            f"api_refused_or_failed={load.tally.refused}")
    say(line, run.progress)


def _drive(run: Run, load: Load, sampler: Sampler, injector: Injector, api: str, key: str, t0: float) -> None:
    campaign_at, next_progress = 0.05 * run.duration, 0.0
    while now_s(t0) < run.duration:
        injector.due()
        if run.campaign_id is None and now_s(t0) >= campaign_at:
            _start_campaign(run, api, key, 30, injector.due)
            say(f"chaos t={now_s(t0):6.1f}s campaign {run.campaign_id} started (all_reachable × offer × email)",
                run.timeline)
        if now_s(t0) >= next_progress:
            _progress(run, sampler, load, t0, "load")
            next_progress = now_s(t0) + 5.0
        upcoming = [x for x in (injector.next_at(), next_progress, run.duration) if x is not None]
        time.sleep(max(0.0, min(0.25, min(upcoming) - now_s(t0))))  # the schedule's own clock, not a condition


def _drain(run: Run, sampler: Sampler, t0: float) -> None:
    """Wait (deadline) until nothing is owed; progress every 5 s."""
    start = now_s(t0)
    deadline = start + run.drain_timeout
    next_progress = start
    while now_s(t0) < deadline:
        s = sampler.last()
        if s is not None and s.t > start and s.owed == 0:
            run.drained_s = now_s(t0) - start
            say(f"chaos t={now_s(t0):6.1f}s drained in {run.drained_s:.1f}s", run.progress)
            return
        if now_s(t0) >= next_progress:
            say(f"chaos t={now_s(t0):6.1f}s drain sent={s.sent if s else '?'} owed={s.owed if s else '?'}",
                run.progress)
            next_progress = now_s(t0) + 5.0
        time.sleep(SAMPLE_EVERY)  # polling the sampler's condition, bounded by the deadline above
    say(f"chaos t={now_s(t0):6.1f}s drain deadline ({run.drain_timeout:g}s) passed with rows still owed",
        run.progress)


MONEY_SQL = {
    "balance not equal to the sum of its entries": """
        SELECT count(*) FROM balances b WHERE b.balance_cents <> coalesce(
          (SELECT sum(e.amount_cents) FROM balance_entries e WHERE e.tenant_id = b.tenant_id), 0)""",
    "negative balance": "SELECT count(*) FROM balances WHERE balance_cents < 0",
    "sent or delivered row not charged exactly its cost": """
        SELECT count(*) FROM notifications n WHERE n.status IN ('SENT', 'DELIVERED')
          AND -coalesce((SELECT sum(b.amount_cents) FROM balance_entries b WHERE b.notification_id = n.id), 0)
              <> n.cost_cents""",
    "unsent (failed, suppressed) row still charged": """
        SELECT count(*) FROM notifications n WHERE n.status IN ('FAILED', 'SUPPRESSED')
          AND coalesce((SELECT sum(b.amount_cents) FROM balance_entries b WHERE b.notification_id = n.id), 0) <> 0""",
}


def _check(run: Run, tally: Tally, receiver_url: str) -> None:
    with UnitOfWork() as uow:
        x = uow.execute
        run.statuses = {r.status: int(r.n) for r in x(sa.text(
            "SELECT status, count(*) AS n FROM notifications GROUP BY status ORDER BY status"))}
        run.suppressed = {r.reason or "none": int(r.n) for r in x(sa.text(
            "SELECT suppressed_reason AS reason, count(*) AS n FROM notifications WHERE status = 'SUPPRESSED' "
            "GROUP BY 1 ORDER BY 1"))}
        tracked = {int(r.id): r.status for r in x(sa.text("SELECT id, status FROM notifications WHERE id = ANY(:i)"),
                                                 {"i": sorted(tally.notification_ids)})}
        unfinished = {int(i) for i in x(sa.text("SELECT id FROM notifications WHERE status NOT IN "
                                                "('SENT', 'DELIVERED', 'SUPPRESSED')")).scalars()}
        events = {str(e) for e in x(sa.text("SELECT event_id FROM outbox_events WHERE event_id::text = ANY(:e)"),
                                    {"e": sorted(tally.event_ids)}).scalars()}
        webhooks = [(int(r.id), str(r.event_id)) for r in x(sa.text(
            "SELECT id, event_id FROM notifications WHERE channel = 'webhook' AND event_id IS NOT NULL"))]
        sent_people = {str(r.dedupe_key): int(r.id) for r in x(sa.text(
            "SELECT id, dedupe_key FROM notifications WHERE channel <> 'webhook' "
            "AND status IN ('SENT', 'DELIVERED')"))}
        run.money = {k: int(x(sa.text(q)).scalar_one()) for k, q in MONEY_SQL.items()}
    lost: dict[str, set[str]] = {
        "accepted send or code with no row": {f"n{i}" for i in tally.notification_ids if i not in tracked},
        "accepted approval with no event": {f"e{e}" for e in tally.event_ids - events},
        "accepted send or code not sent": {f"n{i}" for i, s in tracked.items() if s not in FINAL},
        "row still owed or failed after the drain": {f"n{i}" for i in unfinished},
    }
    no_effect: set[str] = set()
    with httpx.Client(base_url=receiver_url, timeout=10) as c:
        for nid, event_id in webhooks:
            fx = int(c.get(f"/effects/{event_id}").json()["effects"])
            if fx == 0:
                no_effect.add(f"n{nid}")
            run.duplicate_effects += max(0, fx - 1)
    lost["order event with no receiver effect"] = no_effect
    lost["sent message the provider never received"] = {f"n{sent_people[k]}" for k in
                                                        _missing_at_provider(list(sent_people))}
    run.lost = {k: len(v) for k, v in lost.items()}
    run.lost_total = len(set().union(*lost.values()))
    run.invariants = all_invariants(receiver_url)
    run.duplicate_effects = max(run.duplicate_effects, run.invariants.get(RECEIVER_INVARIANT) or 0)


def _missing_at_provider(keys: list[str]) -> set[str]:
    """Idempotency keys the mock providers never stored (read from the receiver's database, as the benchmark
    does: the receiver has no endpoint listing its messages)."""
    eng = sa.create_engine(receiver_database_url(os.environ["OUTBOX_DATABASE_URL"]))
    try:
        with eng.connect() as c:
            got = set(c.execute(sa.text("SELECT idempotency_key FROM provider_messages WHERE idempotency_key = "
                                        "ANY(:k)"), {"k": keys}).scalars())
    finally:
        eng.dispose()
    return set(keys) - got
