"""What metering asks of the database, named in one place (the ledger's other statements are in `sql.py`, its read
models' in `sql_reads.py`): the guarded debit with its entry and hold, a person's daily-cap slots, a hold given back,
the balance's ceiling, top-ups, and the balance by the hour. All `text()`: each leans on PostgreSQL (data-modifying
CTEs, `ON CONFLICT`, `FOR UPDATE`, recursive skip scans).
"""

from __future__ import annotations

import sqlalchemy as sa

# RESERVE: a row's price debited from its tenant's balance, with its entry and the row's hold.
# One statement: the guarded debit, its entry and the row's hold. The tenant's balance row is the one row every
# send of that tenant locks, so the claim takes money LAST and in one round trip, and commits right after: the lock
# is held for a statement and a commit, not for the rest of the claim (a code waits behind bulk claims' locks).
RESERVE = sa.text(
    "WITH b AS (UPDATE balances SET balance_cents = balance_cents - :c WHERE tenant_id = :t AND balance_cents >= :c "
    "RETURNING tenant_id), "
    "e AS (INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
    "SELECT tenant_id, :n, 'reserve', -:c, :r FROM b), "
    "u AS (UPDATE notifications SET reserved_cents = :c WHERE id = :n AND EXISTS (SELECT 1 FROM b)) "
    "SELECT count(*) FROM b")
# ENTRY: one balance entry.
ENTRY = sa.text(
    "INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
    "VALUES (:t, :n, :k, :a, :r)")
# TAKE_CAP_SLOT: a recipient's cap slot for a day taken, if the cap has room.
TAKE_CAP_SLOT = sa.text(
    "INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken) VALUES (:t, :r, :d, 1) "
    "ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1 "
    "WHERE recipient_daily_counts.taken < :cap RETURNING taken")
# COUNT_SENT_SLOT: a recipient's cap slot for a day counted, room or not (a message that went out).
# Without the cap check: a message that went out counts whether or not the cap had room.
COUNT_SENT_SLOT = sa.text(
    "INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken) VALUES (:t, :r, :d, 1) "
    "ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1")
# SET_CAP_DAY: the day whose cap slot a row holds.
SET_CAP_DAY = sa.text("UPDATE notifications SET cap_day = :d WHERE id = :n")
# READ_HOLD: what a row holds (money, cap day), locked.
READ_HOLD = sa.text(
    "SELECT tenant_id, recipient, reserved_cents AS held, cap_day AS day FROM notifications WHERE id = :n "
    "FOR UPDATE")
# CLEAR_HOLD: a row's holds cleared.
CLEAR_HOLD = sa.text("UPDATE notifications SET reserved_cents = 0, cap_day = NULL WHERE id = :n")
# CREDIT: an amount credited to a tenant's balance.
CREDIT = sa.text("UPDATE balances SET balance_cents = balance_cents + :c WHERE tenant_id = :t")
# GIVE_BACK_SLOT: a recipient's cap slot for a day given back.
GIVE_BACK_SLOT = sa.text(
    "UPDATE recipient_daily_counts SET taken = taken - 1 WHERE tenant_id = :t AND recipient = :r "
    "AND day = :d AND taken > 0")
# CLEAR_STALE_CAP_DAY: a row's cap day cleared, answering the slot it held.
CLEAR_STALE_CAP_DAY = sa.text(
    "UPDATE notifications n SET cap_day = NULL FROM (SELECT id, cap_day FROM notifications WHERE id = :n "
    "FOR UPDATE) old WHERE n.id = old.id AND old.cap_day IS NOT NULL "
    "RETURNING n.tenant_id, n.recipient, old.cap_day AS day")
# LOCK_BALANCE: a tenant's balance, locked.
LOCK_BALANCE = sa.text("SELECT balance_cents FROM balances WHERE tenant_id = :t FOR UPDATE")
# HELD_BY_OWED: what a tenant's owed rows hold.
# What owed rows hold (reserved at claim, given back if they end unsent): the balance's ceiling counts it. Read after
# the balance row is locked, through a partial index of owed rows (QUEUED only): 0.3 ms beside 300,000 SENT rows.
HELD_BY_OWED = sa.text(
    "SELECT coalesce(sum(reserved_cents), 0) FROM notifications WHERE tenant_id = :t AND status = 'QUEUED' "
    "AND reserved_cents > 0")
# KNOWN_REFERENCE: whether a tenant's top-up reference was seen already.
KNOWN_REFERENCE = sa.text("SELECT 1 FROM balance_entries WHERE tenant_id = :t AND reference = :ref")
# INSERT_TOP_UP: a top-up entry, once per reference.
INSERT_TOP_UP = sa.text(
    "INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason, reference, actor_ref) "
    "VALUES (:t, 'top_up', :a, :r, :ref, :who) ON CONFLICT (tenant_id, reference) DO NOTHING RETURNING id")
