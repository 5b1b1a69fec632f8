"""the fault switch board, shared by every process of the receiver (one row)

Revision ID: r0002
Revises: r0001
"""
import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision = "r0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receiver_faults",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fail_503", sa.Integer(), server_default="0", nullable=False),
        sa.Column("fail_422", sa.Integer(), server_default="0", nullable=False),
        sa.Column("slow_seconds", sa.Float(), server_default="0", nullable=False),
        sa.Column("accept_then_hang", sa.Integer(), server_default="0", nullable=False),
        sa.Column("accept_then_drop", sa.Integer(), server_default="0", nullable=False),
        sa.Column("receipt_delay", sa.Float(), nullable=True),
        sa.CheckConstraint("id = 1", name="receiver_faults_one_row"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute("INSERT INTO receiver_faults (id) VALUES (1)")


def downgrade() -> None:
    op.drop_table("receiver_faults")
