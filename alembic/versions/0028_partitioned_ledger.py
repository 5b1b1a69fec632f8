"""the ledger (`notifications`) partitioned by month of `created_at`; dedupe keys kept once in `ledger_keys`

`notifications` becomes `PARTITION BY RANGE (created_at)` — the row's creation time, written once at insert and
never updated — with primary key `(id, created_at)`, one partition per month (this month and 3 ahead, and every
month that already holds rows) and a DEFAULT partition, exactly like the attempts and receipts of 0018. Existing
rows are moved in this one transaction (the old table renamed, the partitioned one created under the old name, the
id sequence carrying on, the old dropped).

Uniqueness, kept exactly:
* `dedupe_key` once across all months: the unpartitioned `ledger_keys (dedupe_key PRIMARY KEY, notification_id,
  created_at, tenant_id)`. The ledger's ways in write the key and the row in one statement (key first `ON CONFLICT DO
  NOTHING`, the row only if the key was new: domain/ledger/sql.py), and a statement-level trigger keeps the key
  for any other writer (a script, a test, the bench) and refuses — as the UNIQUE constraint did — a row whose key
  is already another message's. Keys outlive an archive: a message once ledgered is never ledgered again.
* `provider_key` (a replay's idempotency key, `dedupe_key || '~replay-' || token`) is unique because its
  `dedupe_key` is; its index stays for look-ups, no longer UNIQUE (a partitioned unique index must hold the
  partition key, which would make it per month only).
* the one-live-nudge index is on `lead_notification_intents`, which stays unpartitioned: untouched.

Foreign keys into the ledger (a foreign key must name a unique key of the partitioned table, which holds the month):
* `notification_attempts.notification_id`: dropped. An `(id, created_at)` reference was tried and refused what
  `outbox partitions ensure` must do: a message that fell into DEFAULT moves to its new month by a DELETE from one
  partition and an INSERT into another, and PostgreSQL's check of a foreign key into a partitioned table looks for
  the key in the partition the row left (even deferred to commit, once the new partition is attached). Invariant 12
  now counts an attempt with no message of its id and month. (It also takes a primary-key probe and a row lock off
  every attempt the hot path writes.)
* `balance_entries.notification_id`: dropped. Money history outlives a month's messages (invariant 7 sums every
  entry); `outbox check` invariant 16 checks that every entry names a message once ledgered (its key kept).
* `otp_codes.notification_id`: dropped; codes leave with their month (archive) and invariant 16 checks none is
  left without its message.

Revision ID: 0028
Revises: 0027
"""
from __future__ import annotations

from datetime import UTC, date, datetime

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

AHEAD = 3

# Every index of the ledger but its keys (name, definition after ON <table>): the same before and after.
INDEXES = (
    ("ix_notifications_event_id", "(event_id)"),
    ("ix_notifications_order_id", "(order_id)"),
    ("ix_notifications_tenant_id", "(tenant_id)"),
    ("ix_notifications_intent_id", "(intent_id)"),
    ("ix_notifications_campaign_id", "(campaign_id)"),
    ("notifications_owed", "(id, next_attempt_at) WHERE status = 'QUEUED'"),
    ("notifications_owed_by_lane", "(lane, id) WHERE status = 'QUEUED'"),
    ("notifications_owed_by_lane_due", "(lane, next_attempt_at, id) WHERE status = 'QUEUED'"),
    ("notifications_owed_bulk_flow",
     "(tenant_id, coalesce(campaign_id, 0), id) WHERE status = 'QUEUED' AND lane = 'bulk'"),
    ("notifications_held_by_owed", "(tenant_id) WHERE status = 'QUEUED' AND reserved_cents > 0"),
    ("notifications_recipient_created", "(tenant_id, recipient, created_at)"),
    ("notifications_provider_reference", "(provider_reference)"),
    ("notifications_endpoint", "(endpoint_id, id) WHERE endpoint_id IS NOT NULL"),
    ("notifications_done_at", "(coalesce(sent_at, settled_at)) WHERE coalesce(sent_at, settled_at) IS NOT NULL"),
)
FOREIGN_KEYS = (
    ("notifications_tenant_id_fkey", "(tenant_id) REFERENCES tenants (id)"),
    ("notifications_event_id_fkey", "(event_id) REFERENCES outbox_events (event_id)"),
    ("notifications_intent_id_fkey", "(intent_id) REFERENCES lead_notification_intents (id)"),
    ("notifications_campaign_id_fkey", "(campaign_id) REFERENCES campaigns (id)"),
)

