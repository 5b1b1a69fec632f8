"""a message's bounces by index: invariant 9 asks, for each accepted attempt older than a replay, whether a failed
receipt was applied since — without it, each such check read every receipt of the month partitions

Revision ID: 0021
Revises: 0020
"""
import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_BOUNCED = sa.text("outcome = 'failed' AND notification_id IS NOT NULL")


def upgrade() -> None:
    op.create_index("delivery_receipts_bounced", "delivery_receipts", ["notification_id"], postgresql_where=_BOUNCED)


def downgrade() -> None:
    op.drop_index("delivery_receipts_bounced", table_name="delivery_receipts", postgresql_where=_BOUNCED)
