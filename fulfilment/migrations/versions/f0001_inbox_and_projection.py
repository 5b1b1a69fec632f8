"""the fulfilment service's tables: inbox, projection, gaps, refusals

Revision ID: f0001
Revises:
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "f0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("event_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_type", sa.Text(), nullable=False),
        sa.Column("aggregate_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", pg.JSONB(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("outcome IN ('applied', 'parked', 'stale')", name="inbox_outcome"),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("inbox_parked", "inbox", ["tenant_id", "aggregate_type", "aggregate_id", "revision"],
                    postgresql_where=sa.text("outcome = 'parked'"))
    op.create_table(
        "fulfilments",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_type", sa.Text(), nullable=False),
        sa.Column("aggregate_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("last_event_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("applied_events", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "aggregate_type", "aggregate_id"),
    )
    op.create_table(
        "gaps",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_type", sa.Text(), nullable=False),
        sa.Column("aggregate_id", sa.Text(), nullable=False),
        sa.Column("missing_revision", sa.Integer(), nullable=False),
        sa.Column("seen_revision", sa.Integer(), nullable=False),
        sa.Column("noticed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "aggregate_type", "aggregate_id", "missing_revision",
                            name="gaps_one_per_revision"),
    )
    op.create_table(
        "refusals",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("event_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("digest_kept", sa.Text(), nullable=False),
        sa.Column("digest_refused", sa.Text(), nullable=False),
        sa.Column("refused_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("refusals")
    op.drop_table("gaps")
    op.drop_table("fulfilments")
    op.drop_index("inbox_parked", table_name="inbox")
    op.drop_table("inbox")