# Any writer that is not the ledger's own statement (which keeps the key first): the key is kept here, and a row
# whose key is another message's is refused, as the UNIQUE (dedupe_key) constraint refused it. One statement per
# INSERT statement, not per row.
KEEP_KEYS_FUNCTION = """
CREATE FUNCTION notifications_keep_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ledger_keys (dedupe_key, notification_id, created_at, tenant_id)
  SELECT dedupe_key, id, created_at, tenant_id FROM new_rows ON CONFLICT (dedupe_key) DO NOTHING;
  IF EXISTS (SELECT 1 FROM new_rows n JOIN ledger_keys k ON k.dedupe_key = n.dedupe_key
             WHERE k.notification_id <> n.id OR k.created_at <> n.created_at) THEN
    RAISE EXCEPTION 'duplicate key value violates unique constraint "ledger_keys_pkey"'
      USING ERRCODE = 'unique_violation', CONSTRAINT = 'ledger_keys_pkey',
            DETAIL = 'a message with this dedupe_key is already in the ledger';
  END IF;
  RETURN NULL;
END $$"""
KEEP_KEYS_TRIGGER = ("CREATE TRIGGER notifications_keep_keys AFTER INSERT ON notifications "
                     "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION notifications_keep_keys()")


def _add(m: date, n: int) -> date:
    y, mo = divmod(m.month - 1 + n, 12)
    return date(m.year + y, mo + 1, 1)


def _months(first: date | None) -> list[date]:
    today = datetime.now(UTC).date().replace(day=1)
    m = min(first, today) if first is not None else today
    out = []
    while m <= _add(today, AHEAD):
        out.append(m)
        m = _add(m, 1)
    return out


def _retire(name: str) -> None:
    """The current `notifications` out of the way: renamed, its indexes dropped (their names are the new table's),
    the foreign keys into it dropped (they come back on the new table)."""
    op.execute("ALTER TABLE notification_attempts DROP CONSTRAINT IF EXISTS notification_attempts_notification_id_fkey")
    op.execute("ALTER TABLE balance_entries DROP CONSTRAINT IF EXISTS balance_entries_notification_id_fkey")
    op.execute("ALTER TABLE otp_codes DROP CONSTRAINT IF EXISTS otp_codes_notification_id_fkey")
    op.execute(f"ALTER TABLE notifications RENAME TO {name}")
    for ix, _ in INDEXES:
        op.execute(f"DROP INDEX {ix}")
    op.execute(f"ALTER TABLE {name} RENAME CONSTRAINT notifications_pkey TO {name}_pkey")


