"""what a tenant's owed rows hold, by index: a top-up sums it while it holds the tenant's balance row (the ceiling
counts held money, 0023), and without it that sum read every owed row of every tenant — a campaign's backlog of a
million rows held the balance lock, and with it every reserve of that tenant, one-time codes included

Revision ID: 0024
Revises: 0023
"""
import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_HELD = sa.text("status = 'QUEUED' AND reserved_cents > 0")


def upgrade() -> None:
    op.create_index("notifications_held_by_owed", "notifications", ["tenant_id"], postgresql_where=_HELD)


def downgrade() -> None:
    op.drop_index("notifications_held_by_owed", table_name="notifications", postgresql_where=_HELD)
