"""fair bulk lane: the relay finds each (tenant, campaign) flow of owed bulk rows by one index probe, and a tenant
may carry its own bulk pace

Revision ID: 0019
Revises: 0018
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_OWED_BULK = sa.text("status = 'QUEUED' AND lane = 'bulk'")


def upgrade() -> None:
    op.add_column("tenants", sa.Column("bulk_rate_per_second", sa.Float(), nullable=True))
    op.create_check_constraint("tenants_bulk_rate_positive", "tenants",
                               "bulk_rate_per_second IS NULL OR bulk_rate_per_second > 0")
    op.create_index("notifications_owed_bulk_flow", "notifications",
                    ["tenant_id", sa.text("coalesce(campaign_id, 0)"), "id"], postgresql_where=_OWED_BULK)


def downgrade() -> None:
    op.drop_index("notifications_owed_bulk_flow", table_name="notifications", postgresql_where=_OWED_BULK)
    op.drop_constraint("tenants_bulk_rate_positive", "tenants")
    op.drop_column("tenants", "bulk_rate_per_second")