def upgrade() -> None:
    old = "notifications_unpartitioned"
    op.create_table(
        "ledger_keys",
        sa.Column("dedupe_key", sa.Text(), nullable=False),
        sa.Column("notification_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("dedupe_key", name="ledger_keys_pkey"),
    )
    op.create_index("ix_ledger_keys_notification_id", "ledger_keys", ["notification_id"])
    # Each archived month's file: a message id of that month answers where it went instead of "not found".
    op.create_table(
        "ledger_archives",
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("actor_ref", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("month", "file", name="ledger_archives_pkey"),
    )
    _retire(old)
    op.execute(f"ALTER TABLE {old} DROP CONSTRAINT notifications_dedupe_key_key")
    op.execute("DROP INDEX notifications_provider_key")
    op.execute(f"""
        CREATE TABLE notifications (
          LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
          CONSTRAINT notifications_pkey PRIMARY KEY (id, created_at)
        ) PARTITION BY RANGE (created_at)""")
    for ix, definition in INDEXES:
        op.execute(f"CREATE INDEX {ix} ON notifications {definition}")
    op.execute("CREATE INDEX notifications_provider_key ON notifications (provider_key) "
               "WHERE provider_key IS NOT NULL")
    for fk, definition in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE notifications ADD CONSTRAINT {fk} FOREIGN KEY {definition}")
    got = op.get_bind().execute(sa.text(f"SELECT min(created_at) FROM {old}")).scalar()
    for m in _months(got.astimezone(UTC).date().replace(day=1) if got is not None else None):
        op.execute(f"CREATE TABLE notifications_{m:%Y_%m} PARTITION OF notifications "
                   f"FOR VALUES FROM ('{m.isoformat()} 00:00:00+00') TO ('{_add(m, 1).isoformat()} 00:00:00+00')")
    op.execute("CREATE TABLE notifications_default PARTITION OF notifications DEFAULT")
    op.execute(f"INSERT INTO ledger_keys (dedupe_key, notification_id, created_at, tenant_id) "
               f"SELECT dedupe_key, id, created_at, tenant_id FROM {old}")
    op.execute(f"INSERT INTO notifications SELECT * FROM {old}")
    op.execute(KEEP_KEYS_FUNCTION)
    op.execute(KEEP_KEYS_TRIGGER)
    op.execute("ALTER SEQUENCE notifications_id_seq OWNED BY notifications.id")
    op.execute(f"DROP TABLE {old}")


def downgrade() -> None:
    """Back to one table (every partition's rows, the DEFAULT's included), `dedupe_key` UNIQUE on it again.
    Refused once a month of the ledger has been archived: the archived messages' keys live only in `ledger_keys`
    (dropping it would let a retried request ledger and send them again) and their balance entries name ids the
    old foreign key would refuse."""
    archived = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM ledger_archives")).scalar_one()
    if archived:
        raise RuntimeError(f"refusing to downgrade 0028: {archived} archived month(s) of the ledger keep their "
                           "dedupe keys only in ledger_keys; restore from a backup taken before the archive instead")
    old = "notifications_partitioned"
    op.execute("DROP TRIGGER notifications_keep_keys ON notifications")
    op.execute("DROP FUNCTION notifications_keep_keys()")
    _retire(old)
    op.execute("DROP INDEX notifications_provider_key")
    op.execute(f"""
        CREATE TABLE notifications (
          LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
          CONSTRAINT notifications_pkey PRIMARY KEY (id),
          CONSTRAINT notifications_dedupe_key_key UNIQUE (dedupe_key)
        )""")
    op.execute(f"INSERT INTO notifications SELECT * FROM {old}")
    for ix, definition in INDEXES:
        op.execute(f"CREATE INDEX {ix} ON notifications {definition}")
    op.execute("CREATE UNIQUE INDEX notifications_provider_key ON notifications (provider_key) "
               "WHERE provider_key IS NOT NULL")
    for fk, definition in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE notifications ADD CONSTRAINT {fk} FOREIGN KEY {definition}")
    op.execute("ALTER SEQUENCE notifications_id_seq OWNED BY notifications.id")
    op.execute(f"DROP TABLE {old}")
    op.execute("ALTER TABLE notification_attempts ADD CONSTRAINT notification_attempts_notification_id_fkey "
               "FOREIGN KEY (notification_id) REFERENCES notifications (id)")
    op.execute("ALTER TABLE balance_entries ADD CONSTRAINT balance_entries_notification_id_fkey "
               "FOREIGN KEY (notification_id) REFERENCES notifications (id)")
    op.execute("ALTER TABLE otp_codes ADD CONSTRAINT otp_codes_notification_id_fkey "
               "FOREIGN KEY (notification_id) REFERENCES notifications (id)")
    op.drop_table("ledger_archives")
    op.drop_index("ix_ledger_keys_notification_id", table_name="ledger_keys")
    op.drop_table("ledger_keys")
