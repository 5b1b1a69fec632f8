"""`outbox scenario`: seed 004 §3.4 end to end, against real processes, in its own database and Redis db.

Every line of the transcript is printed from what really happened (rows read back, receiver counts, exit codes);
nothing is a literal. `outbox scenario` writes evidence/scenario.md (or `--out PATH`) with the transcript, the
invariant table and versions, and says where it wrote; the test suite writes to a temporary file.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import httpx
import redis as redis_lib
import sqlalchemy as sa

from domain import faults
from domain.commands import Committed, Rejected, execute_order_command
from domain.db import UnitOfWork
from domain.delivery.lanes import set_lane_paused
from domain.queue import order_channel
from domain.wakeups import after_commit, arq_pool
from jobs.tools.checks import all_invariants
from jobs.tools.dbadmin import ensure_database, isolated_environment
from jobs.tools.procs import ROOT, System, job_tries, receiver_database_url, wait_until, wait_worker_ready

SCENARIO_DB = "outbox_scenario"
SCENARIO_REDIS_DB = 3
RECEIVER_PORT = 8097


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


def run_scenario(keep: bool = False, out: Path = EVIDENCE) -> bool:
    receiver_url = f"http://127.0.0.1:{RECEIVER_PORT}"
    redis_url = isolated_environment(SCENARIO_DB, SCENARIO_REDIS_DB, OUTBOX_RECEIVER_URL=receiver_url,
                                     OUTBOX_LEASE_SECONDS="2", OUTBOX_SCAN_INTERVAL="0.5")
    db_url = os.environ["OUTBOX_DATABASE_URL"]
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    r = redis_lib.Redis.from_url(redis_url)
    system = System(dict(os.environ), ROOT / ".run" / "scenario-logs")
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

        say("TX begin tenant=42 order=913 expected_revision=17")
        result = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                                       actor_ref="operator:alice", request_id="req-501")
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
        # The high worker is polling and has taken this very job at least once while its lane was paused.
        wait_worker_ready(r, "high", 30)
        wait_until(lambda: job_tries(r, webhook.job_id) >= 1, 30, "the paused worker to take the job")
        checks["paused lane sends nothing"] = _row(webhook.notification_id)["attempts"] == 0
        system.stop_all()
        r.flushdb()  # Redis keeps nothing on disk: a restart loses every wake-up
        system = System(dict(os.environ), ROOT / ".run" / "scenario-logs")
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
        say(f"attempt=1 event_id={result.event_id} webhook=accepted effect_id={fx['result_refs'][0]}")
        say(f"fault injected point=after_remote_accept_before_local_ack worker_exit={code}")
        checks["worker died after the remote effect"] = code == faults.EXIT_CODE and fx["effects"] == 1

        system.worker("high")
        wait_until(lambda: _row(webhook.notification_id)["status"] in ("SENT", "DELIVERED"), 30, "redelivery")
        done = _row(webhook.notification_id)
        fx = httpx.get(f"{receiver_url}/effects/{result.event_id}").json()
        with UnitOfWork() as uow:
            attempt2 = uow.execute(sa.text(
                "SELECT outcome FROM notification_attempts WHERE notification_id = :i ORDER BY attempt_no DESC "
                "LIMIT 1"), {"i": webhook.notification_id}).scalar_one()
        say(f"attempt={done['attempts']} event_id={result.event_id} webhook={attempt2} "
            f"effect_id={done['provider_reference']}")
        say(f"job id={done['job_id']} state=completed effective_calls={fx['effects']} deliveries={fx['deliveries']}")
        checks["two deliveries, one effect"] = fx["effects"] == 1 and fx["deliveries"] >= 2 \
            and done["provider_reference"] == fx["result_refs"][0]

        before = _counts()
        bad = execute_order_command(tenant_id=42, order_id=913, command="cancel", expected_revision=18,
                                    actor_ref="operator:bob", request_id="req-502")
        assert isinstance(bad, Rejected)
        after = _counts()
        say(f"invalid transition expected=18 requested=cancelled reason={bad.error}")
        say(f"transaction=rolled_back order_revision={bad.current_revision} new_jobs={after[1] - before[1]}")
        checks["invalid transition wrote nothing"] = bad.error == "policy_denied" and after == before

        stale = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                                      actor_ref="operator:bob", request_id="req-503")
        assert isinstance(stale, Rejected)
        say(f"optimistic conflict expected=17 reason={stale.error} current_revision={stale.current_revision} "
            f"new_events={_counts()[0] - after[0]}")
        checks["stale command wrote nothing"] = stale.error == "optimistic_conflict" and _counts() == after

        inv = all_invariants(receiver_url)
        checks["invariants all zero"] = all(v == 0 for v in inv.values())
        ok = all(checks.values())
        say(f"scenario result={'PASS' if ok else 'FAIL'}")
        for name, passed in checks.items():
            if not passed:
                print(f"  failed check: {name}")
        _write_evidence(out, lines, inv, checks)
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


def _write_evidence(path: Path, lines: list[str], inv: dict[str, int | None], checks: dict[str, bool]) -> None:
    out = [f"# Scenario transcript (seed 004 §3.4) — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
           "Produced by `outbox scenario` against real processes (receiver, relay, lane workers), its own database",
           f"`{SCENARIO_DB}` and Redis db {SCENARIO_REDIS_DB}.", "", "```", *lines, "```", "", "## Checks", "",
           "| check | result |", "|---|---|", *[f"| {k} | {'PASS' if v else 'FAIL'} |" for k, v in checks.items()],
           "", "## Invariants", "", "| invariant | count |", "|---|---|",
           *[f"| {k} | {v} |" for k, v in inv.items()], "", "## Versions", "", "| component | version |",
           "|---|---|", *[f"| {k} | {v} |" for k, v in _versions().items()], ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out))
