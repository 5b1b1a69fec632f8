"""fenced claims: a claim token on every ledger row, a provider identity per replay, receipts kept until applied

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every claim takes the next token; every write that follows a claim is guarded by it (ARCHITECTURE.md).
    op.add_column("notifications", sa.Column("claim_token", sa.BigInteger(), server_default="0", nullable=False))
    # The idempotency key sent to the provider when it is not the dedupe key: a replay of a bounced message is a
    # new message for the provider (the old key would answer `already_processed` and send nothing).
    op.add_column("notifications", sa.Column("provider_key", sa.Text(), nullable=True))
    op.add_column("notifications", sa.Column("replayed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("notifications_provider_key", "notifications", ["provider_key"], unique=True,
                    postgresql_where=sa.text("provider_key IS NOT NULL"))
    # A receipt that arrives before the send is recorded is kept (applied_at NULL) and applied when it is.
    op.add_column("delivery_receipts", sa.Column("notification_id", sa.BigInteger(), nullable=True))
    op.add_column("delivery_receipts", sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE delivery_receipts SET applied_at = received_at")
    # The fence at work, counted for /metrics: late truths recorded and stale writes refused.
    op.create_index("notification_attempts_fenced", "notification_attempts", ["outcome"], unique=False,
                    postgresql_where=sa.text("outcome IN ('late_accept', 'stale')"))
    op.create_index("delivery_receipts_pending", "delivery_receipts", ["notification_id"], unique=False,
                    postgresql_where=sa.text("applied_at IS NULL AND notification_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("notification_attempts_fenced", table_name="notification_attempts",
                  postgresql_where=sa.text("outcome IN ('late_accept', 'stale')"))
    op.drop_index("delivery_receipts_pending", table_name="delivery_receipts",
                  postgresql_where=sa.text("applied_at IS NULL AND notification_id IS NOT NULL"))
    op.drop_column("delivery_receipts", "applied_at")
    op.drop_column("delivery_receipts", "notification_id")
    op.drop_index("notifications_provider_key", table_name="notifications",
                  postgresql_where=sa.text("provider_key IS NOT NULL"))
    op.drop_column("notifications", "replayed_at")
    op.drop_column("notifications", "provider_key")
    op.drop_column("notifications", "claim_token")
