"""Retention's named SQL: the partitions (which exist, which month a DEFAULT partition's rows belong to, a month
created and its early rows moved in), the archive (what is still owed in a month, its redacted rows, detach and
drop) and the pruning of what is not partitioned.

A partition's name is built from `months.partition_name` (a table name and a month: never operator input), so the
few statements that name one are functions of it here.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from domain.retention.months import PARTITIONED

# ---- partitions -------------------------------------------------------------------------------------------------
# PARTITIONS_OF: a partitioned table's partitions and their bounds.
PARTITIONS_OF = sa.text(
    "SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i "
    "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
    "WHERE p.relname = :parent AND p.relnamespace = to_regnamespace('public') ORDER BY c.relname")
# LOCK_TIMEOUT: this transaction waits at most 5 s for a lock.
# Never wait long behind another transaction: the relay retries at its next pass, an operator runs it again.
LOCK_TIMEOUT = sa.text("SET LOCAL lock_timeout = '5s'")


def _check(parent: str) -> str:
    assert parent in PARTITIONED, parent
    return PARTITIONED[parent]


def default_months(parent: str) -> sa.TextClause:
    """The months of the rows that fell into the DEFAULT partition (their month was not created yet)."""
    key = _check(parent)
    return sa.text(f"SELECT DISTINCT to_char({key} AT TIME ZONE 'UTC', 'YYYY-MM') AS month "
                   f"FROM {parent}_default ORDER BY 1")


def create_month(parent: str, name: str, lo: str, hi: str) -> list[sa.TextClause]:
    """A month's partition, created beside the table and ATTACHed (a lock that lets the hot path's reads and
    inserts go on, unlike CREATE … PARTITION OF), with whatever of its month sat in the DEFAULT partition moved in
    first (ATTACH refuses a range the DEFAULT still holds rows of)."""
    key = _check(parent)
    return [
        sa.text(f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"),
        sa.text(f"WITH moved AS (DELETE FROM {parent}_default WHERE {key} >= '{lo}' AND {key} < '{hi}' RETURNING *) "
                f"INSERT INTO {name} SELECT * FROM moved"),
        sa.text(f"ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM ('{lo}') TO ('{hi}')"),
    ]


# ---- archive ----------------------------------------------------------------------------------------------------
# ARCHIVE_EXCLUDES_REPLAY: the exclusive lock an archive of a month holds against replays.
# The archive of a month holds this exclusively from before its owed check to its commit; a replay (the one way a
# settled message becomes owed again: domain/delivery/sql_review.py `REPLAY_WAITS_FOR_ARCHIVE`) holds it shared for its
# own short transaction. A replay racing an archive lands before its check (refused) or after its commit.
ARCHIVE_EXCLUDES_REPLAY = sa.text("SELECT pg_advisory_xact_lock(hashtext('outbox archive'))")
# OWED_IN_MONTH: how many messages and receipts of a month are still owed.
# Still owed in a month: a message of that month a worker must still act on, or a receipt of that month waiting to
# be applied to its message while that message is still owed (a receipt no message was found for is kept for
# support, never applied: not owed). A receipt waits only on a row that can still change: whatever settles a row
# settles its receipts (domain/ledger/write.py `settle_receipts`); one left on a settled row is invariant 14's to
# show, never a month held for ever.
OWED_IN_MONTH = sa.text(
    "SELECT (SELECT count(*) FROM notifications WHERE status = 'QUEUED' AND created_at >= CAST(:lo AS timestamptz) "
    "        AND created_at < CAST(:hi AS timestamptz)) AS messages, "
    "       (SELECT count(*) FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id "
    "        WHERE r.applied_at IS NULL AND n.status = 'QUEUED' "
    "        AND r.received_at >= CAST(:lo AS timestamptz) AND r.received_at < CAST(:hi AS timestamptz)) AS receipts")
# What an archive keeps of a message: ids, states, times and money, never a contact point, a payload, a code, the
# rendered text or a provider's answer.
ARCHIVED_MESSAGE_COLUMNS: Final = (
    "id", "tenant_id", "recipient", "channel", "lane", "template", "template_version", "status", "suppressed_reason",
    "review", "attempts", "cost_cents", "reserved_cents", "provider_reference", "last_error_class", "event_id",
    "order_id", "intent_id", "campaign_id", "created_at", "sent_at", "settled_at")
ARCHIVED_ATTEMPT_COLUMNS: Final = (
    "id", "notification_id", "attempt_no", "worker", "started_at", "finished_at", "outcome", "status_code",
    "error_class", "latency_ms", "next_attempt_at")
ARCHIVED_RECEIPT_COLUMNS: Final = (
    "id", "receipt_id", "provider", "provider_reference", "outcome", "received_at", "notification_id", "applied_at",
    "closed_reason")
# MONTH_MESSAGES: a month's messages, as an archive keeps them.
MONTH_MESSAGES = sa.text(
    f"SELECT {', '.join(ARCHIVED_MESSAGE_COLUMNS)} FROM notifications "
    "WHERE created_at >= CAST(:lo AS timestamptz) AND created_at < CAST(:hi AS timestamptz) ORDER BY id")
# FORGET_MONTH_CODES: a month's one-time codes deleted.
# What leaves with a month of messages beside its partitions: their one-time codes (no foreign key: migration
# 0028), and the daily cap slots they hold (each count is exactly the kept messages holding its slots: invariant
# 11), taken off and the emptied counts deleted.
FORGET_MONTH_CODES = sa.text(
    "DELETE FROM otp_codes o USING notifications n WHERE n.id = o.notification_id "
    "AND n.created_at >= CAST(:lo AS timestamptz) AND n.created_at < CAST(:hi AS timestamptz)")
# GIVE_BACK_MONTH_SLOTS: the cap slots a month's messages hold given back, emptied counts deleted.
GIVE_BACK_MONTH_SLOTS = sa.text(
    "WITH h AS (SELECT tenant_id, recipient, cap_day AS day, count(*) AS n FROM notifications "
    "  WHERE cap_day IS NOT NULL AND created_at >= CAST(:lo AS timestamptz) AND created_at < CAST(:hi AS timestamptz) "
    "  GROUP BY 1, 2, 3), "
    "u AS (UPDATE recipient_daily_counts d SET taken = d.taken - h.n FROM h "
    "  WHERE d.tenant_id = h.tenant_id AND d.recipient = h.recipient AND d.day = h.day RETURNING d.*) "
    "DELETE FROM recipient_daily_counts d USING u WHERE d.tenant_id = u.tenant_id AND d.recipient = u.recipient "
    "AND d.day = u.day AND u.taken = 0")
# RECORD_ARCHIVE: where an archived month went.
# Where an archived month went: a message id of that month answers with it (its key, kept, names its month).
RECORD_ARCHIVE = sa.text(
    "INSERT INTO ledger_archives (month, file, messages, archived_at, actor_ref) "
    "VALUES (:m, :f, :n, now(), :who)")
# ARCHIVED_MESSAGE: the archive that holds a message, by its kept key.
ARCHIVED_MESSAGE = sa.text(
    "SELECT k.created_at, a.month, a.file, a.archived_at FROM ledger_keys k "
    "JOIN ledger_archives a ON a.month = date_trunc('month', k.created_at AT TIME ZONE 'UTC')::date "
    "WHERE k.notification_id = :id AND k.tenant_id = :t "
    "AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = k.notification_id "
    "AND n.created_at = k.created_at) ORDER BY a.archived_at LIMIT 1")
# FORGET_RECEIPT_KEYS: a month's receipt keys deleted.
FORGET_RECEIPT_KEYS = sa.text(
    "DELETE FROM delivery_receipt_keys "
    "WHERE received_at >= CAST(:lo AS timestamptz) AND received_at < CAST(:hi AS timestamptz)")


def lock_month(names: list[str]) -> sa.TextClause:
    """No write into the months' attempt and receipt partitions while they are read and dropped (the hot path
    inserts into this month's partitions, not these)."""
    return sa.text(f"LOCK TABLE {', '.join(names)} IN SHARE MODE")


