"""attempts and receipts partitioned by month (declarative, RANGE), receipt ids kept once in delivery_receipt_keys

`notification_attempts` by its message's month (`notification_created_at`, copied from the message: a month of
attempts is exactly the attempts of that month's messages), `delivery_receipts` by the month it was received. Each
gets a DEFAULT partition (a row of a month not created yet lands there instead of failing the hot path;
`outbox partitions ensure` moves it into its month). Existing rows are moved in this transaction: the old table is
renamed, the partitioned one created under the old names (the id sequences carry on), rows copied, the old dropped.

Revision ID: 0018
Revises: 0017
"""
from __future__ import annotations

from datetime import UTC, date, datetime

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

AHEAD = 3  # months created ahead of the current one (the relay keeps this many ahead afterwards)


def _months(first: date | None) -> list[date]:
    today = datetime.now(UTC).date().replace(day=1)
    m = min(first, today) if first is not None else today
    out = []
    end = _add(today, AHEAD)
    while m <= end:
        out.append(m)
        m = _add(m, 1)
    return out


def _add(m: date, n: int) -> date:
    y, mo = divmod(m.month - 1 + n, 12)
    return date(m.year + y, mo + 1, 1)


def _partitions(parent: str, months: list[date]) -> None:
    for m in months:
        op.execute(f"CREATE TABLE {parent}_{m:%Y_%m} PARTITION OF {parent} "
                   f"FOR VALUES FROM ('{m.isoformat()} 00:00:00+00') TO ('{_add(m, 1).isoformat()} 00:00:00+00')")
    op.execute(f"CREATE TABLE {parent}_default PARTITION OF {parent} DEFAULT")


def _first_month(sql: str) -> date | None:
    got = op.get_bind().execute(sa.text(sql)).scalar()
    return got.date().replace(day=1) if got is not None else None


