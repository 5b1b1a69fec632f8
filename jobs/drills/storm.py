"""The journey storm: many leads, hundreds of events each — forward steps, repeats, steps backward, late events,
lifecycle events and exact duplicates — shuffled and fired from many concurrent clients through the HTTP API while
a sampler watches every lead. Used by the integration test (`run_storm` against its system) and by `outbox storm`
(`storm_drill`: its own database, receiver, API, relay and workers → evidence/journeys.md).

What must hold (checked here, returned as figures):
- never two live intents for one lead, at any sample;
- at the end, each lead's newest intent is for the furthest step it reached;
- no nudge was sent for a step the lead had already passed when its claim decided;
- every duplicate got the first answer back; `outbox check` is clean.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from domain.access.auth import create_api_key
from domain.db import UnitOfWork
from domain.invariants import invariant_counts
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.journeys.store import create_lead
from jobs.ops.dbadmin import ensure_database, isolated_environment
from jobs.ops.procs import ROOT, System, receiver_database_url

EVIDENCE = ROOT / "evidence" / "journeys.md"

MAX_LIVE = sa.text(
    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM lead_notification_intents "
    "WHERE status IN ('pending', 'scheduled') GROUP BY lead_id) x")


@dataclass
class StormReport:
    seed: int
    leads: int
    events: int
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    max_live_seen: int = 0
    duplicates_sent: int = 0
    duplicates_answered_first: int = 0
    wrong_final_intent: list[int] = field(default_factory=list)
    stale_nudges_sent: list[int] = field(default_factory=list)
    nudges_sent: int = 0
    errors: list[str] = field(default_factory=list)
    invariants: dict[str, int] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return (self.max_live_seen <= 1 and not self.wrong_final_intent and not self.stale_nudges_sent
                and not self.errors and self.duplicates_answered_first == self.duplicates_sent
                and not any(self.invariants.values()))


def plan_events(lead_ids: list[int], per_lead: int, rng: random.Random) -> list[dict[str, Any]]:
    """Per lead: mostly funnel steps in a loose forward order with repeats and steps backward, some lifecycle
    events, some late (occurred before what came earlier), and exact duplicates of earlier events."""
    now = datetime.now(UTC)
    out: list[dict[str, Any]] = []
    for lead in lead_ids:
        sent: list[dict[str, Any]] = []
        for k in range(per_lead):
            roll = rng.random()
            if sent and roll < 0.15:
                dup = dict(rng.choice(sent))
                dup["duplicate"] = True
                out.append(dup)
                continue
            if roll < 0.25:
                event = rng.choice(LIFECYCLE_EVENTS)
            else:
                rank = min(len(JOURNEY_STEPS) - 1, max(0, int(k / per_lead * len(JOURNEY_STEPS)) + rng.randint(-2, 1)))
                event = JOURNEY_STEPS[rank]
            # Half the producers stamp their events (in the lead's own order; shuffled arrival makes some late),
            # one in ten replays an event an hour old, the rest say nothing of when.
            clock = rng.random()
            occurred = (now - timedelta(hours=1) if clock < 0.1 else
                        now + timedelta(milliseconds=10 * k) if clock < 0.6 else None)
            e = {"lead": lead, "event": event, "event_id": f"storm-{lead}-{k}-{uuid.uuid4().hex[:6]}",
                 "occurred_at": occurred.isoformat() if occurred else None, "duplicate": False}
            sent.append(e)
            out.append(e)
    rng.shuffle(out)
    return out


def run_storm(api: str, api_key: str, *, tenant_id: int = 42, leads: int = 20, per_lead: int = 200,
              clients: int = 16, seed: int | None = None) -> StormReport:
    seed = seed if seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    lead_ids = [create_lead(tenant_id, f"cust-00{3 + i % 4}", "advisor-anna") for i in range(leads)]
    events = plan_events(lead_ids, per_lead, rng)
    report = StormReport(seed, leads, len(events))
    answers: list[tuple[dict[str, Any], dict[str, Any]]] = []
    # When the first answer for each event id came back (this machine's clock, as PostgreSQL's): the API answers only
    # after the event's transaction committed, so a claim that began later saw the lead as the event left it.
    answered_at: dict[str, datetime] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            with UnitOfWork() as uow:
                live = int(uow.execute(MAX_LIVE).scalar_one())
            with lock:
                report.samples += 1
                report.max_live_seen = max(report.max_live_seen, live)
            stop.wait(0.05)

    headers = {"Authorization": f"Bearer {api_key}"}
    local = threading.local()

    def fire(e: dict[str, Any]) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=api, headers=headers, timeout=30)
        body = {"event": e["event"], "event_id": e["event_id"]}
        if e["occurred_at"]:
            body["occurred_at"] = e["occurred_at"]
        r = client.post(f"/api/v1/leads/{e['lead']}/events", json=body)
        at = datetime.now(UTC)
        with lock:
            if r.status_code != 200:
                report.errors.append(f"{r.status_code} {r.text[:200]}")
                return
            answers.append((e, r.json()))
            answered_at[e["event_id"]] = min(at, answered_at.get(e["event_id"], at))

    watcher = threading.Thread(target=sampler, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(fire, events))
    report.seconds = time.monotonic() - t0
    stop.set()
    watcher.join()
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e, a in answers:
        report.outcomes[a["outcome"] if a["outcome"] != "dropped" else f"dropped ({a['reason']})"] += 1
        groups[e["event_id"]].append(a)
    # Whichever copy of an event arrived first got the decision; every other copy must say "duplicate" and carry
    # that decision back.
    for copies in groups.values():
        if len(copies) < 2:
            continue
        report.duplicates_sent += len(copies) - 1
        real = [a for a in copies if a["outcome"] != "duplicate"]
        if len(real) == 1:
            report.duplicates_answered_first += sum(
                1 for a in copies if a["outcome"] == "duplicate" and a["decision"] == real[0]["outcome"])
    _check_end_state(lead_ids, report, answered_at)
    report.invariants = invariant_counts()
    return report


def _check_end_state(lead_ids: list[int], report: StormReport, answered_at: dict[str, datetime]) -> None:
    """The lead's newest intent is for its furthest step; and no nudge was sent by a claim that began after an
    event moving its lead past the nudge's step was answered (so committed: the claim saw the lead moved on)."""
    with UnitOfWork() as uow:
        for lead in lead_ids:
            step = uow.execute(sa.text("SELECT current_step FROM leads WHERE id = :l"), {"l": lead}).scalar()
            newest = uow.execute(sa.text(
                "SELECT step FROM lead_notification_intents WHERE lead_id = :l ORDER BY id DESC LIMIT 1"),
                {"l": lead}).scalar()
            if newest != step:
                report.wrong_final_intent.append(lead)
        rank = {s: i for i, s in enumerate(JOURNEY_STEPS)}
        sent = uow.execute(sa.text(
            "SELECT n.id, n.claimed_at, i.step, i.lead_id FROM notifications n "
            "JOIN lead_notification_intents i ON i.id = n.intent_id "
            "WHERE i.lead_id = ANY(:l) AND n.status IN ('SENT', 'DELIVERED')"), {"l": lead_ids}).all()
        report.nudges_sent = len(sent)
        applied = uow.execute(sa.text(
            "SELECT lead_id, event, event_id FROM lead_events WHERE lead_id = ANY(:l) "
            "AND outcome IN ('scheduled', 'sent_now')"), {"l": lead_ids}).all()
    for n in sent:
        for a in applied:
            answered = answered_at.get(str(a.event_id))
            if (a.lead_id == n.lead_id and rank[a.event] > rank[n.step]
                    and answered is not None and answered < n.claimed_at):
                report.stale_nudges_sent.append(n.id)
                break


