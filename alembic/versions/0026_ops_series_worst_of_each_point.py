"""/ops' charts keep the worst of each point: the most rows owed at once and the oldest owed age at its oldest over
the point's span (a point read at its end alone showed a 3-minute breach inside a 15-minute point as 0 s), the rows
sent in it and their mean and slowest commit-to-send seconds. Points kept before meant something else (the state at
the point's end, latency in ms): they are let go, and the relay's fill computes them again from the ledger.

Revision ID: 0026
Revises: 0025
"""
import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM ops_series_points")
    for column in ("depth", "oldest_seconds", "latency_ms"):
        op.drop_column("ops_series_points", column)
    op.add_column("ops_series_points", sa.Column("depth_max", sa.BigInteger(), nullable=False))
    op.add_column("ops_series_points", sa.Column("oldest_max_seconds", sa.Float(), nullable=False))
    op.add_column("ops_series_points", sa.Column("sent", sa.BigInteger(), nullable=False))
    op.add_column("ops_series_points", sa.Column("latency_mean_seconds", sa.Float(), nullable=False))
    op.add_column("ops_series_points", sa.Column("latency_max_seconds", sa.Float(), nullable=False))


def downgrade() -> None:
    op.execute("DELETE FROM ops_series_points")
    for column in ("depth_max", "oldest_max_seconds", "sent", "latency_mean_seconds", "latency_max_seconds"):
        op.drop_column("ops_series_points", column)
    op.add_column("ops_series_points", sa.Column("depth", sa.BigInteger(), nullable=False))
    op.add_column("ops_series_points", sa.Column("oldest_seconds", sa.Float(), nullable=False))
    op.add_column("ops_series_points", sa.Column("latency_ms", sa.Float(), nullable=False))