def upgrade() -> None:
    # ---- notification_attempts ------------------------------------------------------------------------------
    op.execute("ALTER TABLE notification_attempts RENAME TO notification_attempts_unpartitioned")
    op.execute("ALTER TABLE notification_attempts_unpartitioned "
               "RENAME CONSTRAINT notification_attempts_pkey TO notification_attempts_unpartitioned_pkey")
    op.execute("ALTER TABLE notification_attempts_unpartitioned "
               "RENAME CONSTRAINT notification_attempts_once TO notification_attempts_unpartitioned_once")
    op.execute("DROP INDEX notification_attempts_fenced")
    op.execute("DROP INDEX ix_notification_attempts_notification_id")
    op.execute("""
        CREATE TABLE notification_attempts (
          LIKE notification_attempts_unpartitioned INCLUDING DEFAULTS,
          notification_created_at timestamptz NOT NULL,
          CONSTRAINT notification_attempts_pkey PRIMARY KEY (id, notification_created_at),
          CONSTRAINT notification_attempts_once UNIQUE (notification_id, attempt_no, notification_created_at),
          CONSTRAINT notification_attempts_notification_id_fkey FOREIGN KEY (notification_id)
            REFERENCES notifications (id)
        ) PARTITION BY RANGE (notification_created_at)""")
    op.execute("CREATE INDEX notification_attempts_fenced ON notification_attempts (outcome) "
               "WHERE outcome IN ('late_accept', 'stale')")
    op.execute("CREATE INDEX ix_notification_attempts_notification_id ON notification_attempts (notification_id)")
    first = _first_month("SELECT min(n.created_at) FROM notification_attempts_unpartitioned a "
                         "JOIN notifications n ON n.id = a.notification_id")
    _partitions("notification_attempts", _months(first))
    op.execute("""
        INSERT INTO notification_attempts (id, notification_id, attempt_no, worker, started_at, finished_at, outcome,
                                           status_code, error_class, latency_ms, response_excerpt, next_attempt_at,
                                           notification_created_at)
        SELECT a.id, a.notification_id, a.attempt_no, a.worker, a.started_at, a.finished_at, a.outcome,
               a.status_code, a.error_class, a.latency_ms, a.response_excerpt, a.next_attempt_at, n.created_at
        FROM notification_attempts_unpartitioned a JOIN notifications n ON n.id = a.notification_id""")
    op.execute("ALTER SEQUENCE notification_attempts_id_seq OWNED BY notification_attempts.id")
    op.execute("DROP TABLE notification_attempts_unpartitioned")

    # ---- delivery_receipts + delivery_receipt_keys ----------------------------------------------------------
    op.execute("ALTER TABLE delivery_receipts RENAME TO delivery_receipts_unpartitioned")
    op.execute("ALTER TABLE delivery_receipts_unpartitioned "
               "RENAME CONSTRAINT delivery_receipts_pkey TO delivery_receipts_unpartitioned_pkey")
    op.execute("ALTER TABLE delivery_receipts_unpartitioned "
               "RENAME CONSTRAINT delivery_receipts_receipt_id_key TO delivery_receipts_unpartitioned_receipt_id_key")
    op.execute("DROP INDEX delivery_receipts_pending")
    op.execute("DROP INDEX ix_delivery_receipts_provider_reference")
    op.execute("""
        CREATE TABLE delivery_receipts (
          LIKE delivery_receipts_unpartitioned INCLUDING DEFAULTS,
          CONSTRAINT delivery_receipts_pkey PRIMARY KEY (id, received_at)
        ) PARTITION BY RANGE (received_at)""")
    op.execute("CREATE INDEX delivery_receipts_pending ON delivery_receipts (notification_id) "
               "WHERE applied_at IS NULL AND notification_id IS NOT NULL")
    op.execute("CREATE INDEX ix_delivery_receipts_provider_reference ON delivery_receipts (provider_reference)")
    _partitions("delivery_receipts", _months(_first_month(
        "SELECT min(received_at) FROM delivery_receipts_unpartitioned")))
    op.execute("INSERT INTO delivery_receipts SELECT * FROM delivery_receipts_unpartitioned")
    op.execute("ALTER SEQUENCE delivery_receipts_id_seq OWNED BY delivery_receipts.id")
    op.create_table(
        "delivery_receipt_keys",
        sa.Column("receipt_id", sa.VARCHAR(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id"),
    )
    op.create_index("ix_delivery_receipt_keys_received_at", "delivery_receipt_keys", ["received_at"])
    op.execute("INSERT INTO delivery_receipt_keys (receipt_id, received_at) "
               "SELECT receipt_id, received_at FROM delivery_receipts_unpartitioned")
    op.execute("DROP TABLE delivery_receipts_unpartitioned")


def downgrade() -> None:
    """Back to one table each (every partition's rows, the DEFAULT's included); the receipt keys go with them."""
    for parent in ("notification_attempts", "delivery_receipts"):
        op.execute(f"ALTER TABLE {parent} RENAME TO {parent}_partitioned")
        op.execute(f"ALTER TABLE {parent}_partitioned RENAME CONSTRAINT {parent}_pkey TO {parent}_partitioned_pkey")
    op.execute("ALTER TABLE notification_attempts_partitioned "
               "RENAME CONSTRAINT notification_attempts_once TO notification_attempts_partitioned_once")
    for ix in ("notification_attempts_fenced", "ix_notification_attempts_notification_id",
               "delivery_receipts_pending", "ix_delivery_receipts_provider_reference"):
        op.execute(f"DROP INDEX {ix}")
    op.execute("""
        CREATE TABLE notification_attempts (
          id integer NOT NULL DEFAULT nextval('notification_attempts_id_seq'),
          notification_id integer NOT NULL REFERENCES notifications (id),
          attempt_no integer NOT NULL, worker varchar NOT NULL, started_at timestamptz NOT NULL,
          finished_at timestamptz, outcome varchar NOT NULL, status_code integer, error_class varchar,
          latency_ms double precision, response_excerpt varchar, next_attempt_at timestamptz,
          CONSTRAINT notification_attempts_pkey PRIMARY KEY (id),
          CONSTRAINT notification_attempts_once UNIQUE (notification_id, attempt_no))""")
    op.execute("INSERT INTO notification_attempts SELECT id, notification_id, attempt_no, worker, started_at, "
               "finished_at, outcome, status_code, error_class, latency_ms, response_excerpt, next_attempt_at "
               "FROM notification_attempts_partitioned")
    op.execute("CREATE INDEX notification_attempts_fenced ON notification_attempts (outcome) "
               "WHERE outcome IN ('late_accept', 'stale')")
    op.execute("CREATE INDEX ix_notification_attempts_notification_id ON notification_attempts (notification_id)")
    op.execute("ALTER SEQUENCE notification_attempts_id_seq OWNED BY notification_attempts.id")
    op.execute("DROP TABLE notification_attempts_partitioned")

    op.execute("""
        CREATE TABLE delivery_receipts (
          id integer NOT NULL DEFAULT nextval('delivery_receipts_id_seq'), receipt_id text NOT NULL,
          provider varchar NOT NULL, provider_reference varchar NOT NULL, outcome varchar NOT NULL,
          received_at timestamptz NOT NULL DEFAULT now(), notification_id bigint, applied_at timestamptz,
          CONSTRAINT delivery_receipts_pkey PRIMARY KEY (id),
          CONSTRAINT delivery_receipts_receipt_id_key UNIQUE (receipt_id))""")
    op.execute("INSERT INTO delivery_receipts SELECT id, receipt_id, provider, provider_reference, outcome, "
               "received_at, notification_id, applied_at FROM delivery_receipts_partitioned")
    op.execute("CREATE INDEX delivery_receipts_pending ON delivery_receipts (notification_id) "
               "WHERE applied_at IS NULL AND notification_id IS NOT NULL")
    op.execute("CREATE INDEX ix_delivery_receipts_provider_reference ON delivery_receipts (provider_reference)")
    op.execute("ALTER SEQUENCE delivery_receipts_id_seq OWNED BY delivery_receipts.id")
    op.execute("DROP TABLE delivery_receipts_partitioned")
    op.drop_index("ix_delivery_receipt_keys_received_at", table_name="delivery_receipt_keys")
    op.drop_table("delivery_receipt_keys")
