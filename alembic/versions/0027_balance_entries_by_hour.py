"""/balance reads the balance by the hour (a page of hours, each hour's charges summed, its entries on demand): the
hours with entries are found by a skip scan down a tenant's entries by time, one probe per hour, and an hour's
entries and sums are a range of the same index — without it each page read and sorted every entry the tenant ever
had (a 0.01 charge per message).

Revision ID: 0027
Revises: 0026
"""
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("balance_entries_tenant_created", "balance_entries", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_index("balance_entries_tenant_created", table_name="balance_entries")
