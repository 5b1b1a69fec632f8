"""`outbox scenario`: seed 004 §3.4 end to end, against real processes, in its own database and Redis db.

Every line of the transcript is printed from what really happened (rows read back, receiver counts, exit codes);
nothing is a literal. `outbox scenario` writes evidence/scenario.md (or `--out PATH`) with the transcript, the
invariant table and versions, and says where it wrote; the test suite writes to a temporary file.

Deterministic: `--seed N` (random and printed when not given) picks the ids and times the scenario makes — event
ids (also the webhook's Idempotency-Key), request ids, the commands' clock — so two runs with one seed print the same
transcript. What the outside world mints (the receiver's random `fx-…` effect ids) is shown as `fx#1`, `fx#2`… in
order of first appearance, with the real ids kept beside the transcript in the evidence file.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import httpx
import redis as redis_lib
import sqlalchemy as sa

from domain import faults
from domain.db import UnitOfWork
from domain.delivery.lanes import set_lane_paused
from domain.delivery.queue import order_channel
from domain.delivery.wakeups import after_commit, arq_pool, batched
from domain.orders.commands import Committed, execute_order_command
from domain.orders.policy import Reject
from jobs.ops.checks import all_invariants
from jobs.ops.dbadmin import ensure_database, isolated_environment
from jobs.ops.procs import (
    ROOT,
    System,
    batch_claim_ran,
    job_tries,
    receiver_database_url,
    wait_until,
    wait_worker_ready,
)

# A parallel test run (OUTBOX_TEST_SLOT, see tests/conftest.py) gets its own database, receiver port and logs.
_SLOT = int(os.environ.get("OUTBOX_TEST_SLOT", "0") or 0)
_SLOT_SUFFIX = f"_s{_SLOT}" if _SLOT else ""
SCENARIO_DB = f"outbox_scenario{_SLOT_SUFFIX}"
SCENARIO_REDIS_DB = 3
RECEIVER_PORT = 8097 + 100 * _SLOT
LOGS = f"scenario-logs{_SLOT_SUFFIX}"


@dataclass(frozen=True)
class SeededIds:
    """Everything the scenario makes up, from one seed: the three commands' event ids, request ids and clock."""

    event_ids: tuple[uuid.UUID, uuid.UUID, uuid.UUID]
    request_ids: tuple[str, str, str]
    clock: tuple[datetime, datetime, datetime]


def seeded_ids(seed: int) -> SeededIds:
    rng = random.Random(seed)
    e1, e2, e3 = (uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(3))
    r1, r2, r3 = (f"req-{n}" for n in rng.sample(range(100_000, 1_000_000), 3))
    # A morning of 2026, to the second; the two later commands follow a minute or two apart.
    t1 = datetime(2026, 1, 1, 8, tzinfo=UTC) + timedelta(days=rng.randrange(365), seconds=rng.randrange(4 * 3600))
    t2 = t1 + timedelta(seconds=rng.randrange(60, 120))
    t3 = t2 + timedelta(seconds=rng.randrange(60, 120))
    return SeededIds((e1, e2, e3), (r1, r2, r3), (t1, t2, t3))


