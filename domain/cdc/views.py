"""How far behind the CDC path is, from its two ends: the slot (WAL the primary keeps, bytes not yet relayed) and
the stream's consumer group (messages not yet acknowledged, the age of the oldest). Reads only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import psycopg
import redis as redis_lib

from domain.cdc import message, slot, sql
from domain.db import UnitOfWork, libpq_url

# The fulfilment service's consumer group (its FULFILMENT_GROUP default): whose lag /ops and `outbox check` read.
GROUP: Final[str] = "fulfilment"


@dataclass(frozen=True)
class CdcLag:
    slot_exists: bool
    slot_retained_bytes: int
    slot_behind_bytes: int
    stream_length: int
    group_exists: bool
    pending: int  # delivered to a consumer, not acknowledged
    undelivered: int  # in the stream, never delivered to the group
    oldest_unconsumed_age_s: float | None  # since the oldest of those was published; None: nothing owed

    @property
    def events_behind(self) -> int:
        return self.pending + self.undelivered


def _ms_of(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def stream_lag(r: redis_lib.Redis, stream: str, group: str, now_s: float | None = None) -> tuple[bool, int, int, int,
                                                                                               float | None]:
    """(group exists, stream length, pending, undelivered, age of the oldest unacknowledged message)."""
    length = int(cast(int, r.xlen(stream)))
    groups = {g["name"].decode() if isinstance(g["name"], bytes) else g["name"]: g
              for g in cast(list[dict[str, Any]], r.xinfo_groups(stream))} if length or r.exists(stream) else {}
    g = groups.get(group)
    if g is None:
        age = None
        if length:
            first = cast(list[Any], r.xrange(stream, count=1))
            age = ((now_s or time.time()) * 1000 - _ms_of(first[0][0])) / 1000
        return False, length, 0, length, age
    pending = int(g["pending"])
    raw = g["last-delivered-id"]
    after_last = f"({raw.decode() if isinstance(raw, bytes) else raw}"  # exclusive: what the group never got
    undelivered = int(g["lag"]) if g.get("lag") is not None else len(
        cast(list[Any], r.xrange(stream, min=after_last, count=100_000)))
    oldest: int | None = None
    if pending:
        oldest = _ms_of(cast(dict[str, Any], r.xpending(stream, group))["min"])
    elif undelivered:
        oldest = _ms_of(cast(list[Any], r.xrange(stream, min=after_last, count=1))[0][0])
    age = None if oldest is None else max(0.0, ((now_s or time.time()) * 1000 - oldest) / 1000)
    return True, length, pending, undelivered, age


def cdc_lag(conn: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, slot_name: str, stream: str,
            group: str) -> CdcLag:
    at_slot = slot.lag(conn, slot_name)
    exists, length, pending, undelivered, age = stream_lag(r, stream, group)
    return CdcLag(at_slot is not None, at_slot.retained_bytes if at_slot else 0,
                  at_slot.behind_bytes if at_slot else 0, length, exists, pending, undelivered, age)


@dataclass(frozen=True)
class SlotWal:
    slot: str
    exists: bool
    active: bool
    retained_bytes: int
    safe_wal_bytes: int | None  # before the cap (max_slot_wal_keep_size) invalidates the slot; None: no cap
    wal_status: str  # reserved, extended, unreserved, lost ('' when the slot does not exist)


def slots_wal(configured: str) -> list[SlotWal]:
    """Every logical slot of our database with the WAL it keeps; the configured CDC slot is always in the answer
    (retaining nothing when it does not exist), so its series never disappears from /metrics."""
    with UnitOfWork() as uow:
        rows = uow.execute(sql.SLOTS_WAL).all()
    out = [SlotWal(str(r.slot_name), True, bool(r.active), int(r.retained_bytes or 0),
                   None if r.safe_wal_size is None else int(r.safe_wal_size), str(r.wal_status or ""))
           for r in rows]
    if configured not in {s.slot for s in out}:
        out.append(SlotWal(configured, False, False, 0, None, ""))
    return out


REFEED_COLUMNS = ("event_id", "tenant_id", "aggregate_type", "aggregate_id", "aggregate_revision", "event_type",
                  "schema_version", "occurred_at", "payload")


def events_since(conn: psycopg.Connection[tuple[object, ...]], since: datetime,
                 batch: int = 1000) -> Iterator[list[dict[str, str]]]:
    """Every event that occurred at or after `since` as the stream's message fields, `batch` at a time (the
    connection must be the relay's: UTC and ISO dates, so the text is the text wal2json gives)."""
    with conn.cursor() as cur:
        cur.execute(sql.REFEED, {"since": since})
        while rows := cur.fetchmany(batch):
            yield [message.row_fields(dict(zip(REFEED_COLUMNS, row, strict=True)), message.REFEED_LSN)
                   for row in rows]


