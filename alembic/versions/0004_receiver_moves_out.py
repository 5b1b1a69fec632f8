"""the receiver moves into its own database: drop its schema from ours

Revision ID: 0004
Revises: 0003

The mock outside world now owns its tables and migrations (receiver/migrations, database `<ours>_receiver`).
What it held here was test-double state (calls and effects of the demo), not our facts.
"""
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP SCHEMA IF EXISTS receiver CASCADE")


def downgrade() -> None:
    # The receiver keeps its own database from now on; an empty schema is all an older revision needs to start.
    op.execute("CREATE SCHEMA IF NOT EXISTS receiver")
