"""journeys: a nudge's ledger rows point at their intent; leads have an advisor

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("leads", sa.Column("advisor_ref", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    op.add_column("notifications", sa.Column("intent_id", sa.BigInteger(), nullable=True))
    op.create_foreign_key("notifications_intent_id_fkey", "notifications", "lead_notification_intents",
                          ["intent_id"], ["id"])
    op.create_index("ix_notifications_intent_id", "notifications", ["intent_id"])
    # The link now runs from the ledger rows to their intent (one intent, two channels).
    op.drop_column("lead_notification_intents", "notification_id")


def downgrade() -> None:
    op.add_column("lead_notification_intents", sa.Column("notification_id", sa.Integer(), nullable=True))
    op.drop_index("ix_notifications_intent_id", table_name="notifications")
    op.drop_constraint("notifications_intent_id_fkey", "notifications", type_="foreignkey")
    op.drop_column("notifications", "intent_id")
    op.drop_column("leads", "advisor_ref")
