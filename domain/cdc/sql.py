"""What the CDC relay asks of PostgreSQL, named in one place (plain SQL on a psycopg connection: the slot
functions are PostgreSQL's own, nothing for SQLAlchemy to build)."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.sql.elements import TextClause

# WAL_LEVEL: the server's wal_level.
# The server's setting: logical decoding needs `logical`; we never change it ourselves (fail closed).
WAL_LEVEL: Final[str] = "SELECT current_setting('wal_level')"
# ALLOWED_PLUGINS: the output plugins the server allows (NULL: any).
# Whether the plugin's library is installed on the server (Debian: postgresql-<major>-wal2json).
# Some builds (this machine's) allow only listed output plugins; NULL on stock PostgreSQL, which has no such list.
ALLOWED_PLUGINS: Final[str] = "SELECT current_setting('output_plugin_libraries', true)"
# SERVER_MAJOR: the server's major version.
SERVER_MAJOR: Final[str] = "SELECT current_setting('server_version_num')::int / 10000"
# SLOT_EXISTS: a logical slot's plugin and database, by its name.
SLOT_EXISTS: Final[str] = (
    "SELECT plugin, database FROM pg_replication_slots WHERE slot_name = %(slot)s AND slot_type = 'logical'")
# CREATE_SLOT: a wal2json logical slot created, answering its start.
CREATE_SLOT: Final[str] = "SELECT lsn::text FROM pg_create_logical_replication_slot(%(slot)s, 'wal2json')"
# DROP_SLOT: a logical slot dropped.
DROP_SLOT: Final[str] = "SELECT pg_drop_replication_slot(%(slot)s)"
# PEEK_CHANGES: the slot's next decoded outbox_events changes, read without consuming them.
# Up to about `n` decoded rows, whole transactions only (PostgreSQL checks the limit after each commit), in commit
# order; nothing is consumed: the slot moves only with ADVANCE_SLOT, after the stream has what was read.
# format-version 2: one JSON row per begin (B), change (I/U/D) and commit (C); only `outbox_events` changes.
PEEK_CHANGES: Final[str] = (
    "SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_changes(%(slot)s, NULL, %(n)s, "
    "'format-version', '2', 'add-tables', 'public.outbox_events', 'include-types', 'false', "
    "'include-timestamp', 'true')")
# ADVANCE_SLOT: the slot moved past what the stream has.
ADVANCE_SLOT: Final[str] = "SELECT end_lsn::text FROM pg_replication_slot_advance(%(slot)s, %(lsn)s::pg_lsn)"
# SLOT_LAG: the WAL the relay's slot holds back and how far it is behind.
# What the slot makes the primary keep: WAL from its restart point on (the cost of a relay kept down).
SLOT_LAG: Final[str] = (
    "SELECT confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS retained_bytes, "
    "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint AS behind_bytes "
    "FROM pg_replication_slots WHERE slot_name = %(slot)s")
# SLOTS_WAL: every logical slot of this database and the WAL it keeps (/metrics).
# Every logical slot of this database and the WAL it makes the server keep (/metrics: a forgotten slot keeps WAL
# until the disk fills, unless max_slot_wal_keep_size caps it; safe_wal_size is NULL without a cap). On a standby
# the position is the last one replayed (pg_current_wal_lsn() refuses to run there). Read through the unit of work
# (the /metrics scrape), hence a TextClause where the relay's statements are psycopg strings.
SLOTS_WAL: Final[TextClause] = sa.text(
    "SELECT slot_name, active, pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END, restart_lsn)::bigint AS retained_bytes, safe_wal_size, wal_status "
    "FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database() ORDER BY slot_name")
# REFEED: every outbox event since a time, spelt as wal2json spells it (the re-feed).
# The re-feed (after a lost slot, a failover before PostgreSQL 17, a stream Redis lost): every event that occurred
# at or after a time, spelt as wal2json spells it (text of uuid, timestamptz and jsonb, on the relay's UTC/ISO
# session), each aggregate's revisions in order. Commit order is not in the table; the inbox only needs revisions.
REFEED: Final[str] = (
    "SELECT event_id::text, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, schema_version, "
    "occurred_at::text, payload::text FROM outbox_events WHERE occurred_at >= %(since)s "
    "ORDER BY occurred_at, tenant_id, aggregate_type, aggregate_id, aggregate_revision")
# PROJECTED_TWICE: the fulfilment projection's events applied twice (`outbox check`).
# `outbox check`'s CDC counts. The fulfilment service's database is another team's: we read its inbox and its
# projection by URL with these statements (fulfilment/migrations: inbox UNIQUE(event_id), outcome applied | parked |
# stale; fulfilments one row per aggregate, `applied_events` bumped once per revision it projects) and import
# none of its code. With UNIQUE(event_id) the inbox cannot hold an event twice, so "an event projected twice" is
# what the projection itself shows: an aggregate that counts more applications than events the inbox applied for
# it, or one (aggregate, revision) the inbox applied from two events.
PROJECTED_TWICE: Final[str] = """
SELECT (SELECT count(*) FROM fulfilments f WHERE f.applied_events > (SELECT count(*) FROM inbox i
          WHERE i.outcome = 'applied' AND i.tenant_id = f.tenant_id AND i.aggregate_type = f.aggregate_type
            AND i.aggregate_id = f.aggregate_id))
     + (SELECT count(*) FROM (SELECT 1 FROM inbox WHERE outcome = 'applied'
          GROUP BY tenant_id, aggregate_type, aggregate_id, revision HAVING count(*) > 1) twice)"""
# ORDER_EVENTS_IN_WINDOW: the committed order events inside the drained stream's window.
# Committed order events inside the drained stream's window (from its first message's occurred_at to its last
# one's, less the settle time): each must have an inbox row, whatever its outcome (applied, parked, stale).
ORDER_EVENTS_IN_WINDOW: Final[str] = (
    "SELECT event_id FROM outbox_events WHERE aggregate_type = 'order' "
    "AND occurred_at >= %(since)s AND occurred_at <= %(until)s")
# INBOX_MISSING: how many of the given events the fulfilment inbox lacks.
INBOX_MISSING: Final[str] = (
    "SELECT count(*) FROM unnest(%(ids)s::uuid[]) AS e(id) WHERE NOT EXISTS "
    "(SELECT 1 FROM inbox WHERE inbox.event_id = e.id)")
