"""cookie sessions for the dashboard (a login survives a new tab); the next retry kept on each attempt

Revision ID: 0014
Revises: 0013
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Only a hash of the cookie's token is stored: a copy of this table logs nobody in.
    op.create_table(
        "operator_sessions",
        sa.Column("token_hash", sa.String(), nullable=False),
        sa.Column("operator_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), server_default="session", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["operator_id"], ["operators.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index(op.f("ix_operator_sessions_operator_id"), "operator_sessions", ["operator_id"], unique=False)
    # A retry's answer — when the row is owed again — kept on the attempt that caused it (the message page).
    op.add_column("notification_attempts", sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("notification_attempts", "next_attempt_at")
    op.drop_index(op.f("ix_operator_sessions_operator_id"), table_name="operator_sessions")
    op.drop_table("operator_sessions")
