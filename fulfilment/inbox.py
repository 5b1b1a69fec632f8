"""Applying one stream message: the inbox row and the projection change in ONE transaction.

- a redelivered event (its id already in the inbox with the same digest) changes nothing: `duplicate`;
- the same id with another digest is refused and counted (`refusals`): `conflict`;
- per aggregate, revisions are applied in order: the next one is `applied` (and any parked ones it unblocks after
  it); a later one is `parked` with a gap recorded for each revision missing, never projected past; an earlier one
  is `stale`. The first event of an aggregate the service ever sees is its starting point (the stream may begin
  after the aggregate did).
The caller commits, then acknowledges the message (XACK)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Final, Literal

import psycopg
from psycopg.types.json import Jsonb

Outcome = Literal["applied", "duplicate", "conflict", "parked", "stale"]
# The fields a message carries (the outbox's CDC relay writes them; docs/relays.md), `lsn` apart: not identity.
IDENTITY_FIELDS: Final[tuple[str, ...]] = ("id", "aggregatetype", "aggregateid", "type", "payload", "tenant",
                                           "revision", "schemaversion", "occurredat")

TAKE_IN = """
INSERT INTO inbox (event_id, digest, tenant_id, aggregate_type, aggregate_id, revision, event_type, payload, outcome)
VALUES (%(id)s, %(digest)s, %(tenant)s, %(atype)s, %(aid)s, %(rev)s, %(type)s, %(payload)s, 'stale')
ON CONFLICT (event_id) DO NOTHING RETURNING event_id"""
KEPT_DIGEST = "SELECT digest FROM inbox WHERE event_id = %(id)s"
REFUSE = "INSERT INTO refusals (event_id, digest_kept, digest_refused) VALUES (%(id)s, %(kept)s, %(digest)s)"
# The aggregate's row, locked: two consumers of one aggregate apply its revisions one after the other.
START_AGGREGATE = """
INSERT INTO fulfilments (tenant_id, aggregate_type, aggregate_id, revision, status, last_event_id, applied_events)
VALUES (%(tenant)s, %(atype)s, %(aid)s, %(rev)s, %(status)s, %(id)s, 1)
ON CONFLICT DO NOTHING RETURNING revision"""
LOCK_AGGREGATE = """
SELECT revision FROM fulfilments WHERE tenant_id = %(tenant)s AND aggregate_type = %(atype)s AND aggregate_id = %(aid)s
FOR UPDATE"""
PROJECT = """
UPDATE fulfilments SET revision = %(rev)s, status = %(status)s, last_event_id = %(id)s,
       applied_events = applied_events + 1, updated_at = now()
WHERE tenant_id = %(tenant)s AND aggregate_type = %(atype)s AND aggregate_id = %(aid)s"""
MARK = "UPDATE inbox SET outcome = %(outcome)s, applied_at = CASE WHEN %(outcome)s = 'applied' THEN now() END " \
       "WHERE event_id = %(id)s"
NOTE_GAPS = """
INSERT INTO gaps (tenant_id, aggregate_type, aggregate_id, missing_revision, seen_revision)
SELECT %(tenant)s, %(atype)s, %(aid)s, r, %(rev)s FROM generate_series(%(first)s, %(rev)s - 1) r
ON CONFLICT ON CONSTRAINT gaps_one_per_revision DO NOTHING"""
CLOSE_GAP = """
UPDATE gaps SET closed_at = now() WHERE tenant_id = %(tenant)s AND aggregate_type = %(atype)s
  AND aggregate_id = %(aid)s AND missing_revision = %(rev)s AND closed_at IS NULL"""
NEXT_PARKED = """
SELECT event_id, event_type, payload FROM inbox WHERE outcome = 'parked' AND tenant_id = %(tenant)s
  AND aggregate_type = %(atype)s AND aggregate_id = %(aid)s AND revision = %(rev)s"""


@dataclass(frozen=True)
class Event:
    event_id: uuid.UUID
    digest: str
    tenant_id: int
    aggregate_type: str
    aggregate_id: str
    revision: int
    event_type: str
    payload: dict[str, object]

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Event:
        return cls(uuid.UUID(fields["id"]), digest(fields), int(fields["tenant"]), fields["aggregatetype"],
                   fields["aggregateid"], int(fields["revision"]), fields["type"], json.loads(fields["payload"]))

    def params(self) -> dict[str, object]:
        return {"id": self.event_id, "digest": self.digest, "tenant": self.tenant_id, "atype": self.aggregate_type,
                "aid": self.aggregate_id, "rev": self.revision, "type": self.event_type,
                "payload": Jsonb(self.payload), "status": status_of(self.event_type, self.payload)}


def digest(fields: dict[str, str]) -> str:
    body = json.dumps({f: fields.get(f, "") for f in IDENTITY_FIELDS}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def status_of(event_type: str, payload: dict[str, object]) -> str:
    """The order's status after the event: the payload's when it says, else the event's type."""
    return str(payload.get("status") or event_type)


