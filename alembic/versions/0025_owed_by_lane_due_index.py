"""batched delivery: a lane's due owed rows in due order, by index — a drain loop's claim (domain/delivery/sql.py
`CLAIM_BATCH`) takes the oldest due rows of its lane, ORDER BY next_attempt_at, id LIMIT n, and without it read and
sorted every owed row of the lane (notifications_owed_by_lane is in id order) on every claim

Revision ID: 0025
Revises: 0024
"""
import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_OWED = sa.text("status = 'QUEUED'")


def upgrade() -> None:
    op.create_index("notifications_owed_by_lane_due", "notifications", ["lane", "next_attempt_at", "id"],
                    postgresql_where=_OWED)


def downgrade() -> None:
    op.drop_index("notifications_owed_by_lane_due", table_name="notifications", postgresql_where=_OWED)
