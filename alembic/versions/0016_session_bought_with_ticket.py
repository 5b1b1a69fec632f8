"""a session remembers the login ticket it was bought with: the tab that logged in adopts it without a reload

Revision ID: 0016
Revises: 0015
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operator_sessions", sa.Column("ticket_hash", sa.Text(), nullable=True))
    op.create_index("operator_sessions_ticket", "operator_sessions", ["ticket_hash"], unique=True,
                    postgresql_where=sa.text("ticket_hash IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("operator_sessions_ticket", table_name="operator_sessions",
                  postgresql_where=sa.text("ticket_hash IS NOT NULL"))
    op.drop_column("operator_sessions", "ticket_hash")