def apply(conn: psycopg.Connection[tuple[object, ...]], event: Event) -> Outcome:
    """Take `event` in, within the caller's open transaction (the caller commits)."""
    p = event.params()
    if conn.execute(TAKE_IN, p).fetchone() is None:
        kept = conn.execute(KEPT_DIGEST, p).fetchone()
        assert kept is not None
        if kept[0] == event.digest:
            return "duplicate"
        conn.execute(REFUSE, {**p, "kept": kept[0]})
        return "conflict"
    if conn.execute(START_AGGREGATE, p).fetchone() is not None:
        conn.execute(MARK, {"id": event.event_id, "outcome": "applied"})
        return "applied"
    row = conn.execute(LOCK_AGGREGATE, p).fetchone()
    assert row is not None
    current = int(str(row[0]))
    if event.revision <= current:
        return "stale"  # the inbox row says so already
    if event.revision > current + 1:
        conn.execute(NOTE_GAPS, {**p, "first": current + 1})
        conn.execute(MARK, {"id": event.event_id, "outcome": "parked"})
        return "parked"
    _project(conn, p)
    # What this revision unblocks: the parked ones right after it, in order.
    rev = event.revision + 1
    while (parked := conn.execute(NEXT_PARKED, {**p, "rev": rev}).fetchone()) is not None:
        payload = parked[2] if isinstance(parked[2], dict) else {}
        _project(conn, {**p, "id": parked[0], "rev": rev, "status": status_of(str(parked[1]), payload)})
        rev += 1
    return "applied"


def _project(conn: psycopg.Connection[tuple[object, ...]], p: dict[str, object]) -> None:
    conn.execute(PROJECT, p)
    conn.execute(MARK, {"id": p["id"], "outcome": "applied"})
    conn.execute(CLOSE_GAP, p)


COUNTS = {
    "inbox": "SELECT count(*) FROM inbox",
    "applied": "SELECT count(*) FROM inbox WHERE outcome = 'applied'",
    "parked": "SELECT count(*) FROM inbox WHERE outcome = 'parked'",
    "stale": "SELECT count(*) FROM inbox WHERE outcome = 'stale'",
    "open_gaps": "SELECT count(*) FROM gaps WHERE closed_at IS NULL",
    "gaps_noticed": "SELECT count(*) FROM gaps",
    "refusals": "SELECT count(*) FROM refusals",
    # An event projected twice: more applications counted on an aggregate than events of it the inbox applied.
    "projected_twice": "SELECT count(*) FROM fulfilments f WHERE f.applied_events <> (SELECT count(*) FROM inbox i "
                       "WHERE i.outcome = 'applied' AND i.tenant_id = f.tenant_id "
                       "AND i.aggregate_type = f.aggregate_type AND i.aggregate_id = f.aggregate_id)",
}


def counts(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, int]:
    return {k: int(str(conn.execute(q).fetchone()[0])) for k, q in COUNTS.items()}  # type: ignore[index]
