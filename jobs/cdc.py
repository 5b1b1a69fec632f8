"""CDC relay: committed outbox events, in commit order, from a logical replication slot to a Redis Stream.

Each round peeks up to a batch of decoded rows (whole transactions, `domain.cdc.slot.peek`), publishes every event
of them with XADD in one pipeline, and only then confirms the slot past the last commit read. Killed between the
two, the next round reads the same transactions again: duplicates in the stream (same fields, same `id`), never a
gap. Consumers dedupe by `id` (fulfilment/'s inbox). psycopg 3 speaks no replication protocol, so the slot is
polled with SQL (README, "Dependencies and why")."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
import redis as redis_lib

from domain import faults
from domain.cdc import message, slot, views
from domain.cdc.slot import LogicalDecodingUnavailable
from domain.db import libpq_url
from domain.settings import get_settings

log = logging.getLogger("outbox.cdc")
BATCH_ROWS = 1000  # decoded rows per peek (whole transactions: the last one may take it past)
POLL_IDLE_S = 0.1  # an idle slot is asked again this soon
RETRY_S = 1.0  # PostgreSQL or Redis away: try again this soon (the slot keeps what was not confirmed)
EXIT_UNAVAILABLE = 2  # logical decoding impossible here: an operator must act (the message says how)
FAULT_POINT = "cdc_after_publish_before_confirm"


@dataclass(frozen=True)
class Round:
    transactions: int
    events: int
    confirmed_lsn: str | None


def connect(url: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
    """Autocommit (each slot function its own statement); UTC and ISO dates, so a timestamp decoded twice is spelt
    the same both times (wal2json renders values with the session's settings)."""
    return psycopg.connect(libpq_url(url or get_settings().database_url), autocommit=True,
                           options="-c TimeZone=UTC -c DateStyle=ISO,YMD", application_name="outbox-cdc-relay")


def prepare(conn: psycopg.Connection[tuple[object, ...]], slot_name: str) -> bool:
    """Fail closed where decoding cannot run; create the slot if missing (True when created)."""
    slot.check_ready(conn)
    return slot.ensure_slot(conn, slot_name)


def relay_round(conn: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, slot_name: str, stream: str,
                rows: int = BATCH_ROWS, after_publish: Callable[[], None] | None = None) -> Round:
    """One round: peek, XADD every event, then confirm. `after_publish` runs between the two (a test's kill)."""
    committed = message.committed(slot.peek(conn, slot_name, rows))
    if not committed:
        return Round(0, 0, None)
    events = [fields for tx in committed for fields in tx.events]
    if events:
        pipe = r.pipeline(transaction=False)
        for fields in events:
            pipe.xadd(stream, fields)  # type: ignore[arg-type]  # no MAXLEN: a cap could drop unconsumed events
        pipe.execute()
        faults.hit(FAULT_POINT)
        if after_publish is not None:
            after_publish()
    slot.advance(conn, slot_name, committed[-1].commit_lsn)
    return Round(len(committed), len(events), committed[-1].commit_lsn)


def refeed(conn: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, stream: str, since: datetime,
           batch: int = 1000) -> int:
    """Publish again every event that occurred at or after `since` (docs/relays.md, "A primary failover"): what a
    lost slot, a slot missing on a promoted standby, or a Redis that lost the stream left out. What the stream
    already had comes again with the same digest and changes nothing in an inbox. Returns how many were published."""
    published = 0
    for chunk in views.events_since(conn, since, batch):
        pipe = r.pipeline(transaction=False)
        for fields in chunk:
            pipe.xadd(stream, fields)  # type: ignore[arg-type]
        pipe.execute()
        published += len(chunk)
    return published


def run_cdc_relay(once: bool = False, stop: threading.Event | None = None) -> int:
    """Relay until SIGTERM (or `stop`); the process's exit code. Exits EXIT_UNAVAILABLE, with the plain message of
    what to run, where logical decoding is not possible; never changes a server setting to make it so."""
    s = get_settings()
    stop = stop or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=5, socket_connect_timeout=5)
    conn: psycopg.Connection[tuple[object, ...]] | None = None
    try:
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = connect()
                    created = prepare(conn, s.cdc_slot)
                    log.info("cdc relay ready", extra={"slot": s.cdc_slot, "stream": s.cdc_stream,
                                                       "slot_created": created})
                done = relay_round(conn, r, s.cdc_slot, s.cdc_stream)
                if done.events:
                    log.info("cdc published", extra={"events": done.events, "lsn": done.confirmed_lsn})
                if once:
                    return 0
                if not done.transactions:
                    stop.wait(POLL_IDLE_S)
            except LogicalDecodingUnavailable as e:
                print(f"outbox cdc-relay: {e}", file=sys.stderr, flush=True)
                return EXIT_UNAVAILABLE
            except (psycopg.OperationalError, redis_lib.RedisError) as e:
                reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                if once:
                    print(f"outbox cdc-relay: {reason}", file=sys.stderr, flush=True)
                    return 1
                log.warning("cdc relay waiting", extra={"error": reason, "retry_s": RETRY_S})
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(RETRY_S)
        return 0
    finally:
        if conn is not None:
            conn.close()
        r.close()
