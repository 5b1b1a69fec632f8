"""ops charts from a rollup: each finished point of /ops' charts is computed once and kept; the points still
moving are computed from the ledger through an index on when a message left the owed set

Revision ID: 0020
Revises: 0019
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_DONE_AT = sa.text("coalesce(sent_at, settled_at)")


def upgrade() -> None:
    op.create_index("notifications_done_at", "notifications", [_DONE_AT],
                    postgresql_where=sa.text("coalesce(sent_at, settled_at) IS NOT NULL"))
    op.create_table(
        "ops_series_points",
        sa.Column("scope", sa.Integer(), nullable=False),
        sa.Column("step_minutes", sa.Integer(), nullable=False),
        sa.Column("t", sa.DateTime(timezone=True), nullable=False),
        sa.Column("depth", sa.BigInteger(), nullable=False),
        sa.Column("oldest_seconds", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("scope", "step_minutes", "t"),
    )


def downgrade() -> None:
    op.drop_table("ops_series_points")
    op.drop_index("notifications_done_at", table_name="notifications",
                  postgresql_where=sa.text("coalesce(sent_at, settled_at) IS NOT NULL"))
