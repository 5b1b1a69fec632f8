"""the balance is 64-bit: a refund can never overflow it (issue 25, item 4)

A top-up could bring the 32-bit balance to exactly its maximum while owed rows held money; the next refund raised
NumericValueOutOfRange and the record that refunded was lost (the row stayed owed and was sent again). Top-ups now
count what owed rows hold against the ceiling (domain/ledger/metering.py); this is the database's guarantee
beside it: no credit on the way back can fail for arithmetic, whatever the balance (a SENT row's charge given back
by a failed receipt is not counted by the ceiling). The table holds one row per tenant.

Revision ID: 0023
Revises: 0022
"""
import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("balances", "balance_cents", type_=sa.BigInteger(), existing_type=sa.Integer(),
                    existing_nullable=False)


def downgrade() -> None:
    # Refused by PostgreSQL (integer out of range) if a balance has passed the 32-bit range: nothing is truncated.
    op.alter_column("balances", "balance_cents", type_=sa.Integer(), existing_type=sa.BigInteger(),
                    existing_nullable=False)
