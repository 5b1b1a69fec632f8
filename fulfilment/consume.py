"""Consuming the stream with a consumer group: read, apply in one transaction, commit, then XACK.

A message read and never acknowledged (the consumer killed after its commit, or before it) is read again: first
this consumer's own pending ones when it starts, then any another consumer of the group left idle for
`claim_idle_ms` (XAUTOCLAIM). The inbox makes the second application change nothing."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import redis as redis_lib

from fulfilment import db, inbox
from fulfilment.settings import get_settings

FAULT_AFTER_COMMIT = "after_commit_before_ack"
EXIT_FAULT = 86


@dataclass
class Tally:
    outcomes: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def ensure_group(r: redis_lib.Redis, stream: str, group: str) -> None:
    """The group reads the stream from its first entry (MKSTREAM: before the relay's first event too)."""
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis_lib.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


def _decode(fields: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in fields.items()}


def handle(conn: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, stream: str, group: str,
           entries: list[tuple[bytes, dict[bytes, bytes]]], tally: Tally,
           after_commit: Callable[[], None] | None = None) -> None:
    """One read's messages in ONE transaction (each with its inbox row), committed, then acknowledged together.
    A failure anywhere rolls the whole read back and acknowledges none of it: all of it comes again, and what
    the inbox already holds changes nothing. (One transaction per message cost a commit's fsync each: about 110
    events/s, docs/relays.md.)"""
    if not entries:
        return
    outcomes: list[str] = []
    with conn.transaction():
        for _msg_id, fields in entries:
            if fields:  # empty: deleted from the stream while pending, nothing to apply
                outcomes.append(inbox.apply(conn, inbox.Event.from_fields(_decode(fields))))
    for outcome in outcomes:
        tally.add(outcome)
    if get_settings().fault == FAULT_AFTER_COMMIT:
        print(f"fault injected point={FAULT_AFTER_COMMIT} pid={os.getpid()}", file=sys.stderr, flush=True)
        os._exit(EXIT_FAULT)
    if after_commit is not None:
        after_commit()
    r.xack(stream, group, *[msg_id for msg_id, _fields in entries])


def consume_once(conn: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, tally: Tally,
                 block_ms: int | None = None, after_commit: Callable[[], None] | None = None) -> int:
    """One pass: this consumer's own pending messages, others' long idle ones, then new ones. Messages handled."""
    s = get_settings()
    ensure_group(r, s.stream, s.group)
    handled = 0
    Read = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]  # the sync client's answers
    own = cast(Read, r.xreadgroup(s.group, s.consumer, {s.stream: "0"}, count=s.batch))
    for _stream, entries in own or []:
        handle(conn, r, s.stream, s.group, entries, tally, after_commit)
        handled += len(entries)
    claimed = cast(list[Any], r.xautoclaim(s.stream, s.group, s.consumer, min_idle_time=s.claim_idle_ms,
                                           start_id="0-0", count=s.batch))
    if claimed and claimed[1]:
        handle(conn, r, s.stream, s.group, claimed[1], tally, after_commit)
        handled += len(claimed[1])
    new = cast(Read, r.xreadgroup(s.group, s.consumer, {s.stream: ">"}, count=s.batch,
                                  block=s.block_ms if block_ms is None else block_ms))
    for _stream, entries in new or []:
        handle(conn, r, s.stream, s.group, entries, tally, after_commit)
        handled += len(entries)
    return handled


def run(once: bool = False, stop: threading.Event | None = None) -> int:
    s = get_settings()
    stop = stop or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=max(5.0, s.block_ms / 1000 + 5))
    tally = Tally()
    conn: psycopg.Connection[tuple[object, ...]] | None = None
    try:
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = db.connect()
                consume_once(conn, r, tally, block_ms=None if not once else 1)
                if once:
                    print(f"fulfilment consumed {tally.outcomes}", flush=True)
                    return 0
            except (psycopg.OperationalError, redis_lib.ConnectionError, redis_lib.TimeoutError) as e:
                print(f"fulfilment waiting: {type(e).__name__}", file=sys.stderr, flush=True)
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(1.0)
        return 0
    finally:
        if conn is not None:
            conn.close()
        r.close()
