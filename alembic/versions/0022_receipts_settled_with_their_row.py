"""receipts settled with their row: `delivery_receipts.closed_reason` (why a receipt was settled without effect),
and the receipts the old paths left pending on rows settled since (issue 25, item 2) settled the way the ledger
settles them now (domain/ledger/write.py `settle_receipts`)

Before this, a `failed` receipt kept while its row was owed stayed `applied_at IS NULL` for ever when the row was then
settled by a campaign cancel, a journey supersede, an endpoint's auto-disable or a `delivered` receipt: `outbox
archive` refused its month and every later one. Here each such receipt is applied or closed against how its row ended:
on a DELIVERED row closed (DELIVERED is final); on a SUPPRESSED row closed (nothing was charged: nothing to refund);
on a FAILED row applied (the provider could not deliver it: the row says `undeliverable`, so a replay is a new
message for the provider). No money moves here: none of these rows holds any. What else might be pending on a
settled row (a SENT row: no path leaves one) is left to `outbox check` (invariant 14) to show.

Revision ID: 0022
Revises: 0021
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_STRANDED = """
    FROM notifications n
    WHERE n.id = r.notification_id AND r.applied_at IS NULL AND r.outcome = 'failed'
"""


def upgrade() -> None:
    op.add_column("delivery_receipts", sa.Column("closed_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    op.execute("""
        UPDATE notifications n SET last_error_class = 'undeliverable', review = NULL
        WHERE n.status = 'FAILED' AND EXISTS (
          SELECT 1 FROM delivery_receipts r WHERE r.notification_id = n.id AND r.applied_at IS NULL
            AND r.outcome = 'failed')""")
    op.execute(f"""
        UPDATE delivery_receipts r SET applied_at = now(), closed_reason = CASE n.status
          WHEN 'DELIVERED' THEN 'no longer applies: the provider had said delivered; DELIVERED is final'
          WHEN 'SUPPRESSED' THEN 'no longer applies: the message was settled unsent (' || n.suppressed_reason
                                 || ') before the answer was recorded; nothing was charged'
          END
        {_STRANDED} AND n.status IN ('DELIVERED', 'SUPPRESSED', 'FAILED')""")


def downgrade() -> None:
    op.drop_column("delivery_receipts", "closed_reason")