def fulfilment_database_url(database_url: str) -> str:
    """The fulfilment service's database as `outbox up` gives it: ours, suffixed `_fulfilment` (`procs.fulfilment_env`
    hands it over)."""
    base, sep, query = database_url.partition("?")
    return f"{base}_fulfilment{sep}{query}"


@dataclass(frozen=True)
class StreamCard:
    """/ops' "CDC stream" card: what the consumer group owes and the WAL the slot keeps."""

    group_exists: bool
    events_behind: int
    pending: int
    oldest_unconsumed_age_s: float | None
    slot_exists: bool
    slot_retained_bytes: int


def stream_card(r: redis_lib.Redis, slot_name: str, stream: str, group: str = GROUP) -> StreamCard:
    """Reads only: the group's lag from Redis (XINFO GROUPS, XPENDING, XRANGE), the slot's WAL through the unit of
    work (pg_replication_slots)."""
    exists, _length, pending, undelivered, age = stream_lag(r, stream, group)
    wal = next(s for s in slots_wal(slot_name) if s.slot == slot_name)
    return StreamCard(exists, pending + undelivered, pending, age, wal.exists, wal.retained_bytes)


# `outbox check`'s CDC counts, by name; a value is a count (0 holds) or why it was not counted.
PROJECTED_TWICE = "C1 an event projected twice"
NEVER_SEEN = "C2 a committed order event the projection never saw"
NOT_DRAINED = "stream not drained"


def _occurred(entry: Any) -> datetime:
    fields = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
              for k, v in entry[1].items()}
    at = datetime.fromisoformat(fields["occurredat"])
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def drained_window(r: redis_lib.Redis, stream: str, group: str, settle_s: float) -> tuple[datetime, datetime] | str:
    """When the group has consumed everything (nothing undelivered, nothing pending): the occurred_at window every
    order event of which must be in the inbox — from the stream's first message's to its last one's, less
    `settle_s` (a transaction still open when the last message was written commits later than it: the relay has
    not read it yet). Otherwise why there is no window."""
    exists, length, pending, undelivered, _age = stream_lag(r, stream, group)
    if not exists:
        return f"no consumer group {group!r} on {stream}"
    if pending or undelivered:
        return f"{NOT_DRAINED} ({pending + undelivered} events behind)"
    if not length:
        return "stream empty"
    first = cast(list[Any], r.xrange(stream, count=1))[0]
    last = cast(list[Any], r.xrevrange(stream, count=1))[0]
    return _occurred(first), _occurred(last) - timedelta(seconds=settle_s)


def projection_checks(ours: psycopg.Connection[tuple[object, ...]],
                      theirs: psycopg.Connection[tuple[object, ...]], r: redis_lib.Redis, stream: str,
                      group: str = GROUP, settle_s: float = 10.0, batch: int = 10_000) -> dict[str, int | str]:
    """C1 from the fulfilment database alone; C2 only once the stream is drained (else the reason). Reads only."""
    row = theirs.execute(sql.PROJECTED_TWICE).fetchone()
    out: dict[str, int | str] = {PROJECTED_TWICE: int(str(row[0])) if row else 0}
    window = drained_window(r, stream, group, settle_s)
    if isinstance(window, str):
        out[NEVER_SEEN] = window
        return out
    missing = 0
    with ours.cursor() as cur:
        cur.execute(sql.ORDER_EVENTS_IN_WINDOW, {"since": window[0], "until": window[1]})
        while ids := [r_[0] for r_ in cur.fetchmany(batch)]:
            got = theirs.execute(sql.INBOX_MISSING, {"ids": ids}).fetchone()
            missing += int(str(got[0])) if got else 0
    out[NEVER_SEEN] = missing
    return out


def connect_fulfilment(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """The fulfilment service's database, read-only by intent (autocommit: each read its own statement)."""
    return psycopg.connect(libpq_url(url), autocommit=True, application_name="outbox-check")
