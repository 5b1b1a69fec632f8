"""The commit path: the order command beside the same statements by raw psycopg, at 1, 4 and 16 clients."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.types.json import Jsonb

from domain.db import get_engine
from domain.orders.commands import Committed, execute_order_command
from jobs.drills.bench.common import orders, say


def bench_commit(n: int) -> dict[str, float]:
    ids = orders(n)
    t0 = time.perf_counter()
    for oid in ids:
        r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                                  actor_ref="bench", request_id="bench")
        assert isinstance(r, Committed)
    outbox = n / (time.perf_counter() - t0)
    raw_ids = orders(n)
    eng = get_engine()
    t0 = time.perf_counter()
    for oid in raw_ids:
        with eng.begin() as c:
            c.execute(sa.text("UPDATE orders SET revision = revision + 1 WHERE id = :o"), {"o": oid})
    raw = n / (time.perf_counter() - t0)
    return {"outbox_commits_per_s": outbox, "raw_updates_per_s": raw, "ratio": outbox / raw}


_RAW_COMMIT = (
    "UPDATE orders SET status = 'approved', revision = revision + 1, updated_at = now() "
    "WHERE tenant_id = 42 AND id = %(o)s AND revision = 1 RETURNING revision",
    "INSERT INTO outbox_events (event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
    "schema_version, occurred_at, request_id, actor_ref, payload, digest) VALUES (%(e)s, 42, 'order', %(o)s::text, 2, "
    "'order.approved', 1, now(), 'bench', 'bench', %(p)s, 'bench')",
    # The ledger's own shape: the key kept first in `ledger_keys`, the row only if it was new.
    "WITH v AS (SELECT c, l, 'raw-' || c || %(e)s::text AS k, nextval('notifications_id_seq') AS nid "
    "FROM (VALUES ('webhook', 'high'), ('email', 'normal')) v(c, l)), "
    "kept AS (INSERT INTO ledger_keys (dedupe_key, notification_id, created_at, tenant_id) "
    "SELECT k, nid, now(), 42 FROM v "
    "ON CONFLICT (dedupe_key) DO NOTHING RETURNING notification_id) "
    "INSERT INTO notifications (id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
    "cost_cents, next_attempt_at, event_id, order_id, attempts, max_attempts, reserved_cents, created_at) "
    "SELECT v.nid, 42, 'cust-001', c, l, 'order.approved', %(p)s, k, 'QUEUED', "
    "coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = 42 AND channel = c), 0), now(), %(e)s, "
    "%(o)s, 0, 8, 0, now() FROM v JOIN kept ON kept.notification_id = v.nid RETURNING id, lane",
    "SELECT pg_notify('outbox_owed', 'high')",
)


def _in_clients(clients: int, ids: list[int], one: Callable[[Any, int], None], connect: Callable[[], Any]) -> float:
    """Commands per second with `clients` threads, each on its own connection, over disjoint orders."""
    def run(chunk: list[int]) -> None:
        conn = connect()
        try:
            for oid in chunk:
                one(conn, oid)
        finally:
            if conn is not None:
                conn.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, [ids[i::clients] for i in range(clients)]))
    return len(ids) / (time.perf_counter() - t0)


def _outbox_approve(_: object, oid: int) -> None:
    r = execute_order_command(tenant_id=42, order_id=oid, command="approve", expected_revision=1,
                              actor_ref="bench", request_id="bench")
    assert isinstance(r, Committed)


def _raw_approve(conn: psycopg.Connection[Any], oid: int) -> None:
    params = {"o": oid, "e": uuid.uuid4(), "p": Jsonb({"order_id": oid, "status": "approved", "revision": 2})}
    with conn.transaction():
        for stmt in _RAW_COMMIT:
            cur = conn.execute(stmt, params)
            if cur.description is not None:
                cur.fetchall()


def bench_commit_clients(n: int, clients: tuple[int, ...] = (1, 4, 16)) -> dict[str, float]:
    """The order command (through the app's engine, its pool and to_thread-free sync calls) vs the same statements
    — order update, envelope, two ledger rows, NOTIFY — by raw psycopg, at 1, 4 and 16 concurrent clients."""
    url = os.environ["OUTBOX_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    out: dict[str, float] = {}
    for k in clients:
        out[f"commit_per_s_{k}"] = _in_clients(k, orders(n), _outbox_approve, lambda: None)
        out[f"commit_raw_per_s_{k}"] = _in_clients(k, orders(n), _raw_approve, lambda: psycopg.connect(url))
        say(f"{k:>2} clients: outbox {out[f'commit_per_s_{k}']:.0f}/s, "
              f"raw {out[f'commit_raw_per_s_{k}']:.0f}/s")
    if 4 in clients:
        out["commit_ratio_4_clients"] = out["commit_per_s_4"] / out["commit_raw_per_s_4"]
    return out


