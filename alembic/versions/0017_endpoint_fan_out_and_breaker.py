"""order events fan out to each tenant endpoint as its own ledger row; each endpoint keeps its circuit breaker

`notifications.endpoint_id` names the endpoint a row is for (NULL: the system-wide receiver, or not a webhook). No
foreign key: a row outlives its endpoint (a deleted endpoint's rows keep saying where they were for, and the claim
settles them unsent). The endpoint keeps its run of failed attempts, since when, until when its breaker is open, and
why it was disabled.

Revision ID: 0017
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("notifications", sa.Column("endpoint_id", sa.Integer(), nullable=True))
    op.create_index("notifications_endpoint", "notifications", ["endpoint_id", "id"],
                    postgresql_where=sa.text("endpoint_id IS NOT NULL"))
    op.add_column("webhook_endpoints", sa.Column("failure_streak", sa.Integer(), server_default="0", nullable=False))
    op.add_column("webhook_endpoints", sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("webhook_endpoints", sa.Column("breaker_open_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("webhook_endpoints", sa.Column("disabled_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_endpoints", "disabled_reason")
    op.drop_column("webhook_endpoints", "breaker_open_until")
    op.drop_column("webhook_endpoints", "failing_since")
    op.drop_column("webhook_endpoints", "failure_streak")
    op.drop_index("notifications_endpoint", table_name="notifications",
                  postgresql_where=sa.text("endpoint_id IS NOT NULL"))
    op.drop_column("notifications", "endpoint_id")
