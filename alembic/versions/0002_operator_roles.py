"""operator roles: lane controls act on every tenant, so only on-call may use them

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operators", sa.Column("role", sa.Text(), nullable=False, server_default="operator"))
    op.create_check_constraint("operators_role_known", "operators", "role IN ('operator','oncall')")


def downgrade() -> None:
    op.drop_constraint("operators_role_known", "operators", type_="check")
    op.drop_column("operators", "role")
