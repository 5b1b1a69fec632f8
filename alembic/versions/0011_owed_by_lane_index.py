"""the relay's per-lane window: owed rows of one lane in id order

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("notifications_owed_by_lane", "notifications", ["lane", "id"], unique=False,
                    postgresql_where=sa.text("status = 'QUEUED'"))


def downgrade() -> None:
    op.drop_index("notifications_owed_by_lane", table_name="notifications", postgresql_where=sa.text("status = 'QUEUED'"))
