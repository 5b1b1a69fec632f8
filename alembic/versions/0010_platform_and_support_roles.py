"""platform on-call (no tenant) and support (read-only) roles

Revision ID: 0010
Revises: 0009
"""
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("operators_role_known", "operators", type_="check")
    op.alter_column("operators", "tenant_id", nullable=True)
    op.create_check_constraint(
        "operators_role_known", "operators", "role IN ('support','operator','oncall','platform')")
    # A platform operator belongs to no tenant; every other role belongs to exactly one.
    op.create_check_constraint(
        "operators_platform_has_no_tenant", "operators", "(role = 'platform') = (tenant_id IS NULL)")


def downgrade() -> None:
    op.execute("DELETE FROM operators WHERE role IN ('platform', 'support')")
    op.drop_constraint("operators_platform_has_no_tenant", "operators", type_="check")
    op.drop_constraint("operators_role_known", "operators", type_="check")
    op.alter_column("operators", "tenant_id", nullable=False)
    op.create_check_constraint("operators_role_known", "operators", "role IN ('operator','oncall')")
