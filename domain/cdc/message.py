"""From wal2json's rows to stream messages (pure: rows in, values out).

A message carries Debezium's outbox event router fields one-to-one (`id`, `aggregatetype`, `aggregateid`, `type`,
`payload`) plus the fields the router places as additional headers here (`tenant`, `revision`, `schemaversion`,
`occurredat`), and `lsn`, the commit's position in the WAL. Every value is text and the field set is fixed, so
the same committed event read twice (a relay killed between publish and slot confirm) is the same message twice:
a consumer dedupes by `id` (docs/relays.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

# The fields of a message, in the order they are written (XADD keeps it).
FIELDS: Final[tuple[str, ...]] = ("id", "aggregatetype", "aggregateid", "type", "payload", "tenant", "revision",
                                  "schemaversion", "occurredat", "lsn")
# Our column -> Debezium's outbox router field (the rest of the row stays in PostgreSQL).
COLUMN_OF: Final[dict[str, str]] = {
    "id": "event_id", "aggregatetype": "aggregate_type", "aggregateid": "aggregate_id", "type": "event_type",
    "payload": "payload", "tenant": "tenant_id", "revision": "aggregate_revision",
    "schemaversion": "schema_version", "occurredat": "occurred_at",
}
TABLE: Final[str] = "outbox_events"


@dataclass(frozen=True)
class Committed:
    """One committed transaction's outbox events, in the order it inserted them, and its commit's position."""

    commit_lsn: str
    events: tuple[dict[str, str], ...]


def _text(column: str, value: Any) -> str:
    if column == "payload":  # wal2json hands jsonb over as its text; one canonical spelling whatever the source
        obj = json.loads(value) if isinstance(value, str) else value
        return json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return "" if value is None else str(value)


def event_fields(change: dict[str, Any], commit_lsn: str) -> dict[str, str]:
    """One inserted `outbox_events` row (wal2json format 2, an `I` action) as the message's fields."""
    return row_fields({c["name"]: c.get("value") for c in change["columns"]}, commit_lsn)


def row_fields(values: dict[str, Any], lsn: str) -> dict[str, str]:
    """An `outbox_events` row's columns, as wal2json hands them over (text, numbers, jsonb as its text), as the
    message's fields. The re-feed reads the table with the same spelling (`sql.REFEED`), so an event re-published
    that way has the digest of the one the relay published: a consumer absorbs it as a duplicate."""
    out = {field: _text(column, values[column]) for field, column in COLUMN_OF.items()}
    out["lsn"] = lsn
    return {f: out[f] for f in FIELDS}


# What a re-fed message carries as `lsn`: not read from the WAL (the slot that would know is gone).
REFEED_LSN: Final[str] = "refeed"


def committed(rows: Iterable[tuple[str, str, str]]) -> list[Committed]:
    """Group decoded rows (lsn, xid, data) into committed transactions, in commit order. Only transactions seen
    from begin to commit are returned (the slot hands over whole ones; anything after the last commit waits for
    the next read). Transactions without an outbox insert are returned too, with no events: confirming them lets
    the slot release the WAL other tables wrote."""
    out: list[Committed] = []
    inserts: list[dict[str, Any]] = []
    for lsn, _xid, data in rows:
        row = json.loads(data)
        action = row.get("action")
        if action == "B":
            inserts = []
        elif action == "I" and row.get("table") == TABLE:
            inserts.append(row)
        elif action == "C":
            out.append(Committed(lsn, tuple(event_fields(r, lsn) for r in inserts)))
            inserts = []
    return out


def digest(fields: dict[str, str]) -> str:
    """What identifies an event's content, whatever its position in the log (`lsn` left out): a consumer refuses
    the same id with another digest."""
    body = json.dumps({f: fields.get(f, "") for f in FIELDS if f != "lsn"}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()