def lock_ledger_month(name: str) -> sa.TextClause:
    """No change to the month's messages while they are read and dropped, by a lock on each of its rows, not on
    the partition: many UPDATEs on the ledger name rows by id alone (the per-row claim, the long way's settles), and
    even those that name the month lock every partition when their plan is a generic one (prepared: pruned only at
    run time) — a SHARE lock on an old month's partition would hold back claims and records of every lane, one-time
    codes included, for as long as the export takes."""
    return sa.text(f"SELECT count(*) FROM (SELECT 1 FROM {name} FOR SHARE) AS locked")


def partition_rows(parent: str, name: str) -> sa.TextClause:
    _check(parent)
    cols = {"notification_attempts": ARCHIVED_ATTEMPT_COLUMNS, "delivery_receipts": ARCHIVED_RECEIPT_COLUMNS,
            "notifications": ARCHIVED_MESSAGE_COLUMNS}[parent]
    return sa.text(f"SELECT {', '.join(cols)} FROM {name} ORDER BY id")


def detach_and_drop(parent: str, name: str) -> list[sa.TextClause]:
    _check(parent)
    return [sa.text(f"ALTER TABLE {parent} DETACH PARTITION {name}"), sa.text(f"DROP TABLE {name}")]


# ---- prune: what is not partitioned, older than the retention -------------------------------------------------
# Each: the rows retention lets go (`:cutoff` = now - retention), deleted a batch at a time (short transactions,
# no long lock on a table the dashboard writes).
PRUNABLE: Final[dict[str, str]] = {
    # Push latency samples behind /ops' refresh figures (the last hour is what they show).
    "refresh_metrics": "created_at < CAST(:cutoff AS timestamptz)",
    # /ops' kept chart points (the widest window is 7 days; a point let go is computed again if ever asked for).
    "ops_series_points": "t < CAST(:cutoff AS timestamptz)",
    # Sessions and login tickets that ended or expired before the cutoff (a live one is never touched).
    "operator_sessions": "coalesce(ended_at, expires_at) < CAST(:cutoff AS timestamptz) "
                         "AND (ended_at IS NOT NULL OR expires_at < now())",
    # Idempotency keys past their replay window (and not held by a request in flight).
    "idempotency_keys": "expires_at < CAST(:cutoff AS timestamptz) AND locked_until < now()",
    # Failed-login counters untouched since the cutoff and not locking anyone out now.
    "login_throttle": "updated_at < CAST(:cutoff AS timestamptz) AND (locked_until IS NULL OR locked_until < now())",
}


def prune_count(table: str) -> sa.TextClause:
    return sa.text(f"SELECT count(*) FROM {table} WHERE {PRUNABLE[table]}")


def prune_batch(table: str) -> sa.TextClause:
    return sa.text(f"WITH d AS (DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
                   f"WHERE {PRUNABLE[table]} LIMIT :batch)) RETURNING 1) SELECT count(*) FROM d")