# ADD_TO_BALANCE: an amount added to a tenant's balance, creating it if needed.
ADD_TO_BALANCE = sa.text(
    "INSERT INTO balances (tenant_id, balance_cents) VALUES (:t, :a) "
    "ON CONFLICT (tenant_id) DO UPDATE SET balance_cents = balances.balance_cents + :a")
# BALANCE: a tenant's balance.
BALANCE = sa.text("SELECT balance_cents FROM balances WHERE tenant_id = :t")
# BALANCE_VIEW: a tenant's balance with what it spent and topped up lately.
BALANCE_VIEW = sa.text(
    "SELECT coalesce((SELECT balance_cents FROM balances WHERE tenant_id = :t), 0) AS balance_cents, "
    "coalesce((SELECT -sum(amount_cents) FROM balance_entries WHERE tenant_id = :t "
    "  AND kind IN ('reserve', 'refund') AND created_at > CAST(:now AS timestamptz) - interval '1 hour'), 0)"
    "  AS spent_last_hour_cents")
# ENTRIES: a keyset page of a tenant's balance entries.
ENTRIES = sa.text(
    "SELECT id, kind, amount_cents, reason, reference, actor_ref, notification_id, created_at "
    "FROM balance_entries WHERE tenant_id = :t AND (CAST(:b AS bigint) IS NULL OR id < :b) "
    "ORDER BY id DESC LIMIT :l")

# The balance by the hour (epoch hours, UTC): the `:l` newest hours with entries older than hour `:b`, or the `:l`
# oldest just newer than hour `:a` — a skip scan down (or up) the (tenant_id, created_at) index, one probe per hour,
# however many charges an hour holds.
_HOUR = "floor(extract(epoch FROM {c}) / 3600)::int"
# BALANCE_HOURS_BEFORE: the hours with balance entries before a point, newest first.
BALANCE_HOURS_BEFORE = sa.text(f"""
WITH RECURSIVE h(hour, n) AS (
  SELECT {_HOUR.format(c="max(created_at)")}, 1 FROM balance_entries
   WHERE tenant_id = :t AND (CAST(:b AS int) IS NULL OR created_at < to_timestamp(CAST(:b AS int) * 3600.0))
  UNION ALL
  SELECT (SELECT {_HOUR.format(c="max(e.created_at)")} FROM balance_entries e
           WHERE e.tenant_id = :t AND e.created_at < to_timestamp(h.hour * 3600.0)), h.n + 1
    FROM h WHERE h.hour IS NOT NULL AND h.n < :l)
SELECT hour AS id FROM h WHERE hour IS NOT NULL ORDER BY hour DESC""")
# BALANCE_HOURS_AFTER: the hours with balance entries after a point, oldest first.
BALANCE_HOURS_AFTER = sa.text(f"""
WITH RECURSIVE h(hour, n) AS (
  SELECT {_HOUR.format(c="min(created_at)")}, 1 FROM balance_entries
   WHERE tenant_id = :t AND created_at >= to_timestamp((CAST(:a AS int) + 1) * 3600.0)
  UNION ALL
  SELECT (SELECT {_HOUR.format(c="min(e.created_at)")} FROM balance_entries e
           WHERE e.tenant_id = :t AND e.created_at >= to_timestamp((h.hour + 1) * 3600.0)), h.n + 1
    FROM h WHERE h.hour IS NOT NULL AND h.n < :l)
SELECT hour AS id FROM h WHERE hour IS NOT NULL ORDER BY hour""")
# BALANCE_HOUR_SUMS: those hours' entries summed, by kind.
# Those hours summed: charges and refunds one row per hour each; a top-up, an opening or an adjustment (a person's
# doing, rare) each a row of its own, with its reason and who.
BALANCE_HOUR_SUMS = sa.text(f"""
SELECT {_HOUR.format(c="created_at")} AS hour, kind, count(*) AS entries, sum(amount_cents) AS amount_cents,
       min(reason) AS reason, min(actor_ref) AS actor_ref, max(created_at) AS last_at, max(id) AS last_id
FROM balance_entries
WHERE tenant_id = :t AND created_at >= to_timestamp(:lo * 3600.0) AND created_at < to_timestamp((:hi + 1) * 3600.0)
GROUP BY 1, 2, CASE WHEN kind IN ('reserve', 'refund') THEN 0 ELSE id END
ORDER BY 1 DESC, max(id) DESC""")
# HOUR_ENTRIES: one hour's entries, a keyset page by id (newest first; oldest first for an `:a` page).
HOUR_ENTRIES = sa.text(
    "SELECT id, kind, amount_cents, reason, reference, actor_ref, notification_id, created_at "
    "FROM balance_entries WHERE tenant_id = :t AND created_at >= to_timestamp(:h * 3600.0) "
    "AND created_at < to_timestamp((:h + 1) * 3600.0) "
    "AND (CAST(:b AS bigint) IS NULL OR id < :b) AND (CAST(:a AS bigint) IS NULL OR id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -id ELSE id END LIMIT :l")