class _Labels:
    """Ids the outside world mints at random, numbered in order of first appearance (`fx#1`)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, ref: object) -> str:
        return self.seen.setdefault(str(ref), f"fx#{len(self.seen) + 1}")


def _versions() -> dict[str, str]:
    with UnitOfWork() as uow:
        pg = uow.execute(sa.text("SHOW server_version")).scalar_one()
    r = redis_lib.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
    rv = cast(dict[str, Any], r.info("server"))["redis_version"]
    r.close()
    return {"Python": platform.python_version(), "PostgreSQL": str(pg), "Redis": str(rv),
            "SQLModel": version("sqlmodel"), "SQLAlchemy": version("sqlalchemy"), "Reflex": version("reflex"),
            "arq": version("arq"), "psycopg": version("psycopg"), "httpx": version("httpx")}


def _row(nid: int) -> dict[str, object]:
    with UnitOfWork() as uow:
        r = uow.execute(sa.text("SELECT id, status, attempts, job_id, provider_reference FROM notifications "
                                "WHERE id = :i"), {"i": nid}).one()
    return dict(r._mapping)


def _counts() -> tuple[int, int]:
    with UnitOfWork() as uow:
        ev = uow.execute(sa.text("SELECT count(*) FROM outbox_events")).scalar_one()
        n = uow.execute(sa.text("SELECT count(*) FROM notifications")).scalar_one()
    return int(ev), int(n)


EVIDENCE = ROOT / "evidence" / "scenario.md"


def run_scenario(keep: bool = False, out: Path = EVIDENCE, seed: int | None = None) -> bool:
    seed = seed if seed is not None else random.randrange(2**31)
    ids = seeded_ids(seed)
    effect = _Labels()
    receiver_url = f"http://127.0.0.1:{RECEIVER_PORT}"
    redis_url = isolated_environment(SCENARIO_DB, SCENARIO_REDIS_DB, OUTBOX_RECEIVER_URL=receiver_url,
                                     OUTBOX_LEASE_SECONDS="2", OUTBOX_SCAN_INTERVAL="0.5")
    db_url = os.environ["OUTBOX_DATABASE_URL"]
    lines: list[str] = []
    notes: list[str] = []  # what varies from run to run, kept out of the transcript

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    say(f"scenario seed={seed} (replay with `outbox scenario --seed {seed}`)")
    r = redis_lib.Redis.from_url(redis_url)
    system = System(dict(os.environ), ROOT / ".run" / LOGS)
    checks: dict[str, bool] = {}
    try:
        system.receiver(RECEIVER_PORT, reset=True)
        for lane in ("high", "normal"):
            set_lane_paused(lane, True)
        system.relay()
        system.worker("high")
        system.worker("normal")
        # Two "online views": two subscriptions on the order's channel.
        views = [r.pubsub() for _ in range(2)]  # type: ignore[no-untyped-call]
        for v in views:
            v.subscribe(order_channel(42, 913))
            v.get_message(timeout=1)

        say(f"TX begin tenant=42 order=913 expected_revision=17 request_id={ids.request_ids[0]} "
            f"at={ids.clock[0]:%Y-%m-%dT%H:%M:%SZ}")
        result = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                                       actor_ref="operator:alice", request_id=ids.request_ids[0],
                                       event_id=ids.event_ids[0], now=ids.clock[0])
        assert isinstance(result, Committed), result
        webhook = next(o for o in result.owed if o.lane == "high")
        say(f"TX commit order_revision={result.revision} event_id={result.event_id} job_id={webhook.job_id}")

        async def _after() -> dict[str, int]:
            pool = await arq_pool()
            try:
                return await after_commit(pool, result)
            finally:
                await pool.aclose()

        woke = asyncio.run(_after())
        got = [v.get_message(timeout=2) for v in views]
        revs = [json.loads(m["data"])["revision"] for m in got if m]
        say(f"pubsub topic={order_channel(42, 913)} refresh_revision={max(revs) if revs else None} "
            f"online_views={woke['views']}")
        checks["both views refreshed"] = revs == [result.revision, result.revision]

        say("worker paused")
        # The high worker is polling and has tried this very row at least once while its lane was paused: a batched
        # lane's drain loop ran its claim (which a pause makes match nothing), the per-row path took the job.
        wait_worker_ready(r, "high", 30)
        if batched("high"):
            wait_until(lambda: batch_claim_ran("outbox-worker-high"), 30, "the paused worker's drain loop to claim")
        else:
            wait_until(lambda: job_tries(r, webhook.job_id) >= 1, 30, "the paused worker to take the job")
        checks["paused lane sends nothing"] = _row(webhook.notification_id)["attempts"] == 0
        system.stop_all()
        r.flushdb()  # Redis keeps nothing on disk: a restart loses every wake-up
        system = System(dict(os.environ), ROOT / ".run" / LOGS)
        system.receiver(RECEIVER_PORT)
        system.relay()
        say("application restarted (all processes; Redis flushed)")
        row = _row(webhook.notification_id)
        say(f"job id={row['job_id']} state={'available' if row['status'] == 'QUEUED' else row['status']} "
            f"persisted={row['status'] == 'QUEUED'}")
        checks["pending work survived restart"] = row["status"] == "QUEUED"

        crashing = system.worker("high", fault="after_remote_accept_before_local_ack", name="worker-high-faulty")
        set_lane_paused("high", False)
        code = crashing.wait_exit(30)
        fx = httpx.get(f"{receiver_url}/effects/{result.event_id}").json()
        say(f"attempt=1 event_id={result.event_id} webhook=accepted effect_id={effect(fx['result_refs'][0])}")
        say(f"fault injected point=after_remote_accept_before_local_ack worker_exit={code}")
        checks["worker died after the remote effect"] = code == faults.EXIT_CODE and fx["effects"] == 1

        system.worker("high")
        wait_until(lambda: _row(webhook.notification_id)["status"] in ("SENT", "DELIVERED"), 30, "redelivery")
        done = _row(webhook.notification_id)
        fx = httpx.get(f"{receiver_url}/effects/{result.event_id}").json()
        with UnitOfWork() as uow:
            recorded = uow.execute(sa.text(
                "SELECT attempt_no, outcome, error_class FROM notification_attempts WHERE notification_id = :i "
                "ORDER BY attempt_no"), {"i": webhook.notification_id}).all()
        attempt2 = recorded[-1].outcome
        # How many claims and deliveries the redelivery took depends on timing (a lease running out, a retry):
        # the transcript says "at least two", the evidence file keeps the exact numbers beside it.
        say(f"attempt{_at_least(cast(int, done['attempts']), 2)} event_id={result.event_id} webhook={attempt2} "
            f"effect_id={effect(done['provider_reference'])}")
        say(f"job id={done['job_id']} state=completed effective_calls={fx['effects']} "
            f"deliveries{_at_least(fx['deliveries'], 2)}")
        notes.append(f"In this run the row took {done['attempts']} claims (recorded: "
                     + ", ".join(f"#{a.attempt_no} {a.outcome}" + (f" ({a.error_class})" if a.error_class else "")
                                 for a in recorded)
                     + f") and the receiver saw {fx['deliveries']} deliveries.")
        checks["two deliveries, one effect"] = fx["effects"] == 1 and fx["deliveries"] >= 2 \
            and done["provider_reference"] == fx["result_refs"][0]

        before = _counts()
        bad = execute_order_command(tenant_id=42, order_id=913, command="cancel", expected_revision=18,
                                    actor_ref="operator:bob", request_id=ids.request_ids[1],
                                    event_id=ids.event_ids[1], now=ids.clock[1])
        assert isinstance(bad, Reject)
        after = _counts()
        say(f"invalid transition expected=18 requested=cancelled request_id={ids.request_ids[1]} "
            f"at={ids.clock[1]:%Y-%m-%dT%H:%M:%SZ} reason={bad.error}")
        say(f"transaction=rolled_back order_revision={bad.current_revision} new_jobs={after[1] - before[1]}")
        checks["invalid transition wrote nothing"] = bad.error == "policy_denied" and after == before

        stale = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                                      actor_ref="operator:bob", request_id=ids.request_ids[2],
                                      event_id=ids.event_ids[2], now=ids.clock[2])
        assert isinstance(stale, Reject)
        say(f"optimistic conflict expected=17 request_id={ids.request_ids[2]} at={ids.clock[2]:%Y-%m-%dT%H:%M:%SZ} "
            f"reason={stale.error} current_revision={stale.current_revision} new_events={_counts()[0] - after[0]}")
        checks["stale command wrote nothing"] = stale.error == "optimistic_conflict" and _counts() == after

        inv = all_invariants(receiver_url)
        checks["invariants all zero"] = all(v == 0 for v in inv.values())
        ok = all(checks.values())
        say(f"scenario result={'PASS' if ok else 'FAIL'}")
        for name, passed in checks.items():
            if not passed:
                print(f"  failed check: {name}")
        minted = ", ".join(f"{label} = `{ref}`" for ref, label in effect.seen.items()) or "none"
        notes.append(f"Effect ids the receiver minted at random in this run: {minted}.")
        _write_evidence(out, seed, lines, notes, inv, checks)
        print(f"evidence written to {out}")
        for v in views:
            v.close()
        return ok
    finally:
        system.stop_all()
        r.close()
        if not keep:
            ensure_database(db_url, reset=True)
            ensure_database(receiver_database_url(db_url), reset=True)


def _at_least(n: int, floor: int) -> str:
    """`>=2` for any count of two or more (a stable transcript), else the exact `=n` (which then fails a check)."""
    return f">={floor}" if n >= floor else f"={n}"


def _write_evidence(path: Path, seed: int, lines: list[str], notes: list[str], inv: dict[str, int | None],
                    checks: dict[str, bool]) -> None:
    out = [f"# Scenario transcript (seed 004 §3.4) — run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, seed {seed}", "",
           "Produced by `outbox scenario` against real processes (receiver, relay, lane workers), its own database",
           f"`{SCENARIO_DB}` and Redis db {SCENARIO_REDIS_DB}. Ids and times come from the seed: `outbox scenario "
           f"--seed {seed}` prints this transcript again.", "", "```", *lines, "```", "",
           *[line for note in notes for line in (note, "")], "## Checks", "",
           "| check | result |", "|---|---|", *[f"| {k} | {'PASS' if v else 'FAIL'} |" for k, v in checks.items()],
           "", "## Invariants", "", "| invariant | count |", "|---|---|",
           *[f"| {k} | {v} |" for k, v in inv.items()], "", "## Versions", "", "| component | version |",
           "|---|---|", *[f"| {k} | {v} |" for k, v in _versions().items()], ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out))
