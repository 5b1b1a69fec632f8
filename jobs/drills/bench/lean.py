"""The lean probe: the delivery step's durable shape with nothing of ours, the ceiling `e2e_ratio_lean` is read
against.

One asyncio process, raw psycopg (async) and httpx: each of `loops` connections claims up to `batch` due webhook
rows of the lane in ONE statement (`FOR UPDATE SKIP LOCKED`, each row its lease and its next fence token, its
envelope read in the same statement), POSTs them to the receiver concurrently (one client, keep-alive, signed as
the workers sign: domain/delivery/signing.py, the same canonical body), and records the batch in ONE statement
(each row fenced by its own token: DELIVERED with its attempt line, a failed send released for a retry). Every
claim and record commits durably, as the workers' do. No arq, no Redis, no floor rules, no logs.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from psycopg import AsyncConnection
from sqlalchemy.engine import make_url

from domain.delivery.signing import signed_headers
from domain.settings import get_settings
from jobs.drills.bench.common import cpu_ticks

CLAIM = """
WITH due AS (
  SELECT id FROM notifications
  WHERE status = 'QUEUED' AND channel = 'webhook' AND lane = %(lane)s AND next_attempt_at <= now()
    AND (leased_until IS NULL OR leased_until < now())
  ORDER BY id LIMIT %(n)s FOR UPDATE SKIP LOCKED
), c AS (
  UPDATE notifications n SET attempts = n.attempts + 1, leased_until = now() + make_interval(secs => %(lease)s),
         claimed_at = now(), claim_token = n.claim_token + 1
  FROM due WHERE n.id = due.id
  RETURNING n.id, n.claim_token, n.attempts, n.event_id
)
SELECT c.id, c.claim_token, c.attempts, e.event_id, e.tenant_id, e.aggregate_type, e.aggregate_id,
       e.aggregate_revision, e.event_type, e.schema_version, e.occurred_at, e.request_id, e.causation_id,
       e.actor_ref, e.payload
FROM c JOIN outbox_events e ON e.event_id = c.event_id
"""

RECORD = """
WITH v AS (
  SELECT * FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(toks)s AS bigint[]), CAST(%(nos)s AS int[]),
                       CAST(%(ok)s AS boolean[]), CAST(%(codes)s AS int[]), CAST(%(lat)s AS float8[]),
                       CAST(%(refs)s AS text[]), CAST(%(excerpts)s AS text[]))
         AS v(id, tok, no, ok, code, latency, ref, excerpt)
), n AS (
  UPDATE notifications n
  SET status = CASE WHEN v.ok THEN 'DELIVERED' ELSE n.status END,
      provider_reference = CASE WHEN v.ok THEN v.ref ELSE n.provider_reference END,
      sent_at = CASE WHEN v.ok THEN coalesce(n.sent_at, now()) ELSE n.sent_at END,
      settled_at = CASE WHEN v.ok THEN now() ELSE n.settled_at END,
      next_attempt_at = CASE WHEN v.ok THEN n.next_attempt_at ELSE now() + interval '1 second' END,
      leased_until = NULL, last_error_class = CASE WHEN v.ok THEN NULL ELSE 'http' END,
      claim_token = n.claim_token + 1
  FROM v WHERE n.id = v.id AND n.status = 'QUEUED' AND n.claim_token = v.tok
  RETURNING n.id, n.created_at, v.no, v.ok, v.code, v.latency, v.excerpt
), a AS (
  INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome,
                                     status_code, error_class, latency_ms, response_excerpt, notification_created_at)
  SELECT id, no, 'lean-probe', %(started)s, now(), CASE WHEN ok THEN 'sent' ELSE 'retry' END, code,
         CASE WHEN ok THEN NULL ELSE 'http' END, latency, excerpt, created_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) FILTER (WHERE ok) FROM n
"""


def _conninfo() -> str:
    return make_url(get_settings().database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _body(row: tuple[Any, ...]) -> tuple[str, str]:
    """The webhook's event id and body, as Envelope.wire() and canonical_json() make them."""
    (_, _, _, event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, schema_version,
     occurred_at, request_id, causation_id, actor_ref, payload) = row
    wire = {"event_id": str(event_id), "tenant_id": tenant_id, "aggregate_type": aggregate_type,
            "aggregate_id": aggregate_id, "aggregate_revision": aggregate_revision, "event_type": event_type,
            "schema_version": schema_version, "occurred_at": occurred_at.isoformat(), "request_id": request_id,
            "causation_id": str(causation_id) if causation_id else None, "actor_ref": actor_ref, "payload": payload}
    return str(event_id), json.dumps(wire, sort_keys=True, separators=(",", ":"), default=str)


async def drain(lane: str = "high", batch: int = 50, loops: int = 2, concurrency: int = 32,
                lease_s: float = 30.0) -> dict[str, float]:
    """Claim, send, record until the lane has nothing due. Returns what was delivered, claimed and how fast."""
    s = get_settings()
    url = f"{s.receiver_url}/webhooks/orders"
    sem = asyncio.Semaphore(concurrency)
    delivered = claimed = batches = 0

    async def post(client: httpx.AsyncClient, row: tuple[Any, ...]) -> tuple[bool, int, float, str | None, str]:
        eid, body = _body(row)
        headers = {**signed_headers(s.webhook_secret, eid, body), "Idempotency-Key": eid}
        async with sem:
            t = time.perf_counter()
            try:
                r = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                return False, 0, (time.perf_counter() - t) * 1000, None, type(exc).__name__
        ref = r.json().get("result_ref") if r.status_code == 200 else None
        return r.status_code == 200, r.status_code, (time.perf_counter() - t) * 1000, ref, r.text[:200]

    async def loop(client: httpx.AsyncClient) -> None:
        nonlocal delivered, claimed, batches
        async with await AsyncConnection.connect(_conninfo(), autocommit=True) as conn:
            while True:
                started = datetime.now(UTC)
                async with conn.transaction():
                    rows = await (await conn.execute(CLAIM, {"lane": lane, "n": batch, "lease": lease_s})).fetchall()
                if not rows:
                    return
                sent = await asyncio.gather(*(post(client, row) for row in rows))
                async with conn.transaction():
                    got = await (await conn.execute(RECORD, {
                        "ids": [r[0] for r in rows], "toks": [r[1] for r in rows], "nos": [r[2] for r in rows],
                        "ok": [x[0] for x in sent], "codes": [x[1] for x in sent], "lat": [x[2] for x in sent],
                        "refs": [x[3] for x in sent], "excerpts": [x[4] for x in sent], "started": started,
                    })).fetchone()
                delivered += int(got[0]) if got else 0
                claimed += len(rows)
                batches += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        await asyncio.gather(*(loop(client) for _ in range(loops)))
    took = time.perf_counter() - t0
    return {"delivered": float(delivered), "claimed": float(claimed), "batches": float(batches), "seconds": took,
            "per_s": delivered / took if took > 0 else 0.0}


def run_probe(**kw: Any) -> dict[str, float]:
    """`drain` in its own event loop, with this process's CPU over it (the probe is this one process)."""
    tick = os.sysconf("SC_CLK_TCK")
    before = cpu_ticks(os.getpid())
    out = asyncio.run(drain(**kw))
    out["cpu_s"] = (cpu_ticks(os.getpid()) - before) / tick
    return out