def report_markdown(r: StormReport, where: str) -> str:
    lines = [f"# Journey storm — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
             f"{r.leads} leads × {r.events // max(1, r.leads)} events, shuffled, 16 concurrent clients through the "
             f"HTTP API ({where}); seed {r.seed} (replay with `outbox storm --seed {r.seed}`).", "",
             "| figure | value |", "|---|---|",
             f"| events | {r.events} |", f"| seconds | {r.seconds:.1f} |", f"| events/s | {r.events_per_s:.0f} |",
             f"| samples of every lead while it ran | {r.samples} |",
             f"| most live intents seen for one lead | {r.max_live_seen} |",
             f"| duplicates sent / answered with the first answer | {r.duplicates_sent} / "
             f"{r.duplicates_answered_first} |",
             f"| nudges sent during the storm | {r.nudges_sent} |",
             f"| nudges sent for a step already passed | {len(r.stale_nudges_sent)} |",
             f"| leads whose newest intent is not for their furthest step | {len(r.wrong_final_intent)} |",
             f"| errors | {len(r.errors)} |", "", "## Decisions", "", "| decision | events |", "|---|---|",
             *[f"| {k} | {v} |" for k, v in r.outcomes.most_common()], "", "## Invariants", "",
             "| invariant | count |", "|---|---|", *[f"| {k} | {v} |" for k, v in r.invariants.items()], "",
             f"Result: **{'PASS' if r.ok else 'FAIL'}**", ""]
    return "\n".join(lines)


def storm_drill(leads: int = 20, per_lead: int = 200, clients: int = 16, seed: int | None = None,
                out: Path = EVIDENCE) -> StormReport:
    """`outbox storm`: the storm against a system of its own — a fresh database (time scale 600), receiver, API,
    relay and the high and normal lane workers — written to `out`; both databases are reset afterwards."""
    isolated_environment("outbox_storm", 5, OUTBOX_TIME_SCALE="600", OUTBOX_API_RATE="100000",
                         OUTBOX_RECEIVER_URL="http://127.0.0.1:8091",
                         OUTBOX_APP_URL="http://127.0.0.1:8089")
    system = System(dict(os.environ), ROOT / ".run" / "storm-logs")
    try:
        system.receiver(8091, reset=True)
        system.api(8089)
        system.relay()
        for lane in ("high", "normal"):
            system.worker(lane)
        report = run_storm("http://127.0.0.1:8089", create_api_key(42, "storm"), leads=leads, per_lead=per_lead,
                           clients=clients, seed=seed)
    finally:
        system.stop_all()
    out.write_text(report_markdown(report, "`outbox storm`, its own database and workers"))
    db_url = os.environ["OUTBOX_DATABASE_URL"]
    ensure_database(db_url, reset=True)
    ensure_database(receiver_database_url(db_url), reset=True)
    return report
